"""A topic's tiered state (KIP-950, docs/kip-950-tiered-storage.md#disablement-in-zookeeper-mode,
docs/zookeeper.md#kip-950-znodes): the one home of its config keys, its transition rules and its znode operations.

The state lives in ``/brokers/topics/{t}/tieredstorage/{tiered_epoch,state}``; ``zk/codecs.py`` only turns
those payloads into values and back.  Who uses what:

* the controller (``TieredStorageDisablementManager``) decides every transition with :func:`classify_transition`
  and writes it fenced, reading the znodes with :func:`read_tiered_state`;
* the admin client creates the znodes with the topic, or with the first config change that enables tiering
  (:func:`creation_ops`);
* brokers stamp remote copies with the tiered epoch (:func:`read_tiered_epoch`) and fence their remote-metadata
  writes on these znodes (``log/remote/zk_fence.py``).

It lives in ``zk/`` beside the other znode formats because the controller, the admin client and the brokers all
use it.
"""
from __future__ import annotations

from typing import Any, Mapping

import attrs

from kafkatier.zk import codecs, paths
from kafkatier.zk.errors import NoNodeError
from kafkatier.zk.fenced import Check, Create, read_retrying

REMOTE_STORAGE_ENABLE = "remote.storage.enable"
REMOTE_LOG_COPY_DISABLE = "remote.log.copy.disable"
REMOTE_LOG_DELETE_ON_DISABLE = "remote.log.delete.on.disable"
TIERED_KEYS = (REMOTE_STORAGE_ENABLE, REMOTE_LOG_COPY_DISABLE, REMOTE_LOG_DELETE_ON_DISABLE)

ENABLED, DISABLING, DISABLED = codecs.TIERED_ENABLED, codecs.TIERED_DISABLING, codecs.TIERED_DISABLED

# What a config change does to a topic's tiering (classify_transition).
CREATE, DISABLE, ENABLE = "create", "disable", "enable"

_READ_TIMEOUT_S = 30.0  # one pipelined read's bound (kazoo's async results wait without one otherwise)


def flag(config: Mapping[str, Any], key: str) -> bool:
    return str(config.get(key, "false")).strip().lower() == "true"


def classify_transition(state: str | None, old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """What a config change does to tiering, given the topic's ``state`` (None: never tiered): ``create``,
    ``disable``, ``enable`` or None."""
    old_on, new_on = flag(old, REMOTE_STORAGE_ENABLE), flag(new, REMOTE_STORAGE_ENABLE)
    new_ro = flag(new, REMOTE_LOG_COPY_DISABLE)
    if state is None:
        return CREATE if new_on else None
    if state == DISABLED:
        if new_on and not new_ro:
            return ENABLE
        if not new_on and flag(new, REMOTE_LOG_DELETE_ON_DISABLE) and old_on:
            return DISABLE  # a read-only topic now disabled with delete
        return None
    if state == ENABLED:
        if old_on and not new_on:
            return DISABLE
        if new_on and new_ro and not flag(old, REMOTE_LOG_COPY_DISABLE):
            return DISABLE
    return None


def initial_state(config: Mapping[str, Any]) -> str:
    """The state a topic starts in when tiering is first enabled (read-only from the start: DISABLED)."""
    return DISABLED if flag(config, REMOTE_LOG_COPY_DISABLE) else ENABLED


# --------------------------------------------------------------------------------------------------- znodes

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
        (edata, estat), (sdata, sstat) = read_retrying(_get_both, zk, paths.tiered_epoch(topic),
                                                       paths.tiered_state(topic))
    except NoNodeError:
        return None
    epoch = codecs.decode_tiered_epoch(edata, paths.tiered_epoch(topic))
    state = codecs.TieredState.decode(sdata, paths.tiered_state(topic)).state
    return TieredTopicState(epoch, state, estat.version, sstat.version)


def _get_both(zk, first: str, second: str) -> tuple:
    """Both znodes' (data, stat), read in one round trip (pipelined) when the client can; in that order, so
    ``state`` is never older than ``tiered_epoch`` (ZooKeeper answers one session's reads in order)."""
    get_async = getattr(zk, "get_async", None)
    if get_async is None:
        return zk.get(first), zk.get(second)
    a, b = get_async(first), get_async(second)
    return a.get(timeout=_READ_TIMEOUT_S), b.get(timeout=_READ_TIMEOUT_S)


def read_tiered_epoch(zk, topic: str, default: int = 0) -> int:
    st = read_tiered_state(zk, topic)
    return default if st is None else st.tiered_epoch


def create_ops(topic: str, state: str = ENABLED) -> list[Create]:
    """The three creates of a first enablement: ``tieredstorage``, ``tiered_epoch`` = 0 and ``state``."""
    return [Create(paths.tiered_storage(topic)),
            Create(paths.tiered_epoch(topic), codecs.encode_tiered_epoch(0)),
            Create(paths.tiered_state(topic), codecs.TieredState(state).encode())]


def creation_ops(zk, topic: str, new_config: Mapping[str, Any], *, creating_topic: bool) -> list[Create]:
    """The creates that join a topic creation or config change enabling tiering for the first time (none when
    tiering stays off, or when the topic was tiered before: later transitions are the controller's)."""
    if not flag(new_config, REMOTE_STORAGE_ENABLE):
        return []
    ops = create_ops(topic, initial_state(new_config))
    if creating_topic:
        return ops
    try:
        read_retrying(zk.get, paths.tiered_epoch(topic))
        return []
    except NoNodeError:
        pass
    return ops[1:] if zk.exists(paths.tiered_storage(topic)) is not None else ops
