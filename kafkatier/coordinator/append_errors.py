"""How a coordinator answers a failed append to its own log (``__consumer_offsets``, ``__transaction_state``):
the log unavailable for now is COORDINATOR_NOT_AVAILABLE (the client retries), the log no longer led here is
NOT_COORDINATOR (the client looks the coordinator up again).  Each coordinator adds its answer to a batch too
large."""
from __future__ import annotations

from kafkatier.protocol.errors import Errors

COORDINATOR_APPEND_ERRORS = {
    Errors.UNKNOWN_TOPIC_OR_PARTITION: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.NOT_ENOUGH_REPLICAS: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.REQUEST_TIMED_OUT: Errors.COORDINATOR_NOT_AVAILABLE,
    Errors.NOT_LEADER_OR_FOLLOWER: Errors.NOT_COORDINATOR,
    Errors.KAFKA_STORAGE_ERROR: Errors.NOT_COORDINATOR,
}
