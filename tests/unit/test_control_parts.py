"""Split/join codec of control bodies too large for one znode (kafkatier/zk/control_parts.py)."""
from __future__ import annotations

import json
import random
import zlib

import attrs
import pytest

from kafkatier.zk import codecs, control_parts as cp
from kafkatier.zk.limits import MAX_ZNODE_BYTES, ZNodeTooLargeError, check_znode_size


def _update_metadata_body(partitions: int) -> dict:
    return {"controller_id": 1, "controller_epoch": 3, "broker_epoch": 7, "topic_states": [{
        "topic_name": "big", "topic_id": "5b9a1a84-1e45-4c36-a1a8-7c9f6f8c5d55",
        "partition_states": [{"partition_index": p, "controller_epoch": 3, "leader": p % 3 + 1, "leader_epoch": 0,
                              "isr": [p % 3 + 1], "zk_version": 0, "replicas": [p % 3 + 1],
                              "offline_replicas": []} for p in range(partitions)]}]}


def _request(body: dict) -> codecs.ControlRequest:
    return codecs.ControlRequest(api_key=6, api_version=8, api_name="UpdateMetadata", controller_id=1,
                                 controller_epoch=3, broker_epoch=7, body=body)


def test_a_large_update_metadata_does_not_fit_one_znode_and_round_trips_through_parts():
    body = _update_metadata_body(20_000)
    with pytest.raises(ZNodeTooLargeError):
        _request(body).encode()
    ref, parts = cp.split_body(body)
    encoded = [p.encode() for p in parts]
    assert all(len(e) <= MAX_ZNODE_BYTES for e in encoded)
    envelope = attrs.evolve(_request(body), body={}, body_parts=ref).encode()
    back = codecs.decode_path("/kafkatier/control/1/requests/request_0000000001", envelope)
    assert back.body_parts == ref and back.body == {}
    decoded = [codecs.decode_path(f"/kafkatier/control/1/parts/{cp.part_name(ref.token, i)}", e)
               for i, e in enumerate(encoded)]
    assert cp.join_body(ref, decoded) == body


@pytest.mark.parametrize("hex_chars", [0, 1, 2 * cp.PART_RAW_BYTES - 64, 2 * cp.PART_RAW_BYTES + 64,
                                       6 * cp.PART_RAW_BYTES])
def test_default_part_size_boundaries(hex_chars):
    # Random hex compresses about 2:1, so the compressed body lands just under / over a part boundary.
    rnd = random.Random(hex_chars)
    body = {"blob": "".join(rnd.choice("0123456789abcdef") for _ in range(hex_chars))}
    ref, parts = cp.split_body(body)
    assert ref.count == len(parts) == max(1, -(-ref.size // cp.PART_RAW_BYTES))
    assert all(len(p.encode()) <= MAX_ZNODE_BYTES for p in parts)
    assert cp.join_body(ref, parts) == body


def test_parts_larger_than_a_znode_are_refused():
    with pytest.raises(ValueError):
        cp.split_body({}, part_bytes=cp.PART_RAW_BYTES + 1)


def ref_size(body: dict) -> int:
    return len(zlib.compress(json.dumps(body, separators=(",", ":")).encode(), cp.COMPRESSION_LEVEL))


def test_exact_part_size_boundaries():
    body = _update_metadata_body(500)
    size = ref_size(body)
    for part_bytes in (size - 1, size, size + 1, 1):
        ref, parts = cp.split_body(body, part_bytes=part_bytes)
        assert ref.count == -(-size // part_bytes)
        assert cp.join_body(ref, parts) == body


def _split(n_parts: int = 3):
    body = _update_metadata_body(2_000)
    ref, parts = cp.split_body(body, part_bytes=ref_size(body) // n_parts + 1)
    assert ref.count == n_parts
    return body, ref, parts


@pytest.mark.parametrize("damage", ["missing", "swapped", "foreign", "flipped", "truncated", "extra"])
def test_damaged_parts_are_refused_with_a_clear_error(damage):
    _, ref, parts = _split()
    parts = list(parts)
    if damage == "missing":
        parts[1] = None
    elif damage == "swapped":
        parts[0], parts[1] = parts[1], parts[0]
    elif damage == "foreign":
        parts[2] = attrs.evolve(parts[2], token="0" * 32)
    elif damage == "flipped":
        data = bytearray(parts[1].data)
        data[10] ^= 0xFF
        parts[1] = attrs.evolve(parts[1], data=bytes(data))
    elif damage == "truncated":
        parts[2] = attrs.evolve(parts[2], data=parts[2].data[:-1])
    elif damage == "extra":
        parts.append(parts[0])
    with pytest.raises(codecs.MalformedZNodeError):
        cp.join_body(ref, parts, what="/kafkatier/control/1/requests/request_0000000001")


def test_a_checksum_that_matches_garbage_is_still_refused():
    import hashlib
    garbage = b"not zlib at all"
    ref = codecs.BodyParts(token="a" * 32, count=1, size=len(garbage), sha256=hashlib.sha256(garbage).hexdigest())
    with pytest.raises(codecs.MalformedZNodeError, match="decompress"):
        cp.join_body(ref, [cp.BodyPart(token="a" * 32, index=0, data=garbage)])


@pytest.mark.parametrize("data", [b"", b"{}", b'{"version":1,"token":"x","index":0,"data":"AA=="}',
                                  b'{"version":1,"token":"' + b"a" * 32 + b'","index":0,"data":"***"}',
                                  b"\xff\xfe"])
def test_malformed_part_znodes_are_malformed_not_crashes(data):
    with pytest.raises(codecs.MalformedZNodeError):
        cp.BodyPart.decode(data, path="/kafkatier/control/1/parts/x")


def test_an_envelope_with_both_or_neither_body_forms_is_malformed():
    ref, _ = cp.split_body({"a": 1})
    good = json.loads(attrs.evolve(_request({}), body_parts=ref).encode())
    for js in ({**good, "body": {}}, {k: v for k, v in good.items() if k != "body_parts"}):
        with pytest.raises(codecs.MalformedZNodeError):
            codecs.ControlRequest.decode(json.dumps(js).encode())


def test_the_size_limit_is_checked_on_every_fenced_write():
    from kafkatier.zk.fenced import Create, SetData
    big = b"x" * (MAX_ZNODE_BYTES + 1)
    assert check_znode_size(b"x" * MAX_ZNODE_BYTES, "p") is not None
    for op in (Create("/a", big), SetData("/a", big)):
        with pytest.raises(ZNodeTooLargeError, match="/a"):
            op.add_to(object())
