"""The classic-protocol group coordinator (Kafka's ``kafka.coordinator.group``)."""
from kafkatier.coordinator.group.group_coordinator import GroupConfig, GroupCoordinator

__all__ = ["GroupConfig", "GroupCoordinator"]
