"""The purpose-built Produce response codec (protocol/produce_codec.py) and the framing of protocol/codec.py
write exactly what kafka-python's generated encoder writes."""
from __future__ import annotations

import pytest
from kafka.protocol.api_header import RequestHeader
from kafka.protocol.producer import ProduceResponse

from kafkatier.protocol import codec, produce_codec
from kafkatier.protocol.build import build

TOPICS = [
    ("t\u00e9", [(0, 0, 5, -1, 0, [], None), (3, 87, -1, -1, -1, [(1, "bad record"), (4, None)], "One or more")]),
    ("other", [(1, 6, -1, -1, -1, [], None)]),
]


def kafka_python(version: int, topics) -> ProduceResponse:
    return build(ProduceResponse, version, {"throttle_time_ms": 0, "responses": [
        {"name": name, "partition_responses": [
            {"index": i, "error_code": e, "base_offset": b, "log_append_time_ms": a, "log_start_offset": s,
             "record_errors": [{"batch_index": bi, "batch_index_error_message": m} for bi, m in re],
             "error_message": msg} for i, e, b, a, s, re, msg in parts]} for name, parts in topics]})


@pytest.mark.parametrize("version", range(produce_codec.MIN_VERSION, produce_codec.MAX_VERSION + 1))
@pytest.mark.parametrize("topics", [TOPICS, [], [("x", [])]])
def test_produce_response_body_matches_kafka_python(version, topics):
    expected = bytes(kafka_python(version, topics).encode(version=version))
    assert produce_codec.encode_produce_response(version, topics) == expected


@pytest.mark.parametrize("version", [3, 8, 9, 11])
def test_framed_responses_match_kafka_python(version):
    header = RequestHeader(request_api_key=0, request_api_version=version, correlation_id=4242, client_id="c")
    reference = kafka_python(version, TOPICS)
    reference.with_header(correlation_id=4242)
    expected = bytes(reference.encode(header=True, framed=True))
    encoded = codec.EncodedResponse(0, version, produce_codec.encode_produce_response(version, TOPICS))
    assert bytes(codec.encode_response(header, encoded)) == expected
    assert bytes(codec.encode_response(header, kafka_python(version, TOPICS))) == expected
    assert codec.top_level_error(encoded) == 0
    assert encoded.responses[1].name == "other"   # the object, decoded on demand


def test_versions_outside_the_codec_are_refused():
    with pytest.raises(ValueError):
        produce_codec.encode_produce_response(13, [])


# --- the request header (built without kafka-python's generic constructor) -------------------------

def produce_request(version: int, topics, txn_id=None, acks=-1):
    from kafka.protocol.producer import ProduceRequest
    T = ProduceRequest.TopicProduceData
    return ProduceRequest[version](transactional_id=txn_id, acks=acks, timeout_ms=30000, topic_data=[
        T(version=version, name=name, partition_data=[T.PartitionProduceData(version=version, index=i, records=r)
                                                      for i, r in parts]) for name, parts in topics])


REQUEST_TOPICS = [("t\u00e9", [(0, b"\x00" * 70), (5, None)]), ("u", []), ("v", [(2, b"")])]


def test_decode_request_keeps_the_header():
    req = produce_request(9, REQUEST_TOPICS, acks=0)
    req.with_header(correlation_id=11, client_id="cid")
    frame = bytes(req.encode(header=True, framed=True))[4:]
    header, decoded = codec.decode_request(frame)
    assert (header.request_api_key, header.request_api_version, header.correlation_id, header.client_id) == \
        (0, 9, 11, "cid")
    assert decoded._header is header and not decoded.expect_response()
    assert decoded == req   # records compare by content (views of the frame, below)


# --- the request body (records left in the frame) -------------------------------------------------------

def generic_decode(version: int, body):
    cls = codec.request_class(0)
    flexible = cls.flexible_version_q(version)
    return cls._struct.compiled_decode_from(version, compact=flexible, tagged=flexible, data_class=cls)(body, 0)


def marks(obj) -> tuple:
    return type(obj), obj._version, obj.tags, obj.unknown_tags


@pytest.mark.parametrize("version", range(produce_codec.MIN_VERSION, produce_codec.MAX_VERSION + 1))
@pytest.mark.parametrize("txn_id", [None, "txn-\u00e9"])
def test_produce_request_decoded_as_kafka_python_decodes_it(version, txn_id):
    req = produce_request(version, REQUEST_TOPICS, txn_id=txn_id)
    req.with_header(correlation_id=3, client_id="c")
    frame = bytearray(req.encode(header=True, framed=True))[4:]
    _header, decoded = codec.decode_request(frame)
    body = bytes(req.encode(version=version))
    reference, end = generic_decode(version, memoryview(body))
    assert end == len(body) and decoded == reference
    assert marks(decoded) == marks(reference)
    for t, rt in zip(decoded.topic_data, reference.topic_data):
        assert marks(t) == marks(rt)
        for p, rp in zip(t.partition_data, rt.partition_data):
            assert marks(p) == marks(rp)
            assert (p.records is None) == (rp.records is None)
            if p.records is not None:   # a view of the frame, not a copy
                assert isinstance(p.records, memoryview) and p.records.obj is frame and bytes(p.records) == rp.records


def test_tagged_fields_go_to_kafka_pythons_decoder():
    req = produce_request(9, [("t", [(0, b"\x01" * 20)])])
    body = bytearray(req.encode(version=9))
    # the partition's empty tagged-field section (after its 20 record bytes) becomes one unknown tag (5: b"z")
    at = body.index(b"\x01" * 20) + 20
    assert body[at] == 0
    body[at:at + 1] = b"\x01\x05\x01z"
    head = produce_request(9, [])
    head.with_header(correlation_id=3, client_id="c")
    head_bytes = bytes(head.encode(header=True, framed=True))[4:]
    frame = head_bytes[:len(head_bytes) - len(bytes(head.encode(version=9)))] + bytes(body)
    _header, decoded = codec.decode_request(frame)
    reference, _end = generic_decode(9, memoryview(bytes(body)))
    assert decoded == reference
    assert decoded.topic_data[0].partition_data[0].unknown_tags == reference.topic_data[0].partition_data[0].unknown_tags


@pytest.mark.parametrize("version", [8, 9])
@pytest.mark.parametrize("cut", [1, 5, 30, 75])
def test_truncated_produce_requests_are_refused_as_before(version, cut):
    req = produce_request(version, REQUEST_TOPICS)
    req.with_header(correlation_id=3, client_id="c")
    frame = bytes(req.encode(header=True, framed=True))[4:-cut]
    with pytest.raises(codec.FrameError) as ours:
        codec.decode_request(frame)
    head_len = len(frame) + cut - len(bytes(req.encode(version=version)))
    try:
        request, end = generic_decode(version, memoryview(frame)[head_len:])
    except Exception as e:   # noqa: BLE001 - the generic decoder's own error, reported by decode_request
        assert type(e).__name__ in str(ours.value)
    else:
        assert end > len(frame) - head_len and "truncated" in str(ours.value)


# --- Fetch responses ------------------------------------------------------------------------------------------

FETCH_TOPICS = [
    ("t\u00e9", [(0, 0, 10, 10, 0, [], b"\x01" * 90), (1, 0, 5, 3, 0, [(7, 1), (9, 2)], b""),
                 (2, 6, -1, -1, -1, None, b"")]),
    ("u", [(4, 0, 0, 0, 0, [], None)]),
    ("w", []),
]


def fetch_reference(version: int, error: int, session: int, topics):
    from kafka.protocol.consumer import FetchResponse
    return build(FetchResponse, version, {"throttle_time_ms": 0, "error_code": error, "session_id": session,
                                          "responses": [{"topic": name, "partitions": [
                                              {"partition_index": i, "error_code": e, "high_watermark": hw,
                                               "last_stable_offset": lso, "log_start_offset": ls,
                                               "aborted_transactions": None if ab is None else [
                                                   {"producer_id": p, "first_offset": f} for p, f in ab],
                                               "preferred_read_replica": -1, "records": rec}
                                              for i, e, hw, lso, ls, ab, rec in parts]}
                                              for name, parts in topics]})


@pytest.mark.parametrize("version", range(4, 13))
@pytest.mark.parametrize("topics", [FETCH_TOPICS, []])
def test_fetch_response_body_matches_kafka_python(version, topics):
    from kafkatier.protocol import fetch_codec
    expected = bytes(fetch_reference(version, 0, 77, topics).encode(version=version))
    assert fetch_codec.encode_fetch_response(version, 0, 77, topics) == expected
    header = RequestHeader(request_api_key=1, request_api_version=version, correlation_id=5, client_id="c")
    framed = codec.encode_response(header, codec.EncodedResponse(1, version, expected))
    assert bytes(framed) == bytes(codec.encode_response(header, fetch_reference(version, 0, 77, topics)))


@pytest.mark.parametrize("version", [4, 11, 12])
def test_response_buffers_join_to_the_encoded_frame_and_leave_record_data_uncopied(version):
    big = [b"R" * (70 * 1024), b"S" * (64 * 1024)]
    topics = [("t", [(0, 0, 10, 10, 0, None, big[0]), (1, 0, 10, 10, 0, [], b"tiny"), (2, 0, 10, 10, 0, None, big[1])])]
    from kafkatier.protocol import fetch_codec
    response = codec.EncodedResponse(1, version, fetch_codec.fetch_response_parts(version, 0, 77, topics))
    header = RequestHeader(request_api_key=1, request_api_version=version, correlation_id=5, client_id="c")
    buffers = codec.response_buffers(header, response)
    assert b"".join(buffers) == bytes(codec.encode_response(header, response))
    assert [b for b in buffers if b is big[0] or b is big[1]] == big   # the same objects: not copied
    assert all(len(b) for b in buffers)


# --- the follower's Fetch v11 ---------------------------------------------------------------------------------

def test_follower_fetch_request_matches_kafka_python():
    from kafka.protocol.consumer import FetchRequest

    from kafkatier.protocol import fetch_codec
    v = 11
    P, T, F = FetchRequest.FetchTopic.FetchPartition, FetchRequest.FetchTopic, FetchRequest.ForgottenTopic
    topics = [("t\u00e9", [(0, 3, 100, 0, 1048576), (2, 3, 7, 5, 1048576)]), ("u", [])]
    forgotten = [("gone", [1, 4])]
    reference = FetchRequest[v](
        replica_id=2, max_wait_ms=500, min_bytes=1, max_bytes=10 << 20, isolation_level=0, session_id=9,
        session_epoch=4, topics=[T(version=v, topic=t, partitions=[
            P(version=v, partition=p, current_leader_epoch=e, fetch_offset=o, log_start_offset=s, partition_max_bytes=m)
            for p, e, o, s, m in ps]) for t, ps in topics],
        forgotten_topics_data=[F(version=v, topic=t, partitions=ps) for t, ps in forgotten], rack_id="")
    assert fetch_codec.encode_fetch_request_v11(2, 500, 1, 10 << 20, 0, 9, 4, topics, forgotten) == \
        bytes(reference.encode(version=v))


def test_asking_whether_an_encoded_response_is_a_future_does_not_decode_it(monkeypatch):
    """The network layer asks every handler result ``hasattr(result, "add_done_callback")``; for a body encoded
    ready to send, that question must not decode it into kafka-python's object (it did, for every produce)."""
    encoded = codec.EncodedResponse(0, 9, produce_codec.encode_produce_response(9, TOPICS))

    def refuse(self):
        raise AssertionError("decoded")
    monkeypatch.setattr(codec.EncodedResponse, "decoded", refuse)
    assert not hasattr(encoded, "add_done_callback")
    assert not hasattr(encoded, "__len__")
    assert codec.top_level_error(encoded) == 0
    with pytest.raises(AssertionError, match="decoded"):
        encoded.responses   # a message field is still read from the decoded object
