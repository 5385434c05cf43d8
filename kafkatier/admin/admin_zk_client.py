"""AdminZkClient: topic administration written straight to ZooKeeper, as Kafka's ZooKeeper-mode brokers do for
CreateTopics, DeleteTopics, AlterConfigs, IncrementalAlterConfigs and DescribeConfigs.

Topic creation follows Kafka's ``ZkAdminManager.createTopics`` + ``AdminZkClient.validateTopicCreate``: partition
count / replication factor (while placing replicas on the live brokers), topic name, marked for deletion,
already exists, ``.``/``_`` collision, manual assignment consistency, config validation, then one multi writing
``/config/topics/{t}`` and ``/brokers/topics/{t}`` (v3, with a new topic id).  The controller notices the new
topic through its watch and creates the partition states.

Config changes write ``/config/topics/{t}`` and a ``config_change_`` notification in one multi.  Unlike Kafka,
the write is conditional on the config znode's version and the whole read-validate-write is retried on a
concurrent change, so two concurrent incremental alters never lose an update, and validation always sees the
topic's existing config (docs/kip-950-tiered-storage.md#config-validation).

Validation is the one topic ConfigDef's (``log/log_config.validate_topic_config``, tiered rules included).  A
topic created tiered, or whose config enables tiering for the first time, gets its KIP-950 ``tieredstorage``
znodes in the same multi (``zk/tiered_state.creation_ops``).  A config change may carry ``extra_ops``:
a callable ``(zk, topic, old, new) -> ops`` (the controller's tiered transition) that may raise a
:class:`KafkaError` to refuse the change, or return ops for the same multi -- ``kafkatier.zk.fenced`` op values
(``Create``, ``SetData``, ``Check``, ``Delete``) or callables taking the kazoo transaction.  It must not write on
its own: with ``validate_only`` its ops are discarded, and on a version conflict it runs again.
"""
from __future__ import annotations

import random
from typing import Any, Callable, Iterable, Mapping

import attrs
from kafkatier.zk.errors import BadVersionError, NodeExistsError, NoNodeError
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from kafkatier.admin import topic_config as tc
from kafkatier.admin.replica_assignment import (BrokerMetadata, InvalidReplicaAssignmentError,
                                                assign_replicas_to_brokers, validate_manual_assignment)
from kafkatier.common import structs
from kafkatier.common.structs import is_valid_topic_name
from kafkatier.log.log_config import validate_topic_config
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol.errors import (BrokerNotAvailableError, Errors, InvalidConfigurationError,
                                       InvalidPartitionsError, InvalidRequestError,
                                       InvalidTopicError, KafkaError, TopicAlreadyExistsError,
                                       UnknownTopicOrPartitionError)
from kafkatier.zk import codecs, paths
from kafkatier.zk.client import ensure_persistent_paths
from kafkatier.zk.kafka_zk_client import KafkaZkClient
from kafkatier.zk.tiered_state import creation_ops

log = get_logger("admin")

NO_NUM_PARTITIONS = -1
NO_REPLICATION_FACTOR = -1
WRITE_ATTEMPTS = 5
#: Not Kafka's: a simulated broker hosts every replica in one Python process; CreatePartitions beyond this
#: answers INVALID_PARTITIONS.
MAX_PARTITIONS_PER_TOPIC = 10000

# (zk, topic, old_config, new_config) -> ops for the config change's multi
ExtraOps = Callable[[Any, str, Mapping[str, str], Mapping[str, str]], list]


class ConcurrentConfigChangeError(KafkaError):
    """The topic's config kept changing under a read-validate-write; the caller may retry."""

    error = Errors.UNKNOWN_SERVER_ERROR


# ------------------------------------------------------------------------------------------------ topic names

def validate_topic_name(name: str) -> None:
    """Kafka's ``Topic.validate``: InvalidTopicError with Kafka's messages."""
    structs.validate_topic_name(name, InvalidTopicError)


def has_collision_chars(name: str) -> bool:
    return "." in name or "_" in name


def has_collision(a: str, b: str) -> bool:
    """``a`` and ``b`` map to the same metric names ('.' and '_' are interchangeable there)."""
    return a.replace(".", "_") == b.replace(".", "_")


# ---------------------------------------------------------------------------------------------------- results

@attrs.frozen
class CreatedTopic:
    """What CreateTopics reports: ``topic_id`` is None for ``validate_only``."""

    name: str
    topic_id: str | None
    assignment: dict[int, tuple[int, ...]]
    config: dict[str, str]

    @property
    def num_partitions(self) -> int:
        return len(self.assignment)

    @property
    def replication_factor(self) -> int:
        return len(next(iter(self.assignment.values()))) if self.assignment else 0


@attrs.frozen
class TopicConfigChange:
    """A written (or, with ``validate_only``, validated) config change; ``notification`` is the path of the
    ``config_change_`` znode, None for ``validate_only``."""

    topic: str
    old_config: dict[str, str]
    new_config: dict[str, str]
    notification: str | None


def _config_str(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _str_config(configs: Mapping[str, Any] | None) -> dict[str, str]:
    """Config values as strings (None kept, so that it can be refused with Kafka's message)."""
    return {str(k): _config_str(v) for k, v in (configs or {}).items()}  # type: ignore[misc]


def _conflict(e: BaseException) -> bool:
    return isinstance(e, BadVersionError) or (isinstance(e, NodeExistsError) and getattr(e, "op_index", None) == 0)


class AdminZkClient:
    """Topic administration against ZooKeeper.

    ``broker_config``: the properties of the broker doing the validation (Kafka names, strings); they supply
    topic config defaults (``log.retention.hours`` ...) and ``remote.log.storage.system.enable`` to validators.
    ``default_num_partitions`` / ``default_replication_factor`` are used when a create request gives -1.
    """

    def __init__(self, zk, *, broker_config: Mapping[str, Any] | None = None, default_num_partitions: int = 1,
                 default_replication_factor: int = 1, rng: random.Random | None = None):
        self.zk = zk
        self.kafka_zk = KafkaZkClient(zk)
        self.broker_config = {str(k): str(v) for k, v in (broker_config or {}).items()}
        self.default_num_partitions = default_num_partitions
        self.default_replication_factor = default_replication_factor
        self.rng = rng
        self._paths_ready = False

    # --- reads ------------------------------------------------------------------------------------------------
    def topic_exists(self, name: str) -> bool:
        return is_valid_topic_name(name) and self.kafka_zk.topic_exists(name)

    def is_marked_for_deletion(self, name: str) -> bool:
        return is_valid_topic_name(name) and self.kafka_zk.is_topic_marked_for_deletion(name)

    def list_topics(self, include_marked_for_deletion: bool = True) -> list[str]:
        topics = self.kafka_zk.get_all_topics()
        if not include_marked_for_deletion:
            topics -= self.kafka_zk.get_topics_marked_for_deletion()
        return sorted(topics)

    def live_brokers(self) -> list[BrokerMetadata]:
        """Registered brokers sorted by id (Kafka's ``getBrokerMetadatas``)."""
        brokers = self.kafka_zk.get_all_brokers_and_epochs()
        return sorted(BrokerMetadata(b.id, b.rack) for b in brokers.values())

    def get_topic_assignment(self, name: str) -> dict[int, tuple[int, ...]]:
        """``{partition: replicas}``; UnknownTopicOrPartitionError if the topic does not exist."""
        return dict(self._read_assignment(name).partitions)

    def get_topic_id(self, name: str) -> str | None:
        return self._read_assignment(name).topic_id

    def _read_assignment(self, name: str) -> codecs.TopicAssignment:
        if not is_valid_topic_name(name):
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        try:
            data, _ = self.zk.get(paths.topic(name))
        except NoNodeError:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.") from None
        try:
            return codecs.TopicAssignment.decode(data, path=paths.topic(name))
        except codecs.MalformedZNodeError as e:
            raise KafkaError(f"Topic '{name}' has an unreadable assignment: {e.reason}") from None

    def fetch_topic_config(self, name: str) -> dict[str, str]:
        """The topic's overrides as stored (``{}`` if none)."""
        if not is_valid_topic_name(name):
            return {}
        return self.kafka_zk.get_topic_config_and_version(name)[0]

    def describe_topic_config(self, name: str, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """DescribeConfigs entries for the topic (overrides, broker-derived values and defaults), sorted by
        name, as :meth:`ConfigEntry.to_dict` dicts: ``name``, ``value``, ``source``, ``read_only``,
        ``sensitive``, ``is_default``, ``synonyms`` (``name``, ``value``, ``source``), ``type``."""
        return [e.to_dict() for e in self.describe_topic_config_entries(name, names)]

    def describe_topic_config_entries(self, name: str, names: Iterable[str] | None = None) -> list[tc.ConfigEntry]:
        """Like :meth:`describe_topic_config`, as typed entries."""
        self._require_existing(name)
        overrides = self.fetch_topic_config(name)
        return tc.describe_topic_config(overrides, self.broker_config, list(names) if names is not None else None)

    # --- create -----------------------------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int | None = NO_NUM_PARTITIONS,
                     replication_factor: int | None = NO_REPLICATION_FACTOR,
                     configs: Mapping[str, Any] | None = None,
                     assignment: Mapping[int, Iterable[int]] | None = None,
                     validate_only: bool = False) -> CreatedTopic:
        """Create a topic from a partition count and replication factor (-1: the broker defaults) or from a
        manual ``{partition: replicas}`` assignment (then both must be -1, as in CreateTopics)."""
        config = _str_config(configs)
        nulls = [k for k, v in config.items() if v is None]
        if nulls:
            raise InvalidConfigurationError("Null value not supported for topic configs: " + ",".join(nulls))
        partitions = NO_NUM_PARTITIONS if partitions is None else partitions
        replication_factor = NO_REPLICATION_FACTOR if replication_factor is None else replication_factor
        if assignment is not None and (partitions != NO_NUM_PARTITIONS
                                       or replication_factor != NO_REPLICATION_FACTOR):
            raise InvalidRequestError("Both numPartitions or replicationFactor and replicasAssignments were set. "
                                      "Both cannot be used at the same time.")
        live = self.live_brokers()
        if assignment is None:
            n = self.default_num_partitions if partitions == NO_NUM_PARTITIONS else partitions
            rf = self.default_replication_factor if replication_factor == NO_REPLICATION_FACTOR \
                else replication_factor
            placed = assign_replicas_to_brokers(live, n, rf, rng=self.rng)
            final = {p: tuple(r) for p, r in placed.items()}
        else:
            final = None
        final = self.validate_topic_create(name, final, config, manual=assignment,
                                           live_broker_ids=[b.id for b in live])
        if validate_only:
            return CreatedTopic(name, None, final, config)

        ops = creation_ops(self.zk, name, config, creating_topic=True)
        self._ensure_paths()
        try:
            topic_id = self.kafka_zk.create_topic_with_config(name, {p: list(r) for p, r in final.items()},
                                                              config, extra_ops=ops)
        except NodeExistsError as e:
            if getattr(e, "op_index", None) in (0, 1):
                raise TopicAlreadyExistsError(f"Topic '{name}' already exists.") from None
            raise
        log.info("created topic %s", kv(topic=name, topic_id=topic_id, partitions=len(final),
                                        replication_factor=len(final[0]), config=config or "{}"))
        return CreatedTopic(name, topic_id, final, config)

    def validate_topic_create(self, name: str, assignment: Mapping[int, tuple[int, ...]] | None,
                              config: Mapping[str, str], *, manual: Mapping[int, Iterable[int]] | None = None,
                              live_broker_ids: Iterable[int] | None = None) -> dict[int, tuple[int, ...]]:
        """Kafka's ``validateTopicCreate`` order; returns the (validated) assignment."""
        validate_topic_name(name)
        if self.kafka_zk.is_topic_marked_for_deletion(name):
            raise TopicAlreadyExistsError(f"Topic '{name}' is marked for deletion.")
        if self.kafka_zk.topic_exists(name):
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        if has_collision_chars(name):
            all_topics = self.kafka_zk.get_all_topics()
            if name in all_topics:
                raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
            colliding = sorted(t for t in all_topics if has_collision(name, t))
            if colliding:
                raise InvalidTopicError(f"Topic '{name}' collides with existing topics: {', '.join(colliding)}")
        if manual is not None:
            assignment = validate_manual_assignment({p: list(r) for p, r in manual.items()}, live_broker_ids)
        validate_topic_config(config, existing={}, broker_config=self.broker_config)
        return dict(assignment or {})

    # --- delete -----------------------------------------------------------------------------------------------
    def delete_topic(self, name: str) -> bool:
        """Mark the topic for deletion; True if newly marked, False if it already was.
        UnknownTopicOrPartitionError if the topic does not exist."""
        if not is_valid_topic_name(name):
            raise UnknownTopicOrPartitionError(f"Topic `{name}` to delete does not exist")
        try:
            marked = self.kafka_zk.mark_topic_for_deletion(name)
        except NoNodeError:
            raise UnknownTopicOrPartitionError(f"Topic `{name}` to delete does not exist") from None
        if marked:
            log.info("marked topic for deletion %s", kv(topic=name))
        return marked

    # --- config changes ---------------------------------------------------------------------------------------
    def change_topic_config(self, name: str, new_config: Mapping[str, Any], validate_only: bool = False,
                            extra_ops: ExtraOps | None = None) -> TopicConfigChange:
        """AlterConfigs semantics: ``new_config`` replaces all of the topic's overrides."""
        config = _str_config(new_config)
        nulls = [k for k, v in config.items() if v is None]
        if nulls:
            raise InvalidRequestError("Null value not supported for : " + ",".join(nulls))
        return self._update_config(name, lambda old: dict(config), validate_only, extra_ops)

    def alter_topic_config(self, name: str, set: Mapping[str, Any] | None = None,  # noqa: A002 - Kafka's op name
                           delete: Iterable[str] = (), validate_only: bool = False,
                           extra_ops: ExtraOps | None = None) -> TopicConfigChange:
        """IncrementalAlterConfigs semantics: SET the given keys, DELETE the listed ones (absent keys are
        ignored); the resulting full config is validated."""
        to_set = _str_config(set)
        to_delete = [str(k) for k in delete]
        nulls = [k for k, v in to_set.items() if v is None]
        if nulls:
            raise InvalidRequestError("Null value not supported for : " + ",".join(nulls))
        if len(to_delete) != len(frozenset(to_delete)) or frozenset(to_set) & frozenset(to_delete):
            raise InvalidRequestError("Error due to duplicate config keys")

        def apply(old: dict[str, str]) -> dict[str, str]:
            new = dict(old)
            new.update(to_set)
            for k in to_delete:
                new.pop(k, None)
            return new

        return self._update_config(name, apply, validate_only, extra_ops)

    def _require_existing(self, name: str) -> None:
        validate_topic_name(name)
        if not self.kafka_zk.topic_exists(name):
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")

    def _update_config(self, name: str, compute: Callable[[dict[str, str]], dict[str, str]],
                       validate_only: bool, extra_ops: ExtraOps | None = None) -> TopicConfigChange:
        self._require_existing(name)

        def attempt() -> TopicConfigChange:
            old, version = self.kafka_zk.get_topic_config_and_version(name)
            new = compute(dict(old))
            validate_topic_config(new, existing=old, broker_config=self.broker_config)
            ops = creation_ops(self.zk, name, new, creating_topic=False)
            if extra_ops is not None:
                ops += extra_ops(self.zk, name, dict(old), dict(new))
            if validate_only:
                return TopicConfigChange(name, old, new, None)
            self._ensure_paths()
            notification = self.kafka_zk.change_topic_config_conditionally(name, new, version, extra_ops=ops)
            log.info("updated topic config %s", kv(topic=name, config=new or "{}", notification=notification))
            return TopicConfigChange(name, old, new, notification)

        retrying = Retrying(stop=stop_after_attempt(WRITE_ATTEMPTS), wait=wait_exponential(multiplier=0.01, max=0.2),
                            retry=retry_if_exception(_conflict), reraise=True)
        try:
            return retrying(attempt)
        except (BadVersionError, NodeExistsError) as e:
            if not _conflict(e):
                raise
            raise ConcurrentConfigChangeError(
                f"The config of topic '{name}' changed concurrently {WRITE_ATTEMPTS} times; retry the request."
            ) from None

    # --- add partitions (CreatePartitions) ---------------------------------------------------------------------
    def add_partitions(self, name: str, count: int, assignment: list[list[int]] | None = None,
                       validate_only: bool = False) -> dict[int, tuple[int, ...]]:
        """Grow ``name`` to ``count`` partitions (Kafka's ``ZkAdminManager.createPartitions`` and
        ``AdminZkClient.createPartitions``): ``assignment`` lists the replicas of each new partition, else they
        are placed as at creation, starting after partition 0's first replica.  ``/brokers/topics/{t}`` is
        rewritten conditionally on its version (topic id and any reassignment kept); the controller's partition
        modification watch then creates, elects and announces the new partitions.  Returns the new partitions'
        assignment."""
        if not is_valid_topic_name(name):
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
        if self.kafka_zk.is_topic_marked_for_deletion(name):
            raise InvalidTopicError(f"The topic '{name}' is queued for deletion.")
        try:
            data, stat = self.zk.get(paths.topic(name))
        except NoNodeError:
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.") from None
        current = codecs.TopicAssignment.decode(data, path=paths.topic(name))
        old = len(current.partitions)
        if count == old:
            raise InvalidPartitionsError(f"Topic already has {old} partitions.")
        if count < old:
            raise InvalidPartitionsError(f"The number of partitions for a topic can only be increased. Topic {name} "
                                         f"currently has {old} partitions, {count} would not be an increase.")
        if count > MAX_PARTITIONS_PER_TOPIC:
            raise InvalidPartitionsError(f"Topic {name} cannot have {count} partitions: the simulator's limit is "
                                         f"{MAX_PARTITIONS_PER_TOPIC} per topic.")
        first = current.partitions.get(0)
        if not first:
            raise KafkaError(f"Unexpected existing replica assignment for topic '{name}', partition id 0 is missing.")
        live = self.live_brokers()
        if assignment is not None:
            if len(assignment) != count - old:
                raise InvalidReplicaAssignmentError(f"Increasing the number of partitions by {count - old} but "
                                                    f"{len(assignment)} assignments provided.")
            live_ids = {b.id for b in live}
            added = {}
            for i, replicas in enumerate(assignment):
                pid = old + i
                replicas = tuple(int(r) for r in replicas)
                if not replicas:
                    raise InvalidReplicaAssignmentError(f"Cannot have replication factor of 0 for partition id {pid}.")
                if len(set(replicas)) != len(replicas):
                    raise InvalidReplicaAssignmentError(f"Duplicate brokers not allowed in replica assignment: "
                                                        f"{', '.join(map(str, replicas))} for partition id {pid}.")
                if not set(replicas) <= live_ids:
                    raise BrokerNotAvailableError(
                        f"Some brokers specified for partition id {pid} are not available. Specified brokers: "
                        f"{', '.join(map(str, replicas))}, available brokers: {', '.join(map(str, sorted(live_ids)))}.")
                if len(replicas) != len(first):
                    raise InvalidReplicaAssignmentError(
                        f"Inconsistent replication factor between partitions, partition 0 has {len(first)} while "
                        f"partition {pid} has {len(replicas)} replicas.")
                added[pid] = replicas
        else:
            ids = [b.id for b in live]
            start = next((i for i, b in enumerate(ids) if b >= first[0]), 0)
            added = {p: tuple(r) for p, r in assign_replicas_to_brokers(
                live, count - old, len(first), fixed_start_index=start, start_partition_id=old, rng=self.rng).items()}
        if validate_only:
            return added
        new = codecs.TopicAssignment({**current.partitions, **added}, current.adding, current.removing,
                                     current.topic_id)
        try:
            self.zk.set(paths.topic(name), new.encode(), version=stat.version)
        except BadVersionError:
            raise ConcurrentConfigChangeError(f"The assignment of topic '{name}' changed concurrently; retry.") \
                from None
        log.info("added partitions %s", kv(topic=name, old=old, new=count, assignment=added))
        return added

    # --- helpers ----------------------------------------------------------------------------------------------
    def _ensure_paths(self) -> None:
        if not self._paths_ready:
            ensure_persistent_paths(self.zk, (paths.BROKER_TOPICS, f"{paths.CONFIG}/topics", paths.CONFIG_CHANGES))
            self._paths_ready = True
