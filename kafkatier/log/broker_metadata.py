"""``meta.properties`` of a log dir, ZooKeeper-mode version 0 (Kafka's ``BrokerMetadataCheckpoint``)::

    #
    #<date>
    cluster.id=<id>
    version=0
    broker.id=<n>
"""
from __future__ import annotations

import os
import time

from kafkatier.common.atomic_file import atomic_write
from kafkatier.log.errors import InconsistentBrokerIdError, InconsistentClusterIdError

META_PROPERTIES_FILE = "meta.properties"


def _escape(value: str) -> str:
    # Java Properties.store escapes these characters in values.
    out = []
    for ch in value:
        if ch in "\\=:#!":
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def write_meta_properties(log_dir: str, broker_id: int, cluster_id: str | None) -> None:
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    lines = ["#", f"#{stamp}"]
    if cluster_id is not None:
        lines.append(f"cluster.id={_escape(cluster_id)}")
    lines += ["version=0", f"broker.id={broker_id}"]
    atomic_write(os.path.join(log_dir, META_PROPERTIES_FILE), ("\n".join(lines) + "\n").encode("utf-8"))


def read_meta_properties(log_dir: str) -> dict[str, str] | None:
    """Key/value pairs of ``meta.properties`` (Java properties syntax, simple form), None if absent."""
    path = os.path.join(log_dir, META_PROPERTIES_FILE)
    try:
        with open(path, "r", encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        key, value = _split_property(line)
        props[key] = value
    return props


def _split_property(line: str) -> tuple[str, str]:
    key, i = [], 0
    while i < len(line):
        ch = line[i]
        if ch == "\\" and i + 1 < len(line):
            key.append(line[i + 1])
            i += 2
            continue
        if ch in "=: \t":
            break
        key.append(ch)
        i += 1
    rest = line[i:].lstrip(" \t")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t")
    value, j = [], 0
    while j < len(rest):
        if rest[j] == "\\" and j + 1 < len(rest):
            value.append(rest[j + 1])
            j += 2
        else:
            value.append(rest[j])
            j += 1
    return "".join(key), "".join(value)


def ensure_meta_properties(log_dir: str, broker_id: int, cluster_id: str | None) -> None:
    """Write ``meta.properties`` if absent; refuse a dir that belongs to another broker or cluster."""
    props = read_meta_properties(log_dir)
    if props is None:
        write_meta_properties(log_dir, broker_id, cluster_id)
        return
    stored_broker = props.get("broker.id")
    if stored_broker is not None and stored_broker != str(broker_id):
        raise InconsistentBrokerIdError(
            f"Configured broker.id {broker_id} doesn't match stored broker.id Some({stored_broker}) in "
            f"meta.properties. If you moved your data, make sure your configured broker.id matches. If you "
            f"intend to create a new broker, you should remove all data in your data directories (log.dirs).")
    stored_cluster = props.get("cluster.id")
    if cluster_id is not None and stored_cluster is not None and stored_cluster != cluster_id:
        raise InconsistentClusterIdError(
            f"The Cluster ID {cluster_id} doesn't match stored clusterId Some({stored_cluster}) in "
            f"meta.properties. The broker is trying to join the wrong cluster. Configured zookeeper.connect "
            f"may be wrong.")
    if (cluster_id is not None and stored_cluster is None) or stored_broker is None:
        write_meta_properties(log_dir, broker_id, cluster_id)
