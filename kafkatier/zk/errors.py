"""ZooKeeper errors, named once for the modules above ``zk/``: they catch these and never import kazoo.

The classes are kazoo's (a kazoo client raises them); this module is the one place the rest of kafkatier gets
them from, so the ZooKeeper client library stays a detail of ``zk/``.
"""
from __future__ import annotations

from kazoo.exceptions import (AuthFailedError, BadVersionError, ConnectionLoss, KazooException, NodeExistsError,
                              NoNodeError, NotEmptyError, OperationTimeoutError, SessionExpiredError)
from kazoo.handlers.threading import KazooTimeoutError

__all__ = ["AuthFailedError", "BadVersionError", "ConnectionLoss", "KazooException", "KazooTimeoutError",
           "NodeExistsError", "NoNodeError", "NotEmptyError", "OperationTimeoutError", "SessionExpiredError"]
