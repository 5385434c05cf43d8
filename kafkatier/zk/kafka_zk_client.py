"""KafkaZkClient: the reads and writes of Kafka's znodes used by the controller, brokers and admin tools.

Controller writes go through :class:`kafkatier.zk.fenced.FencedZkWriter` (fenced by ``/controller_epoch``);
admin writes (topic creation, config changes, deletion markers) are not fenced, as in Kafka's ZooKeeper mode.
Reads that fan out (all partition states, all broker registrations) are ZooKeeper multiReads, pipelined
(:func:`client.get_many`, bounded in flight), so that N znodes cost N / 200 replies and about one round trip
per window, not N.  Controller writes that fan
out (leader and ISR of many partitions) go in fenced multis of :data:`MULTI_BATCH_PARTITIONS` partitions,
pipelined (:meth:`FencedZkWriter.multi_many`, several multis in flight, each fenced); a partition whose
conditional write fails is left out of its batch and the rest of the batch written again.  Malformed znodes
are logged and skipped.

Entity configs (``/config/{type}/{name}``) have ONE reader, :func:`read_entity_config` (and the batch
:meth:`KafkaZkClient.get_topic_configs`), with one failure policy: a missing znode means no overrides; a
malformed one is logged and *skipped* -- nothing acts on it, each caller keeps the view it had (the broker's
config cache keeps its previous config, defaults if it had none; a StopReplica v5 disable answers an error so
the controller retries; the dynamic config listener ignores the change; the controller and the admin client
see no overrides, and an admin write replaces the znode).
"""
from __future__ import annotations

import time

from kazoo.exceptions import BadVersionError, NoNodeError, NodeExistsError

from kafkatier.common.structs import BrokerInfo, LeaderAndIsr, TopicPartition
from kafkatier.logsetup import get_logger, kv
from kafkatier.zk import codecs, paths
from kafkatier.zk.client import PATHS_PER_READ, get_many
from kafkatier.zk.fenced import Create, Delete, FencedZkWriter, SetData, read_retrying

log = get_logger("zk.client")


# Partitions per fenced multi when the controller writes leader and ISR states (elections, new partitions): a state
# is ~100 bytes and its path ~60, so 500 of them (1,000 ops for new partitions) stay far below jute.maxbuffer.
# Kafka's controller sends the same writes as one pipelined batch of conditional setData requests.
MULTI_BATCH_PARTITIONS = 500
# Deletes per fenced multi (a delete is its path and a version: 1,000 stay far below jute.maxbuffer).
MULTI_BATCH_DELETES = 1000


def read_entity_config(zk, entity_type: str, name: str) -> dict[str, str] | None:
    """``/config/{entity_type}/{name}``: its overrides, None when the znode is missing.  A malformed payload is
    logged and raises :class:`codecs.MalformedZNodeError` (see the module docstring for the policy)."""
    path = paths.entity_config(entity_type, name)
    try:
        data, _ = read_retrying(zk.get, path)
    except NoNodeError:
        return None
    try:
        return dict(codecs.EntityConfig.decode(data, path=path).config)
    except codecs.MalformedZNodeError as e:
        log.warning("skipping malformed config %s", kv(path=path, reason=e.reason))
        raise


def read_topic_config(zk, topic: str) -> dict[str, str] | None:
    return read_entity_config(zk, "topics", topic)


class KafkaZkClient:
    def __init__(self, zk):
        self.zk = zk

    def writer(self, epoch_zk_version: int) -> FencedZkWriter:
        return FencedZkWriter(self.zk, epoch_zk_version)

    # --- brokers --------------------------------------------------------------------------------------------
    def get_all_brokers_and_epochs(self) -> dict[int, BrokerInfo]:
        try:
            ids = self.zk.get_children(paths.BROKER_IDS)
        except NoNodeError:
            return {}

        def broker_info(broker_id: int, data: bytes, stat) -> BrokerInfo:
            reg = codecs.BrokerRegistration.decode(data, broker_id=broker_id, path=paths.broker(broker_id))
            return BrokerInfo(id=broker_id, host=reg.host, port=reg.port, epoch=stat.czxid,
                              endpoints=tuple(reg.endpoints), rack=reg.rack)
        return self._decode_many([int(i) for i in ids if i.isdigit()], paths.broker, broker_info,
                                 "broker registration")

    # --- topics ---------------------------------------------------------------------------------------------
    def get_all_topics(self) -> set[str]:
        try:
            return set(self.zk.get_children(paths.BROKER_TOPICS))
        except NoNodeError:
            return set()

    def get_topic_assignments(self, topics) -> dict[str, codecs.TopicAssignment]:
        # A topic's assignment is ~20 bytes per partition: 20 per read keeps a reply of 1,000-partition topics
        # near 400 KB.
        return self._decode_many(sorted(topics), paths.topic,
                                 lambda _topic, data, _stat: codecs.TopicAssignment.decode(data),
                                 "topic assignment", paths_per_read=20)

    def get_partition_states(self, tps) -> dict[TopicPartition, LeaderAndIsr]:
        return self._decode_many(
            sorted(tps), lambda tp: paths.partition_state(tp.topic, tp.partition),
            lambda _tp, data, stat: _leader_and_isr(data, stat.version), "partition state")

    def _decode_many(self, keys: list, znode_path, decode, what: str, paths_per_read: int = PATHS_PER_READ) -> dict:
        """Pipelined reads of each key's znode (``znode_path(key)``): ``{key: decode(key, data, stat)}`` for those
        that exist; a malformed one is logged (``skipping malformed <what>``) and left out."""
        znodes = [znode_path(k) for k in keys]
        out = {}
        for key, path, res in zip(keys, znodes, get_many(self.zk, znodes, paths_per_read=paths_per_read)):
            if res is None:
                continue
            try:
                out[key] = decode(key, *res)
            except codecs.MalformedZNodeError as e:
                log.warning("skipping malformed %s %s", what, kv(path=path, reason=e))
        return out

    def get_topic_configs(self, topics) -> dict[str, dict[str, str]]:
        """Pipelined :func:`read_topic_config` of ``topics``: missing ones have no overrides, malformed ones are
        logged and left out."""
        topics = sorted(topics)
        results = get_many(self.zk, [paths.topic_config(t) for t in topics])
        out = {}
        for t, res in zip(topics, results):
            if res is None:
                out[t] = {}
                continue
            try:
                out[t] = dict(codecs.EntityConfig.decode(res[0], path=paths.topic_config(t)).config)
            except codecs.MalformedZNodeError as e:
                log.warning("skipping malformed config %s", kv(path=paths.topic_config(t), reason=e.reason))
        return out

    # --- ISR change notifications (Kafka's getAllIsrChangeNotifications / getPartitionsFromIsrChange...) --
    def get_isr_change_notifications(self) -> tuple[list[str], set[TopicPartition]]:
        """The ``/isr_change_notification`` children (full paths) and every partition they name, read in
        multiReads.  A malformed notification is logged, contributes nothing, and is returned for deletion."""
        children = sorted(self.get_children_or_empty(paths.ISR_CHANGE_NOTIFICATION))
        znodes = [f"{paths.ISR_CHANGE_NOTIFICATION}/{c}" for c in children]
        tps: set[TopicPartition] = set()
        found = []
        for path, res in zip(znodes, get_many(self.zk, znodes)):
            if res is None:
                continue
            found.append(path)
            try:
                for topic, partition in codecs.IsrChangeNotification.decode(res[0], path).partitions:
                    tps.add(TopicPartition(topic, int(partition)))
            except codecs.MalformedZNodeError as e:
                log.warning("skipping malformed ISR change notification %s", kv(path=path, reason=e))
        return found, tps

    def delete_fenced(self, znodes, epoch_zk_version: int) -> int:
        """Delete ``znodes`` in fenced multis of :data:`MULTI_BATCH_DELETES`, pipelined; a znode already gone
        is dropped from its batch and the rest written again.  Returns how many were deleted."""
        w = self.writer(epoch_zk_version)
        pending = _batches(sorted(znodes), MULTI_BATCH_DELETES)
        deleted = 0
        while pending:
            again = []
            for batch, res in zip(pending, w.multi_many([[Delete(z) for z in b] for b in pending])):
                if isinstance(res, NoNodeError) and 0 <= getattr(res, "op_index", -1) < len(batch):
                    rest = batch[:res.op_index] + batch[res.op_index + 1:]
                    if rest:
                        again.append(rest)
                    continue
                if isinstance(res, Exception):
                    raise res
                deleted += len(batch)
            pending = again
        return deleted

    def get_children_or_empty(self, path: str) -> list[str]:
        try:
            return self.zk.get_children(path)
        except NoNodeError:
            return []

    # --- controller (fenced) writes -------------------------------------------------------------------------
    def set_topic_assignment(self, topic: str, assignment: codecs.TopicAssignment, epoch_zk_version: int) -> None:
        self.writer(epoch_zk_version).set_data(paths.topic(topic), assignment.encode())

    def create_partition_states(self, states: dict[TopicPartition, LeaderAndIsr],
                                epoch_zk_version: int) -> dict[TopicPartition, LeaderAndIsr]:
        """Create ``partitions``, ``partitions/{p}`` and ``state`` for new partitions, in fenced multis of
        :data:`MULTI_BATCH_PARTITIONS` partitions.  A batch that fails on a node that already exists (a previous
        controller's partial work) is written again one partition per multi, skipping the existing states."""
        created = {}
        w = self.writer(epoch_zk_version)
        items = sorted(states.items())
        topics = sorted({tp.topic for tp, _ in items})
        have_parent = {t: res is not None for t, res in
                       zip(topics, get_many(self.zk, [paths.topic_partitions(t) for t in topics]))}
        batches = _batches(items, MULTI_BATCH_PARTITIONS)
        all_ops = []
        for batch in batches:
            ops = []
            for tp, l in batch:
                if not have_parent[tp.topic]:
                    ops.append(Create(paths.topic_partitions(tp.topic)))
                    have_parent[tp.topic] = True
                ops.append(Create(paths.partition(tp.topic, tp.partition)))
                ops.append(Create(paths.partition_state(tp.topic, tp.partition), _encode_state(l)))
            all_ops.append(ops)
        for batch, res in zip(batches, w.multi_many(all_ops)):
            if isinstance(res, (NodeExistsError, NoNodeError)):
                created.update(self._create_partition_states_one_by_one(w, batch))
            elif isinstance(res, Exception):
                raise res
            else:
                created.update(batch)
        return created

    def _create_partition_states_one_by_one(self, w: FencedZkWriter, batch) -> dict[TopicPartition, LeaderAndIsr]:
        created = {}
        for tp, l in batch:
            try:
                w.create(paths.partition_state(tp.topic, tp.partition), _encode_state(l), create_parents=True)
            except NodeExistsError:
                log.warning("partition state already exists %s", kv(partition=tp))
                continue
            created[tp] = l
        return created

    def update_leader_and_isr(self, updates: dict[TopicPartition, LeaderAndIsr],
                              epoch_zk_version: int) -> dict[TopicPartition, LeaderAndIsr]:
        """Conditional updates (``l.partition_epoch`` is the expected zkVersion) in fenced multis of
        :data:`MULTI_BATCH_PARTITIONS`, pipelined.  Returns the written states with their new partition epoch.

        A multi fails as a whole when one of its partitions moved on (a leader's ISR write won the race: Kafka's
        per-partition conditional writes fail alone).  The versions of the failed batch are then read at once
        (one multiRead), every partition whose znode moved is left out (logged; the caller reads the current
        state and decides again), and the rest of the batch is written again: a round per batch, not per
        conflict."""
        out = {}
        w = self.writer(epoch_zk_version)
        pending = _batches(sorted(updates.items()), MULTI_BATCH_PARTITIONS)
        conflicts: list[TopicPartition] = []
        while pending:
            ops = [[SetData(paths.partition_state(tp.topic, tp.partition), _encode_state(l),
                            version=l.partition_epoch) for tp, l in batch] for batch in pending]
            again = []
            for batch, res in zip(pending, w.multi_many(ops)):
                if isinstance(res, (BadVersionError, NoNodeError)):
                    index = getattr(res, "op_index", None)
                    if index is None or not 0 <= index < len(batch):
                        raise res
                    current = get_many(self.zk, [paths.partition_state(tp.topic, tp.partition) for tp, _ in batch])
                    rest = []
                    for i, ((tp, l), cur) in enumerate(zip(batch, current)):
                        if i == index or cur is None or cur[1].version != l.partition_epoch:
                            conflicts.append(tp)
                        else:
                            rest.append((tp, l))
                    if rest:
                        again.append(rest)
                    continue
                if isinstance(res, Exception):
                    raise res
                for (tp, l), stat in zip(batch, res):
                    out[tp] = LeaderAndIsr(l.leader, l.leader_epoch, l.isr, l.controller_epoch,
                                           partition_epoch=_version_of(stat, l.partition_epoch + 1),
                                           leader_recovery_state=l.leader_recovery_state)
            pending = again
        if conflicts:
            log.warning("partition state updates failed: the znodes moved on %s",
                        kv(partitions=len(conflicts), first=",".join(map(str, sorted(conflicts)[:5]))))
        return out

    def remove_replica_from_isr(self, replica: int, states: dict[TopicPartition, LeaderAndIsr], controller_epoch: int,
                                epoch_zk_version: int, _retry_round: int = 0,
                                read_first: bool = True) -> dict[TopicPartition, LeaderAndIsr]:
        """Remove ``replica`` from the ISR of each partition (and from leadership), starting from the states
        ZooKeeper holds now, as Kafka's ``doRemoveReplicasFromIsr`` does: a leader writes ISR expansions there
        directly and the controller hears of them only in batched notifications, so ``states`` (the controller's
        view) may miss that the replica was taken back in.  ``read_first=False``: ``states`` were just read from
        ZooKeeper (a controller failover), not read again before the first write; the writes are conditional on
        the znodes' versions, and those that moved are read again and retried."""
        if states and (_retry_round or read_first):
            fresh = self.get_partition_states(states.keys())
            # A partition whose state znode is not there: the caller's view on the first call, dropped on a retry.
            states = {tp: fresh.get(tp, l) for tp, l in states.items() if tp in fresh or _retry_round == 0}
        updates = {}
        for tp, l in states.items():
            if replica not in l.isr and l.leader != replica:
                continue
            isr = l.isr if len(l.isr) == 1 else tuple(r for r in l.isr if r != replica)
            leader = LeaderAndIsr.NO_LEADER if l.leader == replica else l.leader
            updates[tp] = LeaderAndIsr(leader, l.leader_epoch + 1, isr, controller_epoch, l.partition_epoch,
                                       l.leader_recovery_state)
        result = self.update_leader_and_isr(updates, epoch_zk_version)
        missed = set(updates) - set(result)
        if missed and _retry_round < 3:
            # BADVERSION (a leader's ISR write won the race): again for them, from the state read then.
            result.update(self.remove_replica_from_isr(replica, {tp: states[tp] for tp in missed}, controller_epoch,
                                                       epoch_zk_version, _retry_round=_retry_round + 1))
        return result

    def delete_topic_znodes(self, topic: str, epoch_zk_version: int) -> None:
        w = self.writer(epoch_zk_version)
        w.delete_recursive(paths.topic(topic))
        w.delete_recursive(paths.topic_config(topic))
        w.delete_recursive(paths.delete_topic(topic))

    def delete_topic_deletion_marker(self, topic: str, epoch_zk_version: int) -> None:
        self.writer(epoch_zk_version).delete_recursive(paths.delete_topic(topic))

    # --- admin (unfenced) writes ----------------------------------------------------------------------------
    def create_topic(self, topic: str, assignment: dict[int, list[int]], config: dict[str, str],
                     topic_id: str | None = None) -> str:
        """Write ``/config/topics/{t}`` then ``/brokers/topics/{t}`` (Kafka's order) in one multi."""
        topic_id = topic_id or codecs.new_topic_id()
        ta = codecs.TopicAssignment({p: tuple(r) for p, r in assignment.items()}, {}, {}, topic_id)
        t = self.zk.transaction()
        t.create(paths.topic_config(topic), codecs.EntityConfig(config=dict(config)).encode())
        t.create(paths.topic(topic), ta.encode())
        results = t.commit()
        for r in results:
            if isinstance(r, NodeExistsError):
                raise NodeExistsError(f"topic {topic} already exists")
            if isinstance(r, Exception) and not type(r).__name__ == "RolledBackError":
                raise r
        return topic_id

    def change_topic_config(self, topic: str, config: dict[str, str], extra_ops=None) -> None:
        """Write the entity config and a ``config_change_`` notification (version 2) atomically."""
        t = self.zk.transaction()
        t.set_data(paths.topic_config(topic), codecs.EntityConfig(config=dict(config)).encode())
        t.create(paths.CONFIG_CHANGES + "/" + paths.CONFIG_CHANGE_PREFIX,
                 codecs.ConfigChangeNotification.of("topics", topic).encode(),
                 sequence=True)
        for op in extra_ops or ():
            op(t)
        results = t.commit()
        errs = [r for r in results if isinstance(r, Exception) and type(r).__name__ != "RolledBackError"]
        if errs:
            raise errs[0]

    def mark_topic_for_deletion(self, topic: str) -> bool:
        """Returns False if already marked.  Raises NoNodeError if the topic does not exist."""
        if self.zk.exists(paths.topic(topic)) is None:
            raise NoNodeError(paths.topic(topic))
        try:
            self.zk.create(paths.delete_topic(topic), b"", makepath=True)
            return True
        except NodeExistsError:
            return False

    def get_controller_id(self) -> int | None:
        try:
            data, _ = self.zk.get(paths.CONTROLLER)
        except NoNodeError:
            return None
        try:
            return codecs.ControllerZNode.decode(data).broker_id
        except codecs.MalformedZNodeError as e:
            log.warning("malformed /controller %s", kv(reason=e))
            return None

    # --- admin helpers (AdminZkClient) --------------------------------------------------------------------
    def topic_exists(self, topic: str) -> bool:
        return self.zk.exists(paths.topic(topic)) is not None

    def is_topic_marked_for_deletion(self, topic: str) -> bool:
        return self.zk.exists(paths.delete_topic(topic)) is not None

    def get_topics_marked_for_deletion(self) -> set[str]:
        return set(self.get_children_or_empty(paths.DELETE_TOPICS))

    def get_topic_config_and_version(self, topic: str) -> tuple[dict[str, str], int | None]:
        """``(config, zk_version)`` of ``/config/topics/{t}``; ``({}, None)`` if absent.  A malformed payload is
        logged and read as empty (its version is still returned, so a conditional write replaces it)."""
        try:
            data, stat = self.zk.get(paths.topic_config(topic))
        except NoNodeError:
            return {}, None
        try:
            return dict(codecs.EntityConfig.decode(data, path=paths.topic_config(topic)).config), stat.version
        except codecs.MalformedZNodeError as e:
            log.warning("malformed topic config read as empty %s", kv(topic=topic, reason=e.reason))
            return {}, stat.version

    def create_topic_with_config(self, topic: str, assignment: dict[int, list[int]],
                                 config: dict[str, str], topic_id: str | None = None, extra_ops=()) -> str:
        """Like :meth:`create_topic` (one multi: config, then assignment, then ``extra_ops``), but a leftover
        ``/config/topics/{t}`` without a topic (partial deletion) is overwritten instead of failing.  Raises
        NodeExistsError (``op_index`` 1) if the topic exists."""
        topic_id = topic_id or codecs.new_topic_id()
        ta = codecs.TopicAssignment({p: tuple(r) for p, r in assignment.items()}, {}, {}, topic_id)
        cfg = codecs.EntityConfig(config=dict(config)).encode()
        stale = self.zk.exists(paths.topic_config(topic))
        t = self.zk.transaction()
        if stale is None:
            t.create(paths.topic_config(topic), cfg)
        else:
            t.set_data(paths.topic_config(topic), cfg, version=stale.version)
        t.create(paths.topic(topic), ta.encode())
        _add_ops(t, extra_ops)
        _raise_first_failure(t.commit())
        return topic_id

    def change_topic_config_conditionally(self, topic: str, config: dict[str, str],
                                          expected_version: int | None, extra_ops=()) -> str:
        """Write ``/config/topics/{t}`` (set at ``expected_version``, or create when None) and a version 2
        ``config_change_`` notification in one multi with ``extra_ops``; returns the notification's path.
        Raises BadVersionError / NodeExistsError (with ``op_index``) when the config changed meanwhile."""
        t = self.zk.transaction()
        data = codecs.EntityConfig(config=dict(config)).encode()
        if expected_version is None:
            t.create(paths.topic_config(topic), data)
        else:
            t.set_data(paths.topic_config(topic), data, version=expected_version)
        t.create(paths.CONFIG_CHANGES + "/" + paths.CONFIG_CHANGE_PREFIX,
                 codecs.ConfigChangeNotification.of("topics", topic).encode(), sequence=True)
        _add_ops(t, extra_ops)
        results = t.commit()
        _raise_first_failure(results)
        return results[1]

    def get_entity_config_and_version(self, entity_type: str, name: str) -> tuple[dict[str, str], int | None]:
        """``(config, zk_version)`` of ``/config/{type}/{name}`` (e.g. ``brokers/<default>``); ``({}, None)`` if
        absent; a malformed payload is logged and read as empty."""
        path = paths.entity_config(entity_type, name)
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            return {}, None
        try:
            return dict(codecs.EntityConfig.decode(data, path=path).config), stat.version
        except codecs.MalformedZNodeError as e:
            log.warning("malformed entity config read as empty %s", kv(path=path, reason=e.reason))
            return {}, stat.version

    def change_entity_config_conditionally(self, entity_type: str, name: str, config: dict[str, str],
                                           expected_version: int | None) -> str:
        """Like :meth:`change_topic_config_conditionally` for any entity (Kafka's ``changeBrokerConfig`` writes
        ``/config/brokers/{id|<default>}`` this way); returns the notification's path."""
        t = self.zk.transaction()
        path = paths.entity_config(entity_type, name)
        data = codecs.EntityConfig(config=dict(config)).encode()
        if expected_version is None:
            t.create(path, data)
        else:
            t.set_data(path, data, version=expected_version)
        t.create(paths.CONFIG_CHANGES + "/" + paths.CONFIG_CHANGE_PREFIX,
                 codecs.ConfigChangeNotification.of(entity_type, name).encode(), sequence=True)
        results = t.commit()
        _raise_first_failure(results)
        return results[1]


def _batches(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def _version_of(stat, default: int) -> int:
    return getattr(stat, "version", default) if stat is not None else default


def _encode_state(l: LeaderAndIsr) -> bytes:
    return codecs.encode_partition_state(l.leader, l.leader_epoch, l.isr, l.controller_epoch, l.leader_recovery_state)


def _leader_and_isr(data: bytes, version: int) -> LeaderAndIsr:
    """A ``state`` payload read as the controller's value: one parse, no intermediate codec value (a failover
    reads 20,000 of them)."""
    leader, leader_epoch, isr, controller_epoch, recovery = codecs.partition_state_fields(data)
    return LeaderAndIsr(leader, leader_epoch, isr, controller_epoch, version, recovery)


def assignment_from_codec(ta) -> dict[int, codecs.ReplicaAssignment]:
    return {int(p): codecs.ReplicaAssignment(tuple(r), tuple(ta.adding.get(p, ())), tuple(ta.removing.get(p, ())))
            for p, r in ta.partitions.items()}


def now_ms() -> int:
    return int(time.time() * 1000)


# --- transaction helpers for the admin methods ------------------------------------------------------------------

def _add_ops(t, ops) -> None:
    """Add extra ops to a kazoo transaction: ``fenced`` op values (``add_to``) or callables ``op(t)``."""
    for op in ops or ():
        if hasattr(op, "add_to"):
            op.add_to(t)
        else:
            op(t)


def _raise_first_failure(results) -> None:
    """Raise the op error of a failed multi (kazoo reports it in the results), tagged with ``op_index``."""
    for i, r in enumerate(results):
        if isinstance(r, Exception) and type(r).__name__ != "RolledBackError":
            r.op_index = i
            raise r
