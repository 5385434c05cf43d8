"""``__consumer_offsets`` value records (``coordinator/group/records.py``): what is written reads back, a null
value is a tombstone, and a version Kafka 3.9 does not write is a MalformedRecordError naming the record."""
from __future__ import annotations

import struct

import pytest

from kafkatier.coordinator.group.records import (GroupRecord, MalformedRecordError, MemberRecord, OffsetAndMetadata,
                                                 group_metadata_value, offset_commit_value, read_group_value,
                                                 read_offset_value)


@pytest.mark.parametrize("offset", [OffsetAndMetadata(5, leader_epoch=2, metadata="m", commit_timestamp=10),
                                    OffsetAndMetadata(5, metadata="m", commit_timestamp=10, expire_timestamp=99)])
def test_offset_values_read_back(offset):
    assert read_offset_value(offset_commit_value(offset)) == offset


def test_group_values_read_back():
    g = GroupRecord("consumer", 3, "range", "m1", 77,
                    (MemberRecord("m1", None, "c", "/127.0.0.1", 300, 100, b"sub", b"asg"),))
    assert read_group_value(group_metadata_value(g)) == g


def test_a_null_value_is_a_tombstone():
    assert read_offset_value(None) is None and read_group_value(None) is None


@pytest.mark.parametrize("read, what", [(read_offset_value, "OffsetCommitValue"),
                                        (read_group_value, "GroupMetadataValue")])
@pytest.mark.parametrize("version", [-1, 4])
def test_an_unknown_version_is_malformed(read, what, version):
    with pytest.raises(MalformedRecordError, match=f"unknown {what} version {version}"):
        read(struct.pack(">h", version) + b"\0" * 40)
