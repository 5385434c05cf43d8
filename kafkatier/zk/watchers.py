"""ZooKeeper watches and connection states for the modules above ``zk/`` (kazoo's recipes, named once here).

``DataWatch(client, path, func)`` calls ``func(data, stat)`` now and on every change of ``path``;
``ChildrenWatch(client, path, func)`` calls ``func(children)``; either stops when ``func`` returns False.
``ZkState`` is the connection state a session listener receives (``LOST``, ``SUSPENDED``, ``CONNECTED``).
"""
from __future__ import annotations

from kazoo.client import KazooState as ZkState
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

__all__ = ["ChildrenWatch", "DataWatch", "ZkState"]
