"""``segment.start_writeback`` (a KIP-113 move starts the write-back of each copied round): a hint only, so it
never raises and never changes the data."""
from __future__ import annotations

import os
import sys

import pytest

from kafkatier.log import segment


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sync_file_range is Linux's")
def test_linux_has_it():
    assert segment._SYNC_FILE_RANGE is not None


def test_starting_write_back_keeps_the_data(tmp_path):
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.pwrite(fd, b"x" * 10000, 0)
        segment.start_writeback(fd, 0, 10000)
        segment.start_writeback(fd, 5000, 0)
        assert os.pread(fd, 10000, 0) == b"x" * 10000
    finally:
        os.close(fd)


def test_a_bad_descriptor_is_ignored(tmp_path):
    fd = os.open(tmp_path / "g", os.O_RDWR | os.O_CREAT)
    os.close(fd)
    segment.start_writeback(fd, 0, 100)   # EBADF from the kernel: a hint, nothing raised
