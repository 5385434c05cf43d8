"""Incremental fetch sessions, the fetcher's side (KIP-227): Kafka's ``FetchSessionHandler`` as the replica
fetcher uses it.  The leader's side is ``server/fetch_session.py``.

Each round the fetcher hands :meth:`FetchSessionHandler.build` every partition it wants to fetch now, with
what it asks for each (:class:`PartitionData`).  The first request is a full fetch (epoch 0) listing them all;
once the leader answers with a session id, each request lists only the partitions added or whose asked data
changed (fetch offset, log start offset, leader epoch, max bytes) and forgets (``forgotten_topics_data``) those
no longer wanted -- a partition left out for a round (truncating, backing off, throttled) is forgotten and
added back later.  An idle follower's request lists no partition at all.

:meth:`FetchSessionHandler.handle_response` checks the answer as Kafka's: a full response must answer exactly
the partitions asked, an incremental one only partitions of the session; a top-level error, a response that
fails the check or a failed request (:meth:`FetchSessionHandler.handle_error`, a reset connection) makes the
next request a full fetch.  FETCH_SESSION_ID_NOT_FOUND starts over without a session id; other errors name the
old session in the full fetch so that the leader closes it.  A partition an incremental response omits had
nothing new: the fetcher keeps its state.

Not thread-safe: one fetcher thread owns its handler.
"""
from __future__ import annotations

from typing import Hashable, NamedTuple

import attrs

from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import Errors
from kafkatier.protocol.fetch_metadata import INITIAL, INVALID_SESSION_ID, FetchMetadata

log = get_logger("server.fetch-session-handler")


class PartitionData(NamedTuple):
    """What a fetcher asks for one partition (Kafka's ``FetchRequest.PartitionData``); a named tuple, not an attrs
    class: the fetcher builds one per partition per round."""
    fetch_offset: int
    log_start_offset: int
    max_bytes: int
    current_leader_epoch: int


@attrs.frozen
class FetchRequestData:
    """One request to send: ``to_send`` the partitions listed, ``to_forget`` those to remove from the session,
    ``metadata`` its session id and epoch."""
    to_send: dict[Hashable, PartitionData]
    to_forget: list[Hashable]
    metadata: FetchMetadata


class FetchSessionHandler:
    def __init__(self, node_id: int):
        self.node_id = node_id  # the leader, for logs
        self.next_metadata: FetchMetadata = INITIAL
        self.session_partitions: dict[Hashable, PartitionData] = {}

    @property
    def session_id(self) -> int:
        return self.next_metadata.session_id

    def build(self, wanted: dict[Hashable, PartitionData], changed=None) -> FetchRequestData:
        """The next request for ``wanted`` (every partition to fetch now, in fetch order).  ``changed``: the
        caller knows that only these keys of ``wanted`` may differ from its previous call and that no key was
        added or removed since (an idle fetcher's round: compared in O(changes), not O(partitions))."""
        md = self.next_metadata
        if md.is_full:
            self.session_partitions = dict(wanted)
            return FetchRequestData(dict(wanted), [], md)
        session = self.session_partitions
        if changed is not None and len(session) == len(wanted):
            to_send = {}
            for key in changed:
                data = wanted[key]
                if session.get(key) != data:
                    session[key] = data
                    to_send[key] = data
            return FetchRequestData(to_send, [], md)
        to_send: dict[Hashable, PartitionData] = {}
        to_forget = []
        for key in list(session):
            data = wanted.get(key)
            if data is None:
                del session[key]
                to_forget.append(key)
            elif data != session[key]:
                session[key] = data
                to_send[key] = data
        for key, data in wanted.items():
            if key not in session:
                session[key] = data
                to_send[key] = data
        return FetchRequestData(to_send, to_forget, md)

    def handle_response(self, error: int, session_id: int, partitions: set[Hashable]) -> bool:
        """Take the leader's answer (top-level ``error``, ``session_id``, the partitions it answered); False if
        its partitions must not be used (the next request is a full fetch)."""
        md = self.next_metadata
        if error != Errors.NONE:
            log.info("fetch session error %s", kv(leader=self.node_id, session=md.session_id, epoch=md.epoch,
                                                   error=Errors(error).name))
            self.next_metadata = INITIAL if error == Errors.FETCH_SESSION_ID_NOT_FOUND else md.next_close_existing()
            return False
        extra = partitions - self.session_partitions.keys()
        if md.is_full:
            omitted = self.session_partitions.keys() - partitions
            if extra or omitted:
                log.info("invalid full fetch response %s", kv(leader=self.node_id, extra=len(extra),
                                                              omitted=len(omitted)))
                self.next_metadata = INITIAL
                return False
            self.next_metadata = INITIAL if session_id == INVALID_SESSION_ID else FetchMetadata.new_incremental(
                session_id)
            if session_id != INVALID_SESSION_ID:
                log.debug("fetch session created %s", kv(leader=self.node_id, session=session_id,
                                                         partitions=len(self.session_partitions)))
            return True
        if extra:
            log.info("invalid incremental fetch response %s", kv(leader=self.node_id, session=md.session_id,
                                                                 extra=len(extra)))
            self.next_metadata = md.next_close_existing()
            return False
        # Session id 0: the leader closed the session (nothing left in it); start a new one next time.
        self.next_metadata = INITIAL if session_id == INVALID_SESSION_ID else md.next_incremental()
        return True

    def handle_error(self) -> None:
        """The request failed (connection reset, timeout): the next request is a full fetch closing the
        session."""
        self.next_metadata = self.next_metadata.next_close_existing()
