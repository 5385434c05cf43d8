"""Validate a whole ZooKeeper tree against ``zk_schemas/``.

Every znode that ``index.json`` knows is decoded with its codec (which validates against the schema);
null-data znodes must carry no data.  Znodes the index does not know are reported only inside the subtrees the
project writes (``owned_roots`` in the index: ``/brokers``, ``/controller``, ``/config``, ``/admin``,
``/kafkatier``, ...); elsewhere (``/zookeeper``, ``/consumers``, ...) they are ignored and not walked.
"""
from __future__ import annotations

import posixpath

import attrs
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from kafkatier.zk.codecs import MalformedZNodeError, decode_path
from kafkatier.zk.fenced import read_retrying
from kafkatier.zk.schemas import load_index


@attrs.frozen
class Problem:
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def _leads_to_owned(owned_roots: tuple[str, ...], path: str) -> bool:
    return path == "/" or any(r.startswith(path.rstrip("/") + "/") for r in owned_roots)


def validate_tree(client: KazooClient, root: str = "/") -> list[Problem]:
    """Walk the tree under ``root`` (inclusive) and return every problem found, in path order.  Nodes that
    vanish during the walk are skipped."""
    index = load_index()
    problems: list[Problem] = []
    stack = [root if root == "/" else root.rstrip("/")]
    while stack:
        path = stack.pop()
        try:
            data, stat = read_retrying(client.get, path)
            children = read_retrying(client.get_children, path)
        except NoNodeError:
            continue
        rule = index.match(path) if path != "/" else None
        owned = index.is_owned(path)
        if rule is not None or owned or _leads_to_owned(index.owned_roots, path):
            stack.extend(posixpath.join(path, c) for c in sorted(children, reverse=True))
        if rule is None:
            if owned:
                problems.append(Problem(path, "unknown znode: no entry in zk_schemas/index.json"))
            continue
        try:
            decode_path(path, data, stat)
        except MalformedZNodeError as e:
            problems.append(Problem(path, e.reason))
    return sorted(problems, key=lambda p: p.path)
