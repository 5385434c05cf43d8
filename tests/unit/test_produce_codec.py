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
