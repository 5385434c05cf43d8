"""RemoteLogSegmentMetadata: Kafka's constructor checks, state transitions, updates and the stored form."""
from __future__ import annotations

import json

import pytest

from kafkatier.log.remote.remote_log_segment_metadata import (
    RemoteLogMetadataError,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
    TopicIdPartition,
    is_valid_partition_transition,
    is_valid_transition,
    new_segment_metadata,
)
from kafkatier.zk import schemas

S = RemoteLogSegmentState
TIP = TopicIdPartition("LWgrMmVrT0a__7a4SasuPA", "orders", 3)


def md(**kw) -> RemoteLogSegmentMetadata:
    args = dict(remote_log_segment_id=RemoteLogSegmentId(TIP, "bCqX9U--S-6U8XUM9II25Q"), start_offset=11,
                end_offset=20, max_timestamp_ms=1700000000000, broker_id=1, event_timestamp_ms=1700000000500,
                segment_size_in_bytes=1020, segment_leader_epochs={0: 11, 2: 15})
    args.update(kw)
    return RemoteLogSegmentMetadata(**args)


def test_new_metadata_starts_copy_started_with_the_tiered_epoch():
    m = new_segment_metadata(RemoteLogSegmentId.generate(TIP), 0, 9, 5, 2, 100, {0: 0}, tiered_epoch=3)
    assert m.state is S.COPY_SEGMENT_STARTED
    assert m.tiered_epoch == 3
    assert len(m.segment_id) == 22 and not m.segment_id.startswith("-")


@pytest.mark.parametrize("kw,message", [
    (dict(start_offset=-1), "Unexpected start offset = -1. StartOffset for a remote segment cannot be negative"),
    (dict(end_offset=10), "Unexpected end offset = 10. EndOffset for a remote segment cannot be less than "
                          "startOffset = 11"),
    (dict(segment_leader_epochs={}), "segmentLeaderEpochs can not be null or empty"),
    (dict(remote_log_segment_id=None), "remoteLogSegmentId can not be null"),
])
def test_constructor_checks_use_kafkas_messages(kw, message):
    with pytest.raises(RemoteLogMetadataError) as e:
        md(**kw)
    assert str(e.value) == message


@pytest.mark.parametrize("source,target", [
    (None, S.COPY_SEGMENT_STARTED),
    (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED),
    (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
    (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED),
    (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED),
    (S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_FINISHED),
])
def test_valid_transitions(source, target):
    assert is_valid_transition(source, target)


@pytest.mark.parametrize("source,target", [
    (None, S.COPY_SEGMENT_FINISHED),
    (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED),
    (S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_STARTED),
    (S.DELETE_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED),
    (S.DELETE_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED),
])
def test_invalid_transitions(source, target):
    assert not is_valid_transition(source, target)


def test_partition_delete_states_follow_kafka():
    P = RemotePartitionDeleteState
    assert [p.value for p in P] == [0, 1, 2]
    assert is_valid_partition_transition(P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED)
    assert not is_valid_partition_transition(P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_FINISHED)


def test_state_ids_are_kafkas():
    assert [(s.name, s.value) for s in S] == [("COPY_SEGMENT_STARTED", 0), ("COPY_SEGMENT_FINISHED", 1),
                                              ("DELETE_SEGMENT_STARTED", 2), ("DELETE_SEGMENT_FINISHED", 3)]


def test_update_changes_state_broker_and_time_only():
    m = md()
    upd = RemoteLogSegmentMetadataUpdate(m.remote_log_segment_id, 1700000009999, S.COPY_SEGMENT_FINISHED, 2)
    new = m.create_with_update(upd)
    assert (new.state, new.broker_id, new.event_timestamp_ms) == (S.COPY_SEGMENT_FINISHED, 2, 1700000009999)
    assert (new.start_offset, new.end_offset, new.tiered_epoch) == (m.start_offset, m.end_offset, m.tiered_epoch)


def test_update_of_another_segment_is_refused():
    other = RemoteLogSegmentMetadataUpdate(RemoteLogSegmentId(TIP, "AAAAAAAAAAAAAAAAAAAAAA"), 1,
                                           S.COPY_SEGMENT_FINISHED, 1)
    with pytest.raises(RemoteLogMetadataError, match="Given rlsmUpdate does not have this instance's "
                                                     "remoteLogSegmentId."):
        md().create_with_update(other)


def test_an_update_cannot_start_a_copy():
    with pytest.raises(RemoteLogMetadataError):
        RemoteLogSegmentMetadataUpdate(md().remote_log_segment_id, 1, S.COPY_SEGMENT_STARTED, 1)


def test_stored_form_round_trips_and_matches_the_schema():
    m = md(tiered_epoch=4, custom_metadata=b"\x00\x01", state=S.COPY_SEGMENT_FINISHED)
    doc = json.loads(m.to_json())
    assert schemas.schema_errors("remote_log_segment_metadata", doc) == []
    assert doc["segment_leader_epochs"] == [{"epoch": 0, "start_offset": 11}, {"epoch": 2, "start_offset": 15}]
    assert doc["state"] == "COPY_SEGMENT_FINISHED" and doc["tiered_epoch"] == 4
    assert RemoteLogSegmentMetadata.from_json(m.to_json()) == m


@pytest.mark.parametrize("data", [b"not json", b"[]", b'{"version":2}', b'{"version":1,"topic":"t"}'])
def test_malformed_stored_form_is_a_clear_error(data):
    with pytest.raises(RemoteLogMetadataError, match="malformed|unsupported version"):
        RemoteLogSegmentMetadata.from_json(data)


def test_printed_like_kafka():
    assert str(TIP) == "LWgrMmVrT0a__7a4SasuPA:orders-3"
    assert "tieredEpoch=0" in str(md()) and "state=COPY_SEGMENT_STARTED" in str(md())
