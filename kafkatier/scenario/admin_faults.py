"""Faults a scenario injects through Kafka's admin surfaces, as an operator would during an incident: partition
reassignments (and their cancellation), preferred and unclean leader elections, replication throttles.

| fault | how |
|---|---|
| reassign | ``via = "api"``: AlterPartitionReassignments (key 45, our ``admin.client.AdminClient``); ``via = "znode"``: the legacy ``/admin/reassign_partitions`` znode, created only when none exists (Kafka's ZooKeeper-era tool refused too: "There is an existing assignment running").  Without ``replicas`` the seed picks a set of live brokers of the topic's replication factor; without ``topic`` it picks the partition too |
| cancel-reassignment | AlterPartitionReassignments with null replicas for the partition, or (no ``topic``) for every reassignment ListPartitionReassignments reports on the scenario's topics |
| preferred-election / unclean-election | ElectLeaders (key 43, confluent-kafka's ``elect_leaders``) for the partition, or every partition of the scenario's topics; Kafka elects uncleanly only partitions without a live leader (the others answer ELECTION_NOT_NEEDED) |
| throttle | ``leader/follower.replication.throttled.rate = rate`` on the target (default every live broker) and ``leader/follower.replication.throttled.replicas = *`` on the topic (default every scenario topic), IncrementalAlterConfigs; removed after ``duration_s`` when given, by ``clear = true``, and always at heal |

Each fault is a ``nemesis`` info entry (``value``: the brokers it concerns, as for process faults; ``topic``,
``partition`` and the request's details as extra keys) followed by the request as an ``admin`` operation
(invoke, then ok / fail for a definite answer, info when it is unknown whether the cluster got it).  An
``unclean-election`` ``ok`` lists the partitions it elected (``elected``): the checkers date that partition's
accepted loss from it.
"""
from __future__ import annotations

import random
import threading
from typing import Callable, TypeVar

from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from kafkatier.zk.errors import KazooException, NodeExistsError, NoNodeError
from tenacity import Retrying, retry_if_exception, retry_if_result, stop_after_delay, wait_exponential

from kafkatier.admin import reassignment as plan
from kafkatier.admin.client import AdminClient, AdminError
from kafkatier.logsetup import get_logger, kv
from kafkatier.scenario.faults import FaultError, Faults
from kafkatier.scenario.history import FAIL, INFO, INVOKE, OK, History
from kafkatier.scenario.observer import ZooKeeperObserver
from kafkatier.scenario.spec import TopicSpec
from kafkatier.scenario.workloads import client_config, error_name
from kafkatier.zk import codecs, paths

log = get_logger("scenario.admin_faults")

ELECTION_TIMEOUT_S = 15.0
THROTTLE_RATES = (plan.LEADER_THROTTLED_RATE, plan.FOLLOWER_THROTTLED_RATE)
# Asking the controller again after NOT_CONTROLLER: bounded from the first ask, which can itself wait up to
# ELECTION_TIMEOUT_S + 15 in the socket of a paused old controller that answers NOT_CONTROLLER when it resumes.
CONTROLLER_RETRY_S = 60.0
T = TypeVar("T")


def draw_reassignment(pick: float, partitions: list[tuple[str, int]], replication_factors: dict[str, int],
                      live: list[int], topic: str | None, partition: int, replicas: tuple[int, ...] | None,
                      current: Callable[[str, int], list[int]] = lambda t, p: []) -> tuple[str, int, list[int]]:
    """The partition and target replicas of a ``reassign`` step: those given, else drawn from the step's ``pick``
    (so a seed replays the choice for the same live brokers): a partition of ``partitions`` when the step names
    none, and as many live brokers as the topic's replication factor, in a random order (so the preferred
    leader moves too) -- a set other than the ``current`` replicas when there are enough live brokers (data
    moves), else a new order of the same brokers."""
    rng = random.Random(pick)
    if topic is None:
        topic, partition = rng.choice(partitions)
    if replicas is not None:
        return topic, partition, list(replicas)
    rf = replication_factors[topic]
    if len(live) < rf:
        raise FaultError(f"only {len(live)} live brokers {live} for replication factor {rf}")
    now = set(current(topic, partition))
    drawn = rng.sample(sorted(live), rf)
    for _ in range(20):   # bounded: with rf + 1 live brokers a draw differs with probability >= 1 / (rf + 1)
        if set(drawn) != now or len(live) == rf:
            break
        drawn = rng.sample(sorted(live), rf)
    return topic, partition, drawn


def _undecided(e: BaseException) -> bool:
    """A client error that says nothing was decided (a lost or misrouted request, a retriable error code), not
    an answer from the cluster -- nor a programming error.  (NoReachableBrokerError, a ConnectionError: the
    client could not bootstrap.)"""
    return isinstance(e, ConnectionError) or isinstance(e, AdminError) and (e.code is None or e.retriable)


class AdminFaults:
    def __init__(self, bootstrap: str, observer: ZooKeeperObserver, faults: Faults, history: History,
                 topics: tuple[TopicSpec, ...]):
        self.bootstrap = bootstrap
        self.observer = observer
        self.faults = faults
        self.history = history
        self.topics = topics
        # The workloads' client settings: a restarted broker (new port) is found within a second.
        self._confluent = ConfluentAdmin(client_config(bootstrap) | {
            "socket.timeout.ms": int(ELECTION_TIMEOUT_S + 10) * 1000})
        self._admin: AdminClient | None = None
        self._lock = threading.Lock()
        self._throttled: tuple[set[int], set[str]] = (set(), set())   # brokers and topics with throttles set
        self._timers: list[threading.Timer] = []

    def close(self) -> None:
        for t in self._timers:
            t.cancel()
        if self._admin is not None:
            self._admin.close()

    def _kafkatier_admin(self) -> AdminClient:
        with self._lock:
            if self._admin is None:
                self._admin = AdminClient(self.bootstrap.split(","), request_timeout_ms=15000)
            return self._admin

    def _controller_call(self, what: str, fn: Callable[[AdminClient], T]) -> T:
        """``fn(admin)`` against the active controller, again (bounded, ``CONTROLLER_RETRY_S``) after an error
        that says nothing was decided -- the controller moved or its broker restarted on a new port, which
        kafka-python's metadata may not know yet (UnknownBrokerIdError): each retry bootstraps a fresh client.
        Safe for what is sent here: re-requesting a reassignment in progress, or a cancel, changes nothing."""
        def attempt() -> T:
            try:
                return fn(self._kafkatier_admin())
            except Exception as e:
                if not _undecided(e):
                    raise
                with self._lock:
                    stale, self._admin = self._admin, None
                if stale is not None:
                    stale.close()
                raise
        return Retrying(retry=retry_if_exception(_undecided), reraise=True,
                        stop=stop_after_delay(CONTROLLER_RETRY_S), wait=wait_exponential(multiplier=0.2, max=1.0),
                        before_sleep=lambda st: log.info("retrying %s", kv(
                            call=what, error=repr(st.outcome.exception())[:120])))(attempt)

    # -- choices -----------------------------------------------------------------------------------------------
    def partitions(self, topic: str | None, partition: int) -> list[tuple[str, int]]:
        """The step's partition, or every partition of the scenario's topics."""
        if topic is not None:
            return [(topic, partition)]
        return [(t.name, p) for t in self.topics for p in range(t.partitions)]

    def live_brokers(self) -> list[int]:
        registered = self.observer.snapshot.brokers
        return [b for b in self.faults.broker_ids() if b in registered and self.faults.alive(b)]

    def choose_reassignment(self, topic: str | None, partition: int, replicas: tuple[int, ...] | None,
                            pick: float) -> tuple[str, int, list[int]]:
        return draw_reassignment(pick, self.partitions(None, 0), {t.name: t.replication_factor for t in self.topics},
                                 self.live_brokers(), topic, partition, replicas, self.observer.snapshot.replicas)

    # -- reassignment --------------------------------------------------------------------------------------------
    def reassign(self, topic: str | None, partition: int, replicas: tuple[int, ...] | None, via: str,
                 pick: float) -> str | None:
        """Start moving a partition's replicas.  Returns the error name, or None when the cluster accepted."""
        topic, partition, target = self.choose_reassignment(topic, partition, replicas, pick)
        current = self.observer.snapshot.replicas(topic, partition)
        self.history.info("nemesis", "reassign", target, topic=topic, partition=partition, via=via, current=current)
        value = {"topic": topic, "partition": partition, "replicas": target, "via": via}
        self.history.record(INVOKE, "admin", "reassign", value)
        if via == "znode":
            return self._reassign_znode(topic, partition, target, value)
        try:
            result = self._controller_call("alter_partition_reassignments", lambda admin:
                                           admin.alter_partition_reassignments({(topic, partition): target}))
        except (AdminError, ConnectionError) as e:
            return self._request_error("reassign", value, e)
        err = result[(topic, partition)]
        if err is not None:
            self.history.record(FAIL, "admin", "reassign", value, error=err.name)
            return err.name
        self.history.record(OK, "admin", "reassign", value)
        return None

    def _request_error(self, f: str, value: dict, e: AdminError | ConnectionError) -> str:
        """Record a request that raised: ``fail`` for the cluster's definite answer, ``info`` when it is unknown
        whether the controller got it (retries exhausted).  Returns the error name."""
        name = e.name if isinstance(e, AdminError) else type(e).__name__
        self.history.record(INFO if _undecided(e) else FAIL, "admin", f, value, error=name)
        return name

    def _reassign_znode(self, topic: str, partition: int, target: list[int], value: dict) -> str | None:
        data = codecs.ReassignPartitions({(topic, partition): target}).encode()
        try:
            self.observer.zk.create(paths.REASSIGN_PARTITIONS, data, makepath=True)
        except NodeExistsError:
            # The ZooKeeper-era tool's answer: one reassignment znode at a time.
            self.history.record(FAIL, "admin", "reassign", value, error="REASSIGNMENT_IN_PROGRESS")
            return "REASSIGNMENT_IN_PROGRESS"
        except KazooException as e:
            self.history.record(INFO, "admin", "reassign", value, error=type(e).__name__)
            return type(e).__name__
        self.history.record(OK, "admin", "reassign", value)
        return None

    def cancel(self, topic: str | None, partition: int) -> str | None:
        """Cancel the partition's reassignment, or every running one of the scenario's topics."""
        if topic is not None:
            targets = [(topic, partition)]
        else:
            try:
                ongoing = self._controller_call("list_partition_reassignments", lambda admin:
                                                admin.list_partition_reassignments(self.partitions(None, 0)))
            except (AdminError, ConnectionError) as e:   # nothing was changed
                raise FaultError(f"ListPartitionReassignments failed: {e}") from None
            targets = sorted(ongoing)
            if not targets:
                raise FaultError("no reassignment in progress")
        brokers = sorted({b for t, p in targets for b in self.observer.snapshot.replicas(t, p)})
        self.history.info("nemesis", "cancel-reassignment", brokers, partitions=[f"{t}/{p}" for t, p in targets])
        value = {"partitions": [f"{t}/{p}" for t, p in targets]}
        self.history.record(INVOKE, "admin", "cancel-reassignment", value)
        try:
            result = self._controller_call("alter_partition_reassignments", lambda admin:
                                           admin.alter_partition_reassignments({tp: None for tp in targets}))
        except (AdminError, ConnectionError) as e:
            return self._request_error("cancel-reassignment", value, e)
        errors = {f"{t}/{p}": err.name for (t, p), err in result.items() if err is not None}
        if errors and len(errors) == len(targets):
            first = next(iter(errors.values()))
            self.history.record(FAIL, "admin", "cancel-reassignment", value, error=first, errors=errors)
            return first
        self.history.record(OK, "admin", "cancel-reassignment", value, errors=errors)
        return None

    def pending(self) -> str | None:
        """What reassignment is still running (heal waits for it), or None."""
        zk = self.observer.zk
        if zk.exists(paths.REASSIGN_PARTITIONS):
            return f"{paths.REASSIGN_PARTITIONS} still there"
        for t in self.topics:
            try:
                assignment = codecs.TopicAssignment.decode(zk.get(paths.topic(t.name))[0])
            except NoNodeError:
                continue
            for p in sorted(set(assignment.adding) | set(assignment.removing)):
                return (f"{t.name}/{p} still reassigning (adding {list(assignment.adding.get(p, ()))}, removing "
                        f"{list(assignment.removing.get(p, ()))})")
        return None

    # -- elections -------------------------------------------------------------------------------------------------
    def elect(self, kind: str, topic: str | None, partition: int) -> str | None:
        """ElectLeaders ``preferred`` or ``unclean``.  Returns the error of a single partition, or None (per
        partition outcomes are in the history: ELECTION_NOT_NEEDED is an answer, not a failure)."""
        f = f"{kind}-election"
        targets = self.partitions(topic, partition)
        snap = self.observer.snapshot
        leaders = sorted({snap.leader(t, p) for t, p in targets} - {None})
        self.history.info("nemesis", f, leaders, partitions=[f"{t}/{p}" for t, p in targets])
        value = {"partitions": [f"{t}/{p}" for t, p in targets]}
        self.history.record(INVOKE, "admin", f, value)
        election = ElectionType.PREFERRED if kind == "preferred" else ElectionType.UNCLEAN

        def attempt() -> tuple[list[str], dict[str, str]]:
            # confluent-kafka 2.16's binding refuses every keyword here; socket.timeout.ms (set above) is the
            # request's timeout and its operation timeout.
            result = self._confluent.elect_leaders(election, [TopicPartition(t, p) for t, p in targets]
                                                   ).result(timeout=ELECTION_TIMEOUT_S + 15)
            errors, elected = {}, []
            for tp, err in sorted(result.items(), key=lambda kv_: (kv_[0].topic, kv_[0].partition)):
                if err is None:
                    elected.append(f"{tp.topic}/{tp.partition}")
                else:
                    errors[f"{tp.topic}/{tp.partition}"] = error_name(err.args[0] if isinstance(err, KafkaException)
                                                                      else err)
            return elected, errors
        try:
            # librdkafka sends it to the controller its metadata names; a moved controller answers NOT_CONTROLLER
            # for every partition (nothing elected): ask again, bounded, once the metadata caught up.
            elected, errors = Retrying(
                retry=retry_if_result(lambda r: bool(r[1]) and set(r[1].values()) == {"NOT_CONTROLLER"}),
                retry_error_callback=lambda st: st.outcome.result(), stop=stop_after_delay(CONTROLLER_RETRY_S),
                wait=wait_exponential(multiplier=0.2, max=1.0))(attempt)
        except KafkaException as e:
            name = error_name(e.args[0])
            self.history.record(INFO, "admin", f, value, error=name)
            return name
        self.history.record(OK, "admin", f, value, elected=elected, errors=errors)
        log.info("election %s", kv(type=kind, elected=elected, errors=errors))
        if topic is not None and errors:
            return next(iter(errors.values()))
        return None

    # -- throttles ---------------------------------------------------------------------------------------------
    def throttle(self, rate: int, brokers: list[int], topic: str | None, duration_s: float) -> None:
        """Set the replication throttles; remove them after ``duration_s`` (0: at heal or a ``clear`` step)."""
        topics = [topic] if topic is not None else [t.name for t in self.topics]
        self.history.info("nemesis", "throttle", brokers, rate=rate, topics=topics, duration_s=duration_s)
        with self._lock:
            self._throttled[0].update(brokers)
            self._throttled[1].update(topics)
        self._alter_throttles(brokers, topics, rate)
        if duration_s:
            t = threading.Timer(duration_s, self._clear_quietly, (brokers, topics))
            t.daemon = True
            self._timers.append(t)
            t.start()

    def clear_throttles(self, brokers: list[int] | None = None, topics: list[str] | None = None) -> None:
        """Remove the throttles this run set (of ``brokers`` / ``topics`` only, when given)."""
        with self._lock:
            brokers = sorted(self._throttled[0] if brokers is None else set(brokers))
            topics = sorted(self._throttled[1] if topics is None else set(topics))
        if not brokers and not topics:
            return
        self.history.info("nemesis", "unthrottle", brokers, topics=topics)
        failed = self._alter_throttles(brokers, topics, None)
        with self._lock:   # what could not be removed now (a broker down) is removed at heal
            self._throttled[0].difference_update(b for b in brokers if f"broker {b}" not in failed)
            self._throttled[1].difference_update(t for t in topics if f"topic {t}" not in failed)

    def _clear_quietly(self, brokers: list[int], topics: list[str]) -> None:
        try:
            self.clear_throttles(brokers, topics)
        except Exception as e:  # noqa: BLE001 - a timer thread: heal clears what is left
            log.info("could not clear throttles %s", kv(brokers=brokers, error=repr(e)[:200]))

    def _alter_throttles(self, brokers: list[int], topics: list[str], rate: int | None) -> dict[str, str]:
        """IncrementalAlterConfigs SET (``rate``) or DELETE (None), recorded as ``admin`` ``throttle``; returns
        the resources that failed (``"broker 2"``, ``"topic t"``) with their error."""
        value = {"brokers": brokers, "topics": topics, "rate": rate}
        self.history.record(INVOKE, "admin", "throttle", value)

        def entries(names, v):
            op = AlterConfigOpType.DELETE if rate is None else AlterConfigOpType.SET
            return [ConfigEntry(k, None if rate is None else v, incremental_operation=op) for k in names]
        resources = {f"broker {b}": ConfigResource(ResourceType.BROKER, str(b),
                                                   incremental_configs=entries(THROTTLE_RATES, str(rate)))
                     for b in brokers}
        resources.update({f"topic {t}": ConfigResource(ResourceType.TOPIC, t, incremental_configs=entries(
            plan.TOPIC_LEVEL_THROTTLES, "*")) for t in topics})
        failed = {}
        # One request per resource: librdkafka sends a broker's to that broker, a topic's to any.
        for what, resource in resources.items():
            try:
                for f in self._confluent.incremental_alter_configs([resource], request_timeout=15).values():
                    f.result(timeout=20)
            except KafkaException as e:   # e.g. the broker is down; recorded, heal removes what is left
                failed[what] = error_name(e.args[0])
        if failed:
            self.history.record(INFO, "admin", "throttle", value, errors=failed)
            if len(failed) == len(brokers) + len(topics):
                raise FaultError(f"no throttle could be {'set' if rate else 'removed'}: {failed}")
        else:
            self.history.record(OK, "admin", "throttle", value)
        return failed

    def heal(self) -> None:
        """Cancel pending throttle timers and remove every throttle this run set (so heal is not slowed); what
        cannot be removed is recorded and left (heal's bound then says whether it mattered)."""
        for t in self._timers:
            t.cancel()
        try:
            self.clear_throttles()
        except FaultError as e:
            log.info("throttles left at heal %s", kv(error=str(e)))
