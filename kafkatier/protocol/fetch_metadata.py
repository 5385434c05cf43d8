"""A Fetch request's session id and epoch (KIP-227): Kafka's ``FetchMetadata`` (``common/requests``).

Both ends of a fetch session read it: the leader's session cache (``server/fetch_session.py``) and the
follower's session handler (``server/fetch_session_handler.py``).

* session id 0, epoch -1: no session (Fetch before v7, librdkafka, any client that does not want one);
* epoch 0: a full fetch that asks for a new session (the session id, if not 0, names a session to close);
* epoch -1 with a session id: a full fetch that closes that session and asks for none;
* any other epoch: an incremental fetch in the named session.
"""
from __future__ import annotations

import attrs

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_INT32 = 2**31 - 1


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: -1 stays -1; after the largest int32 comes 1 (0 means a new session)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_INT32 else epoch + 1


@attrs.frozen
class FetchMetadata:
    session_id: int
    epoch: int

    @property
    def is_full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    def next_close_existing(self) -> FetchMetadata:
        """After an error: a full fetch that closes this session and asks for a new one."""
        return FetchMetadata(self.session_id, INITIAL_EPOCH)

    def next_incremental(self) -> FetchMetadata:
        return FetchMetadata(self.session_id, next_epoch(self.epoch))

    @staticmethod
    def new_incremental(session_id: int) -> FetchMetadata:
        return FetchMetadata(session_id, next_epoch(INITIAL_EPOCH))


INITIAL = FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)  # a full fetch that asks for a session
LEGACY = FetchMetadata(INVALID_SESSION_ID, FINAL_EPOCH)     # a full fetch without a session
