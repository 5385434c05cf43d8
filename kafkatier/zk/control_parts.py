"""Control requests and responses of any size: a body too large for one znode is compressed and split into
part znodes that the request (or response) znode refers to.

Layout (per broker; see docs/architecture.md#control-channel-over-zookeeper)::

    /kafkatier/control/<brokerId>/parts/<token>-NNNNN        control_part.json, NNNNN = 0 .. count-1
    /kafkatier/control/<brokerId>/requests/request_N         control_request.json with "body_parts" instead of "body"
    /kafkatier/control/<brokerId>/responses/request_N        control_response.json, same choice

The body is serialised as compact JSON, compressed with zlib, and cut into slices of :data:`PART_RAW_BYTES`
(base64 in the part's JSON, so a part stays under :data:`limits.MAX_ZNODE_BYTES`).  The envelope carries a
:class:`BodyParts` reference: token, part count, compressed size and SHA-256.

Ordering makes a partial request invisible: every part is written before the envelope that refers to it, and the
reader acts only on envelopes.  A single multi cannot hold the parts (ZooKeeper bounds the whole transaction by
``jute.maxbuffer``), so the writer creates them one by one and a new controller deletes leftover parts together
with the stale queues.  :func:`join_body` refuses a missing, foreign, reordered or corrupted part with
:class:`MalformedZNodeError`; the broker answers such a request with INVALID_REQUEST, the controller resends.
"""
from __future__ import annotations

import hashlib
import json
import uuid
import zlib
from typing import Any, Callable, Sequence

from kafkatier.zk import paths
from kafkatier.zk.codecs import BODY_ENCODING as ENCODING
from kafkatier.zk.codecs import BodyPart, BodyParts, MalformedZNodeError, dump_body

PART_RAW_BYTES = 700_000        # base64 makes 933,336 bytes, plus a small header: under MAX_ZNODE_BYTES
COMPRESSION_LEVEL = 3  # 3x faster than 6 on control bodies, 5% larger


def part_name(token: str, index: int) -> str:
    return f"{token}-{index:05d}"


def new_token() -> str:
    return uuid.uuid4().hex


def split_body(body: dict[str, Any], token: str | None = None, part_bytes: int = PART_RAW_BYTES,
               text: str | None = None) -> tuple[BodyParts, list[BodyPart]]:
    """Compress ``body`` and cut it into parts; returns the envelope reference and the parts, in order.
    ``text``: the body already serialised (``codecs.dump_body``), not serialised again."""
    if not 1 <= part_bytes <= PART_RAW_BYTES:
        raise ValueError(f"part_bytes must be in 1..{PART_RAW_BYTES}, got {part_bytes}")
    token = token or new_token()
    packed = zlib.compress((dump_body(body) if text is None else text).encode("utf-8"), COMPRESSION_LEVEL)
    slices = [packed[i:i + part_bytes] for i in range(0, len(packed), part_bytes)] or [b""]
    ref = BodyParts(token=token, count=len(slices), size=len(packed), sha256=hashlib.sha256(packed).hexdigest())
    return ref, [BodyPart(token=token, index=i, data=s) for i, s in enumerate(slices)]


def join_body(ref: BodyParts, parts: Sequence[BodyPart | None], what: str = "control body") -> dict[str, Any]:
    """The body ``split_body`` produced; :class:`MalformedZNodeError` if any part is missing, belongs to another
    body, is out of place, or the joined bytes fail the size, checksum, decompression or JSON checks."""
    if ref.encoding != ENCODING:
        raise MalformedZNodeError(what, f"unsupported body encoding {ref.encoding!r}")
    if len(parts) != ref.count:
        raise MalformedZNodeError(what, f"expected {ref.count} parts, got {len(parts)}")
    for i, p in enumerate(parts):
        if p is None:
            raise MalformedZNodeError(what, f"part {part_name(ref.token, i)} is missing")
        if p.token != ref.token or p.index != i:
            raise MalformedZNodeError(what, f"part {i} is {part_name(p.token, p.index)}, expected "
                                            f"{part_name(ref.token, i)}")
    packed = b"".join(p.data for p in parts)  # type: ignore[union-attr]
    if len(packed) != ref.size or hashlib.sha256(packed).hexdigest() != ref.sha256:
        raise MalformedZNodeError(what, f"joined parts do not match the envelope (size {len(packed)}, "
                                        f"expected {ref.size}, or checksum differs)")
    try:
        body = json.loads(zlib.decompress(packed).decode("utf-8"))
    except (zlib.error, UnicodeDecodeError, ValueError) as e:
        raise MalformedZNodeError(what, f"body does not decompress to JSON: {e}") from None
    if not isinstance(body, dict):
        raise MalformedZNodeError(what, f"body is a {type(body).__name__}, expected an object")
    return body


# ------------------------------------------------------------------------------------------------ ZooKeeper I/O

def write_parts(create: Callable[[str, bytes], Any], broker_id: int, parts: Sequence[BodyPart]) -> None:
    """Write every part with ``create(path, data)`` (a fenced writer's create for the controller, the broker's
    client for responses).  Call before writing the envelope that refers to them."""
    parent = paths.control_parts(broker_id)
    for p in parts:
        create(f"{parent}/{part_name(p.token, p.index)}", p.encode())


def read_parts(get: Callable[[str], tuple[bytes, Any]], broker_id: int, ref: BodyParts) -> list[BodyPart | None]:
    """Read the parts ``ref`` names with ``get(path)``; a missing part is None, a malformed one raises
    :class:`MalformedZNodeError` (both refused by :func:`join_body`)."""
    from kazoo.exceptions import NoNodeError
    parent = paths.control_parts(broker_id)
    out: list[BodyPart | None] = []
    for name in [part_name(ref.token, i) for i in range(ref.count)]:
        path = f"{parent}/{name}"
        try:
            data, _ = get(path)
        except NoNodeError:
            out.append(None)
            continue
        out.append(BodyPart.decode(data, path=path))
    return out


def part_paths(broker_id: int, ref: BodyParts | None) -> list[str]:
    if ref is None:
        return []
    parent = paths.control_parts(broker_id)
    return [f"{parent}/{n}" for n in [part_name(ref.token, i) for i in range(ref.count)]]
