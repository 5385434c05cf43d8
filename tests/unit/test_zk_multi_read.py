"""The jute layout of ZooKeeper's multiRead (kafkatier.zk.multi_read); a real server answers it in
tests/integration/test_zk_batched_reads_writes.py."""
from __future__ import annotations

import struct

import pytest
from kazoo.exceptions import NoAuthError, NoNodeError

from kafkatier.zk.multi_read import MultiRead, MultiReadError

STAT = struct.Struct("!qqqqiiiqiiq")


def _header(op: int, done: bool, err: int) -> bytes:
    return struct.pack("!iBi", op, done, err)


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("!i", len(b)) + b


def test_a_request_is_one_get_data_op_per_path_without_watch_then_the_end_marker():
    assert bytes(MultiRead(["/a", "/bc"]).serialize()) == (
        _header(4, False, -1) + _string("/a") + b"\x00"
        + _header(4, False, -1) + _string("/bc") + b"\x00"
        + _header(-1, True, -1))
    assert MultiRead([]).type == 22


def test_a_response_gives_data_and_stat_or_the_error_of_each_op_in_order():
    stat = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
    body = (_header(4, False, 0) + struct.pack("!i", 3) + b"abc" + STAT.pack(*stat)
            + _header(-1, False, NoNodeError.code) + struct.pack("!i", NoNodeError.code)
            + _header(4, False, 0) + struct.pack("!i", -1) + STAT.pack(*stat)   # a znode with null data
            + _header(-1, False, NoAuthError.code) + struct.pack("!i", NoAuthError.code)
            + _header(-1, True, -1))
    prefix = b"xyz"  # kazoo passes the reply buffer with the offset past the reply header
    got = MultiRead.deserialize(prefix + body, len(prefix))
    assert got[0][0] == b"abc" and got[0][1].version == 5 and got[0][1].mzxid == 2
    assert isinstance(got[1], MultiReadError) and isinstance(got[1].exception(), NoNodeError)
    assert got[2][0] is None
    assert isinstance(got[3].exception(), NoAuthError)
    assert len(got) == 4


def test_a_response_with_an_op_type_a_multiread_cannot_have_is_refused():
    with pytest.raises(ValueError, match="op type 5"):
        MultiRead.deserialize(_header(5, False, 0) + _header(-1, True, -1), 0)
