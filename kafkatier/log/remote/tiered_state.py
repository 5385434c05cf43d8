"""Reads of a topic's KIP-950 ``tieredstorage`` znodes (zookeeper.md §11) with their versions, and the ops that
create them.  Writes other than creation (disablement, re-enable) belong to the disablement work."""
from __future__ import annotations

import attrs
from kazoo.exceptions import NoNodeError

from kafkatier.zk import codecs, paths
from kafkatier.zk.fenced import Check, Create, read_retrying


@attrs.frozen
class TieredTopicState:
    """``tiered_epoch`` and ``state`` of a topic with the znode versions they were read at."""

    tiered_epoch: int
    state: str
    epoch_version: int
    state_version: int

    def epoch_check(self, topic: str) -> Check:
        """A multi op that fails if ``tiered_epoch`` changed since this read."""
        return Check(paths.tiered_epoch(topic), self.epoch_version)


def read_tiered_state(zk, topic: str) -> TieredTopicState | None:
    """The topic's tiered state, or None when the topic has never been tiered (no znodes).  Raises
    :class:`codecs.MalformedZNodeError` for unreadable payloads."""
    try:
        edata, estat = read_retrying(zk.get, paths.tiered_epoch(topic))
        sdata, sstat = read_retrying(zk.get, paths.tiered_state(topic))
    except NoNodeError:
        return None
    epoch = codecs.decode_tiered_epoch(edata, paths.tiered_epoch(topic))
    state = codecs.TieredState.decode(sdata, paths.tiered_state(topic)).state
    return TieredTopicState(epoch, state, estat.version, sstat.version)


def read_tiered_epoch(zk, topic: str, default: int = 0) -> int:
    st = read_tiered_state(zk, topic)
    return default if st is None else st.tiered_epoch


def create_ops(topic: str, state: str = codecs.TIERED_ENABLED) -> list[Create]:
    """The three creates of a first enablement: ``tieredstorage``, ``tiered_epoch`` = 0 and ``state``."""
    return [Create(paths.tiered_storage(topic)),
            Create(paths.tiered_epoch(topic), codecs.encode_tiered_epoch(0)),
            Create(paths.tiered_state(topic), codecs.TieredState(state).encode())]
