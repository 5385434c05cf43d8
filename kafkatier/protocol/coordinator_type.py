"""FindCoordinator's key types (Kafka's ``CoordinatorType``)."""
from __future__ import annotations

from enum import IntEnum


class CoordinatorType(IntEnum):
    GROUP = 0
    TRANSACTION = 1
    SHARE = 2   # KIP-932's share groups (FindCoordinator v6); no share coordinator exists in ZooKeeper mode
