"""ZooKeeper's ``multiRead`` (OpCode 22, ZooKeeper 3.6+) as a kazoo request: many getData in one round trip.

kazoo has no multiRead; it sends any request object that has a ``type``, ``serialize()`` and a
``deserialize(buffer, offset)`` classmethod, so this module supplies one (jute layout below) and
:func:`multi_read_async` queues it on a client's connection like kazoo's own ``get_async`` does.

Why: the controller's failover reads every topic and partition-state znode.  Read one ``get_async`` per znode,
kazoo spends ~100 µs of Python per reply (a select, two recvs, an ``AsyncResult`` woken per reply), ~2 s for
20,000 znodes on a quiet machine and several times that inside a busy broker, where each reply waits for the
GIL.  One multiRead of 200 paths costs one reply: the same 20,000 znodes in ~50 ms.

Semantics (ZooKeeper's ``ZooKeeper.multi`` with read ops): unlike a write multi it is not atomic and never
fails as a whole for one op: each op has its own result, ``(data, stat)`` or the op's error code (NoNode for a
missing znode).  No watch is set.  The reply header carries an error only for the request as a whole
(connection loss, session expiry, an unauthorised path, a server without multiRead: ``UnimplementedError``).

Jute layout (``MultiOperationRecord`` / ``MultiResponse``):
request  = { MultiHeader(type=4 getData, done=false, err=-1) GetDataRequest(path: ustring, watch: bool) }*
           MultiHeader(type=-1, done=true, err=-1)
response = { MultiHeader(type=4, done=false, err=0) GetDataResponse(data: buffer, stat: Stat)
           | MultiHeader(type=-1, done=false, err=code) ErrorResponse(err: int) }*
           MultiHeader(type=-1, done=true, err=-1)
"""
from __future__ import annotations

from typing import Any, NamedTuple, Sequence

from kazoo.exceptions import EXCEPTIONS
from kazoo.protocol.serialization import ZnodeStat, int_struct, multiheader_struct, stat_struct, write_string

OP_MULTI_READ = 22
OP_GET_DATA = 4
OP_ERROR = -1

_int = int_struct
_header = multiheader_struct
_stat = stat_struct
_GET_DATA_HEADER = _header.pack(OP_GET_DATA, False, -1)
_END = _header.pack(-1, True, -1)


class MultiReadError(Exception):
    """The error of one op in a multiRead (``code`` is ZooKeeper's); ``exception()`` is kazoo's exception."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code

    def exception(self) -> Exception:
        return EXCEPTIONS[self.code]()


class MultiRead(NamedTuple):
    """A kazoo request: getData of each of ``paths`` (already chrooted) in one round trip."""

    paths: Sequence[str]
    type = OP_MULTI_READ  # kazoo's connection reads ``request.type``

    def serialize(self) -> bytearray:
        b = bytearray()
        for path in self.paths:
            b += _GET_DATA_HEADER
            b += write_string(path)
            b.append(0)  # no watch
        b += _END
        return b

    @classmethod
    def deserialize(cls, buf: bytes, offset: int) -> list[tuple[bytes, Any] | MultiReadError]:
        out: list[tuple[bytes, Any] | MultiReadError] = []
        unpack_header, unpack_int, unpack_stat = _header.unpack_from, _int.unpack_from, _stat.unpack_from
        stat_size = _stat.size
        while True:
            op, done, err = unpack_header(buf, offset)
            offset += _header.size
            if done:
                return out
            if op == OP_GET_DATA:
                (n,) = unpack_int(buf, offset)
                offset += 4
                data = None if n < 0 else bytes(buf[offset:offset + n])
                offset += max(n, 0)
                out.append((data, ZnodeStat._make(unpack_stat(buf, offset))))
                offset += stat_size
            elif op == OP_ERROR:
                (code,) = unpack_int(buf, offset)
                offset += 4
                out.append(MultiReadError(code))
            else:
                raise ValueError(f"unexpected op type {op} in a multiRead response")


def multi_read_async(client, paths: Sequence[str]):
    """Queue a multiRead of ``paths`` (client-relative: the client's chroot is prefixed) on ``client``'s
    connection; returns kazoo's async result, whose value is one ``(data, stat)`` or :class:`MultiReadError`
    per path, in order."""
    chroot = client.chroot or ""
    full = [chroot + p if p != "/" else (chroot or "/") for p in paths] if chroot else list(paths)
    result = client.handler.async_result()
    client._call(MultiRead(full), result)  # kazoo's queueing entry point, as get_async
    return result
