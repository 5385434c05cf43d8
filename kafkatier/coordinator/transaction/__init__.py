"""The transaction coordinator (Kafka's ``kafka.coordinator.transaction``): ``__transaction_state``, the state
machine of each transactional id, and the markers that end transactions on the partitions they wrote."""
from kafkatier.coordinator.transaction.transaction_coordinator import TransactionCoordinator
from kafkatier.coordinator.transaction.transaction_state_manager import TransactionConfig

__all__ = ["TransactionConfig", "TransactionCoordinator"]
