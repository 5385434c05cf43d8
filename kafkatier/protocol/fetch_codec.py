"""The Fetch response encoded straight to bytes, without kafka-python's message objects (every consumer and
follower fetch answers through it).

:func:`encode_fetch_response` writes FetchResponse v4-v17 bodies exactly as kafka-python's generated encoder
writes them (``tests/unit/test_produce_codec.py`` compares them byte for byte).  Up to v12 a topic is named by
its name; from v13 (KIP-516) by its topic id, a :class:`uuid.UUID`.  Of the tagged fields the broker writes
``CurrentLeader`` (per partition, v12+, when a partition answer carries one: KIP-951 sets it from v16 on
NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH) and ``NodeEndpoints`` (top level, v16+, when not empty); it never
sets ``DivergingEpoch`` or ``SnapshotId``.  Record bytes are copied once, into the joined body.
"""
from __future__ import annotations

import struct
import uuid
from typing import Iterable, Sequence

from kafkatier.common.byte_utils import write_unsigned_varint as _uvarint

MIN_VERSION, MAX_VERSION = 4, 17
FLEXIBLE_FROM = 12
TOPIC_IDS_FROM = 13      # KIP-516: topics named by id
NODE_ENDPOINTS_FROM = 16  # KIP-951

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_TOP_V7 = struct.Struct(">ihi")       # throttle, error, session id
_PART_V5 = struct.Struct(">ihqqq")    # index, error, high watermark, last stable offset, log start offset
_PART_V4 = struct.Struct(">ihqq")     # index, error, high watermark, last stable offset
_ABORTED = struct.Struct(">qq")
_CURRENT_LEADER = struct.Struct(">BBBiiB")   # 1 tagged field, tag 1, size 9, leader id, leader epoch, no tags


def supports(version: int) -> bool:
    return MIN_VERSION <= version <= MAX_VERSION


def _compact_str(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    data = s.encode("utf-8")
    return _uvarint(len(data) + 1) + data


#: One partition's answer: (index, error code, high watermark, last stable offset, log start offset,
#: aborted transactions as (producer id, first offset) pairs or None, records or None[, preferred read replica
#: [, current leader as (leader id, leader epoch) or None]]).
PartitionAnswer = tuple  # 7 fields; 8 with KIP-392's preferred read replica (-1: none); 9 with KIP-951's leader

#: A node of ``NodeEndpoints`` (v16+): (node id, host, port, rack or None).
NodeEndpoint = tuple


def _node_endpoints(nodes: Sequence[NodeEndpoint]) -> bytes:
    """The top-level tagged field 0 (count, tag, size, then the compact array)."""
    body = [_uvarint(len(nodes) + 1)]
    for node_id, host, port, rack in nodes:
        body += [_I32.pack(node_id), _compact_str(host), _I32.pack(port), _compact_str(rack), b"\x00"]
    data = b"".join(body)
    return b"\x01\x00" + _uvarint(len(data)) + data


def encode_fetch_response(version: int, error_code: int, session_id: int,
                          topics: Iterable[tuple[str | uuid.UUID, Sequence[PartitionAnswer]]],
                          throttle_time_ms: int = 0, node_endpoints: Sequence[NodeEndpoint] = ()) -> bytes:
    """The FetchResponse body at ``version`` (4-17); a topic is its name up to v12, its id from v13."""
    return b"".join(fetch_response_parts(version, error_code, session_id, topics, throttle_time_ms,
                                         node_endpoints))


def fetch_response_parts(version: int, error_code: int, session_id: int,
                         topics: Iterable[tuple[str | uuid.UUID, Sequence[PartitionAnswer]]],
                         throttle_time_ms: int = 0, node_endpoints: Sequence[NodeEndpoint] = ()) -> list:
    """:func:`encode_fetch_response` as a list of pieces (the records not copied), for
    :class:`~kafkatier.protocol.codec.EncodedResponse` to join once with the frame header."""
    if not supports(version):
        raise ValueError(f"FetchResponse v{version} is not encoded here")
    flexible = version >= FLEXIBLE_FROM
    topics = list(topics)
    parts: list = []
    add = parts.append
    if version >= 7:
        add(_TOP_V7.pack(throttle_time_ms, error_code, session_id))
    else:
        add(_I32.pack(throttle_time_ms))
    add(_uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics)))
    part = _PART_V5 if version >= 5 else _PART_V4
    by_id = version >= TOPIC_IDS_FROM
    for name, partitions in topics:
        if by_id:
            add(name.bytes)
        else:
            data = name.encode("utf-8")
            add(_uvarint(len(data) + 1) if flexible else _I16.pack(len(data)))
            add(data)
        add(_uvarint(len(partitions) + 1) if flexible else _I32.pack(len(partitions)))
        for answer in partitions:
            index, error, hw, lso, log_start, aborted, records = answer[:7]
            preferred = answer[7] if len(answer) > 7 else -1
            leader = answer[8] if len(answer) > 8 else None
            if version >= 5:
                add(part.pack(index, error, hw, lso, log_start))
            else:
                add(part.pack(index, error, hw, lso))
            if aborted is None:
                add(b"\x00" if flexible else b"\xff\xff\xff\xff")
            else:
                add(_uvarint(len(aborted) + 1) if flexible else _I32.pack(len(aborted)))
                for pid, first in aborted:
                    add(_ABORTED.pack(pid, first))
                    if flexible:
                        add(b"\x00")
            if version >= 11:
                add(_I32.pack(preferred))  # KIP-392: the replica to fetch from instead, -1 for none
            if records is None:
                add(b"\x00" if flexible else b"\xff\xff\xff\xff")
            else:
                add(_uvarint(len(records) + 1) if flexible else _I32.pack(len(records)))
                add(records)
            if flexible:
                add(_CURRENT_LEADER.pack(1, 1, 9, leader[0], leader[1], 0)
                    if leader is not None and leader != (-1, -1) else b"\x00")
        if flexible:
            add(b"\x00")
    if version >= NODE_ENDPOINTS_FROM and node_endpoints:
        add(_node_endpoints(node_endpoints))
    elif flexible:
        add(b"\x00")
    return parts


# --- the follower's side: FetchRequest v11 out (the answer is read by kafka-python's decoder, as fast as a
# purpose-built one: 6.5 us for three 16 KiB partitions) -------------------------------------------------------

FOLLOWER_VERSION = 11
_REQ_TOP = struct.Struct(">iiiibii")       # replica id, max wait, min bytes, max bytes, isolation, session, epoch
_REQ_PART = struct.Struct(">iiqqi")        # partition, current leader epoch, fetch offset, log start, max bytes


def _str16(s: str) -> bytes:
    data = s.encode("utf-8")
    return _I16.pack(len(data)) + data


def encode_fetch_request_v11(replica_id: int, max_wait_ms: int, min_bytes: int, max_bytes: int,
                             isolation_level: int, session_id: int, session_epoch: int,
                             topics: Sequence[tuple[str, Sequence[tuple[int, int, int, int, int]]]],
                             forgotten: Sequence[tuple[str, Sequence[int]]], rack_id: str = "") -> bytes:
    """A FetchRequest v11 body (what kafka-python's encoder writes; the follower's request). ``topics``:
    (topic, [(partition, current leader epoch, fetch offset, log start offset, partition max bytes)])."""
    parts = [_REQ_TOP.pack(replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, session_id,
                           session_epoch), _I32.pack(len(topics))]
    for topic, partitions in topics:
        parts.append(_str16(topic))
        parts.append(_I32.pack(len(partitions)))
        parts.extend(_REQ_PART.pack(*p) for p in partitions)
    parts.append(_I32.pack(len(forgotten)))
    for topic, ids in forgotten:
        parts.append(_str16(topic))
        parts.append(_I32.pack(len(ids)))
        parts.extend(_I32.pack(i) for i in ids)
    parts.append(_str16(rack_id))
    return b"".join(parts)
