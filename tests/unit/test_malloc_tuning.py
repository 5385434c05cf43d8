"""The broker's glibc allocator thresholds (server/malloc_tuning.py): set on glibc, left alone when the
environment sets glibc's own variables."""
from __future__ import annotations

import platform
import sys

import pytest

from kafkatier.server.malloc_tuning import ENV_OVERRIDES, tune_malloc


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="mallopt's thresholds are glibc's")
def test_it_sets_the_thresholds_on_glibc():
    assert tune_malloc(environ={}) is True
    big = bytearray(1 << 20)   # a record-sized block is still served
    assert len(big) == 1 << 20


@pytest.mark.parametrize("name", ENV_OVERRIDES)
def test_glibcs_own_environment_variables_win(name):
    assert tune_malloc(environ={name: "131072"}) is False
