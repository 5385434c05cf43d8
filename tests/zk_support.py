"""Helpers of the tests against a real ZooKeeper.  Not a test module."""
from __future__ import annotations


def snapshot(client, root: str = "/") -> dict[str, tuple[bytes, int]]:
    """Every znode under ``root`` (itself included) with its data and version: two snapshots compare equal when
    nothing under ``root`` was written."""
    out = {}
    stack = [root]
    while stack:
        p = stack.pop()
        data, stat = client.get(p)
        out[p] = (data, stat.version)
        stack.extend(f"{p.rstrip('/')}/{c}" for c in client.get_children(p))
    return out
