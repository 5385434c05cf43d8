"""Checkpoint files: Kafka's exact text layout, atomic replacement, and Kafka's errors for bad files."""
from __future__ import annotations

import os

import pytest

from kafkatier.log.checkpoints import OffsetCheckpointFile
from kafkatier.log.errors import CheckpointReadError
from kafkatier.log.leader_epoch_cache import EpochEntry, LeaderEpochCheckpointFile
from kafkatier.protocol.errors import Errors


def test_offset_checkpoint_is_byte_exact(tmp_path):
    path = tmp_path / "replication-offset-checkpoint"
    OffsetCheckpointFile(str(path)).write({("foo", 1): 5, ("bar", 2): 10})
    assert path.read_bytes() == b"0\n2\nbar 2 10\nfoo 1 5\n"
    assert OffsetCheckpointFile(str(path)).read() == {("foo", 1): 5, ("bar", 2): 10}
    assert not (tmp_path / "replication-offset-checkpoint.tmp").exists()


def test_reads_kafka_written_example_and_empty_forms(tmp_path):
    path = tmp_path / "log-start-offset-checkpoint"
    path.write_text("0\n2\nfoo 1 5\nbar 2 10\n")  # the example in docs/kip-107-delete-records.md#checkpoint-files
    assert OffsetCheckpointFile(str(path)).read() == {("foo", 1): 5, ("bar", 2): 10}
    path.write_text("0\n2\nfoo\t1   5\nmy.topic-x 0 7\n")  # any whitespace between fields
    assert OffsetCheckpointFile(str(path)).read() == {("foo", 1): 5, ("my.topic-x", 0): 7}
    for text in ("", "0\n", "0\n0\n"):
        path.write_text(text)
        assert OffsetCheckpointFile(str(path)).read() == {}
    OffsetCheckpointFile(str(path)).write({})
    assert path.read_bytes() == b"0\n0\n"


def test_missing_file_is_created_empty(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    assert OffsetCheckpointFile(str(path)).read() == {}
    assert path.exists() and path.read_bytes() == b""


@pytest.mark.parametrize("text,message", [
    ("1\n0\n", "Unrecognised version:1, expected version: 0 in checkpoint file at: {path}"),
    ("0\n1\nfoo 1\n", "Malformed line in checkpoint file [{path}]: foo 1"),
    ("0\n1\nfoo x 5\n", "Malformed line in checkpoint file [{path}]: foo x 5"),
    ("0\n3\nfoo 1 5\n", "Expected [3] entries in checkpoint file [{path}], but found only [1]"),
    ("zero\n", "Malformed line in checkpoint file [{path}]: zero"),
])
def test_malformed_files_raise_kafka_messages(tmp_path, text, message):
    path = tmp_path / "replication-offset-checkpoint"
    path.write_text(text)
    with pytest.raises(CheckpointReadError) as e:
        OffsetCheckpointFile(str(path)).read()
    assert str(e.value) == message.format(path=path)
    assert e.value.error == Errors.KAFKA_STORAGE_ERROR
    assert path.read_text() == text  # nothing lost


def test_write_replaces_atomically(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    cp = OffsetCheckpointFile(str(path))
    cp.write({("a", 0): 1})
    inode_before = os.stat(path).st_ino
    cp.write({("a", 0): 2})
    assert os.stat(path).st_ino != inode_before  # a new file was renamed over the old one
    assert cp.read() == {("a", 0): 2}


def test_leader_epoch_checkpoint_format(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    LeaderEpochCheckpointFile(str(path)).write([EpochEntry(0, 0), EpochEntry(3, 120)])
    assert path.read_bytes() == b"0\n2\n0 0\n3 120\n"
    assert LeaderEpochCheckpointFile(str(path)).read() == [EpochEntry(0, 0), EpochEntry(3, 120)]
