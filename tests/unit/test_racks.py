"""Racks: ``cluster up --rack`` parsing, and KIP-392's preferred read replica in the Fetch response codec."""
from __future__ import annotations

import pytest

from kafkatier.cli.cluster import parse_racks
from kafkatier.cli.main import UsageError
from kafkatier.protocol import fetch_codec


def test_parse_racks():
    assert parse_racks("1=a,2=b, 3=rack-c.1") == {1: "a", 2: "b", 3: "rack-c.1"}


@pytest.mark.parametrize("text,message", [("1=a,2=b c", "invalid rack"), ("1=a,1=b", "twice"),
                                          ("x=a", "BROKER_ID=RACK"), ("1=", "invalid rack"),
                                          ("1=a/b", "invalid rack")])
def test_parse_racks_refuses_bad_input(text, message):
    with pytest.raises(UsageError, match=message):
        parse_racks(text)


def test_fetch_codec_carries_the_preferred_read_replica():
    plain = fetch_codec.encode_fetch_response(11, 0, 0, [("t", [(0, 0, 5, 5, 0, None, b"")])])
    preferred = fetch_codec.encode_fetch_response(11, 0, 0, [("t", [(0, 0, 5, 5, 0, None, b"", 2)])])
    assert b"\xff\xff\xff\xff" in plain and preferred != plain and b"\x00\x00\x00\x02" in preferred
