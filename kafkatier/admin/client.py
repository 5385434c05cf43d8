"""A thin admin client over kafka-python's ``KafkaAdminClient``: bounded retries, plain result types and Kafka
error names.

Every call retries (tenacity, exponential backoff, bounded by attempts and a deadline) the errors that mean
"ask again, maybe elsewhere": NOT_CONTROLLER, LEADER_NOT_AVAILABLE, coordinator and connection errors.  What is
left is raised as :class:`AdminError`, whose text is ``<ERROR_NAME>: <message>`` with Kafka's error name
(including the project's code 950, ``TIERED_STORAGE_DISABLEMENT_IN_PROGRESS``, which kafka-python does not know).

AlterPartitionReassignments and ListPartitionReassignments are built here and sent to the controller with
kafka-python's ``_send_request_to_controller`` (it finds the controller and retries once on NOT_CONTROLLER):
kafka-python refuses an empty replica list client-side, and the broker's INVALID_REPLICA_ASSIGNMENT is wanted.

DescribeConfigs and IncrementalAlterConfigs are sent as protocol requests through the admin client's connection
manager rather than through ``describe_configs``/``alter_configs``: kafka-python drops DescribeConfigs'
per-resource errors and folds IncrementalAlterConfigs' into strings, and both are needed here.  That uses
kafka-python 3.0's ``KafkaAdminClient._manager`` (``run``/``send``), pinned by ``setup.cfg``.
"""
from __future__ import annotations

import base64
import uuid
from collections import defaultdict
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

import attrs
import kafka.errors as kerr
from kafka.admin import ConfigResourceType, ConfigSourceType, KafkaAdminClient
from kafka.protocol.admin import (AlterPartitionReassignmentsRequest, DescribeConfigsRequest,
                                  IncrementalAlterConfigsRequest, ListPartitionReassignmentsRequest)
from tenacity import Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, wait_exponential
from tenacity import wait_random

from kafkatier.admin.bootstrap import NoReachableBrokerError
from kafkatier.logsetup import get_logger, kv
from kafkatier.protocol import codec
from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.build import build
from kafkatier.protocol.errors import Errors

log = get_logger("admin")

T = TypeVar("T")

#: Error codes after which the same request is retried (it was not applied).
RETRIABLE_CODES = frozenset({
    Errors.NOT_CONTROLLER, Errors.LEADER_NOT_AVAILABLE, Errors.NETWORK_EXCEPTION,
    Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR,
    Errors.BROKER_NOT_AVAILABLE, Errors.NOT_LEADER_OR_FOLLOWER, Errors.REPLICA_NOT_AVAILABLE,
})

#: Messages for codes kafka-python has no description for.
_DEFAULT_MESSAGES = {
    Errors.TIERED_STORAGE_DISABLEMENT_IN_PROGRESS:
        "Tiered storage of the topic is being disabled; its tiered-storage configs cannot change until "
        "disablement completes.",
}

# kafka-python client-side failures that mean the request never reached a broker: always safe to retry.
_NOT_SENT = (kerr.NodeNotReadyError, kerr.KafkaConnectionError, kerr.StaleMetadata, kerr.TooManyInFlightRequests,
             kerr.MetadataEmptyBrokerList)

# Resource types of the ``--entity-type`` names.
RESOURCE_TYPES = {"topics": ConfigResourceType.TOPIC, "brokers": ConfigResourceType.BROKER,
                  "broker-loggers": ConfigResourceType.BROKER_LOGGER}


# ------------------------------------------------------------------------------------------------ errors

def error_name(code: int) -> str:
    """Kafka's name for an error code (the project's enum first, so 950 has its name)."""
    try:
        return Errors(code).name
    except ValueError:
        cls = kerr.kafka_errors.get(code)
        return cls.message if cls is not None and cls.message else f"UNKNOWN_ERROR_CODE_{code}"


class AdminError(Exception):
    """A failed admin operation: ``name`` is Kafka's error name (or the client exception's class name when
    there is no error code), ``message`` the broker's or client's explanation."""

    def __init__(self, name: str, message: str = "", code: int | None = None, retriable: bool = False):
        super().__init__(f"{name}: {message}" if message else name)
        self.name, self.message, self.code, self.retriable = name, message, code, retriable

    @classmethod
    def from_code(cls, code: int, message: str | None = None) -> AdminError:
        if not message:
            known = kerr.kafka_errors.get(code)
            message = _DEFAULT_MESSAGES.get(code) or (known.description if known is not None else "") or ""
        return cls(error_name(code), message, code=code, retriable=code in RETRIABLE_CODES)


def to_admin_error(exc: BaseException, idempotent: bool = True) -> AdminError | None:
    """The :class:`AdminError` for a kafka-python (or project) exception, or None if it is not a client error
    (programming errors stay what they are)."""
    if isinstance(exc, AdminError):
        return exc
    if isinstance(exc, kerr.BrokerResponseError) and exc.errno is not None:
        text = str(exc.args[0]) if exc.args else ""
        return AdminError.from_code(int(exc.errno), text or None)
    if isinstance(exc, RuntimeError) and "active controller" in str(exc):
        # kafka-python gives up after a second NOT_CONTROLLER with this RuntimeError.
        return AdminError.from_code(Errors.NOT_CONTROLLER, str(exc))
    if isinstance(exc, kerr.IncompatibleBrokerVersion):
        return AdminError(error_name(Errors.UNSUPPORTED_VERSION), str(exc.args[0]) if exc.args else "",
                          code=Errors.UNSUPPORTED_VERSION)
    if isinstance(exc, kerr.KafkaError):
        message = str(exc.args[0]) if exc.args else ""
        retriable = isinstance(exc, _NOT_SENT) or (idempotent and isinstance(exc, kerr.RetriableError))
        return AdminError(type(exc).__name__, message, retriable=retriable)
    return None


def format_error(exc: BaseException) -> str:
    """One line for a user: ``NAME: message``."""
    if isinstance(exc, NoReachableBrokerError):
        return str(exc)
    err = to_admin_error(exc)
    if err is not None:
        return str(err)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# ------------------------------------------------------------------------------------------------ retries

@attrs.frozen
class RetryPolicy:
    """Bounds for retrying retriable admin errors."""

    attempts: int = 6
    deadline_s: float = 30.0
    initial_delay_s: float = 0.1
    max_delay_s: float = 2.0

    def __attrs_post_init__(self) -> None:
        if self.attempts < 1 or self.deadline_s <= 0 or self.initial_delay_s < 0:
            raise ValueError(f"invalid retry policy {self!r}")

    def retrying(self, what: str) -> Retrying:
        def before_sleep(state) -> None:
            log.warning("admin request failed, retrying %s", kv(
                call=what, attempt=state.attempt_number, error=state.outcome.exception(),
                sleep_s=f"{state.next_action.sleep:.2f}"))

        return Retrying(
            retry=retry_if_exception(lambda e: isinstance(e, AdminError) and e.retriable),
            stop=stop_after_attempt(self.attempts) | stop_after_delay(self.deadline_s),
            wait=wait_exponential(multiplier=self.initial_delay_s, max=self.max_delay_s)
            + wait_random(0, self.initial_delay_s),
            before_sleep=before_sleep,
            reraise=True,
        )


# ------------------------------------------------------------------------------------------------ results

@attrs.frozen
class NewTopicSpec:
    """A topic to create; -1 leaves partitions / replication factor to the broker defaults."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignment: Mapping[int, tuple[int, ...]] | None = None
    configs: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class PartitionInfo:
    partition: int
    leader: int                      # -1: no leader
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    leader_epoch: int = -1


@attrs.frozen
class TopicInfo:
    name: str
    topic_id: str | None             # Kafka's base64 form; None for the zero UUID
    internal: bool
    partitions: tuple[PartitionInfo, ...]


@attrs.frozen
class ConfigSynonym:
    name: str
    value: str | None
    source: str


@attrs.frozen
class ConfigEntry:
    name: str
    value: str | None
    source: str                      # ConfigSourceType name, e.g. DYNAMIC_TOPIC_CONFIG
    sensitive: bool = False
    read_only: bool = False
    synonyms: tuple[ConfigSynonym, ...] = ()


def kafka_uuid(value: Any) -> str | None:
    """A topic id as Kafka prints it (URL-safe base64 without padding); None for the zero UUID or no id."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = uuid.UUID(value)
        except ValueError:
            return value or None   # already in Kafka's form
    if not isinstance(value, uuid.UUID):
        return str(value)
    if value.int == 0:
        return None
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def topic_info_from_metadata(topic: Mapping[str, Any]) -> TopicInfo:
    """A :class:`TopicInfo` from one topic of kafka-python's metadata dict."""
    parts = tuple(sorted(
        (PartitionInfo(partition=int(p["partition_index"]), leader=int(p.get("leader_id", -1)),
                       replicas=tuple(p.get("replica_nodes") or ()), isr=tuple(p.get("isr_nodes") or ()),
                       offline_replicas=tuple(p.get("offline_replicas") or ()),
                       leader_epoch=int(p.get("leader_epoch", -1)))
         for p in topic.get("partitions") or ()),
        key=lambda p: p.partition))
    return TopicInfo(name=topic["name"], topic_id=kafka_uuid(topic.get("topic_id")),
                     internal=bool(topic.get("is_internal", False)), partitions=parts)


def _source_name(config: Any, resource_type: ConfigResourceType) -> str:
    source = getattr(config, "config_source", None)
    if source is not None and source >= 0:
        try:
            return ConfigSourceType(source).name
        except ValueError:
            return "UNKNOWN"
    # DescribeConfigs v0: no source, derive it as Kafka's client does
    if getattr(config, "is_default", False):
        return ConfigSourceType.DEFAULT_CONFIG.name
    if getattr(config, "read_only", False) and resource_type is ConfigResourceType.BROKER:
        return ConfigSourceType.STATIC_BROKER_CONFIG.name
    return ConfigSourceType.dynamic_for_resource_type(resource_type).name


def _synonym_source(source: int) -> str:
    try:
        return ConfigSourceType(source).name
    except ValueError:
        return "UNKNOWN"


def config_entries_from_result(result: Any) -> list[ConfigEntry]:
    """The entries of one DescribeConfigs result, in the broker's order."""
    rtype = ConfigResourceType(result.resource_type)
    return [ConfigEntry(name=c.name, value=c.value, source=_source_name(c, rtype),
                        sensitive=bool(getattr(c, "is_sensitive", False)), read_only=bool(c.read_only),
                        synonyms=tuple(ConfigSynonym(s.name, s.value, _synonym_source(s.source))
                                       for s in (getattr(c, "synonyms", None) or ())))
            for c in result.configs]


@attrs.frozen
class OngoingPartitionReassignment:
    """One partition being reassigned (ListPartitionReassignments): RS, AR and RR."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


# ------------------------------------------------------------------------------------------------ client

class AdminClient:
    """Admin operations against a cluster; use as a context manager or call :meth:`close`."""

    def __init__(self, bootstrap_servers: Sequence[str] | str, *, client_kwargs: Mapping[str, Any] | None = None,
                 request_timeout_ms: int | None = None, bootstrap_timeout_ms: int = 15000,
                 retry: RetryPolicy | None = None,
                 admin_factory: Callable[..., KafkaAdminClient] = KafkaAdminClient):
        kwargs: dict[str, Any] = {"client_id": "kafkatier-admin", **(client_kwargs or {})}
        if request_timeout_ms is not None:
            kwargs["request_timeout_ms"] = request_timeout_ms
        kwargs.setdefault("request_timeout_ms", 30000)
        servers = [bootstrap_servers] if isinstance(bootstrap_servers, str) else list(bootstrap_servers)
        self._timeout_ms = int(kwargs["request_timeout_ms"])
        self._retry = retry or RetryPolicy()
        try:
            self._admin = admin_factory(bootstrap_servers=servers, bootstrap_timeout_ms=bootstrap_timeout_ms,
                                        **kwargs)
        except kerr.KafkaTimeoutError as e:
            hint = ""
            if str(kwargs.get("security_protocol", "")).upper() in ("SSL", "SASL_SSL"):
                hint = "; over TLS: does ssl.truststore.location trust the brokers' CA, and do they trust the client's?"
            raise NoReachableBrokerError(f"could not bootstrap from {','.join(servers)} within "
                                         f"{bootstrap_timeout_ms / 1000:g}s ({e.args[0] if e.args else e}{hint})"
                                         ) from None
        except kerr.KafkaConfigurationError as e:
            raise AdminError(type(e).__name__, str(e.args[0]) if e.args else "") from None

    def close(self) -> None:
        self._admin.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def kafka_admin(self) -> KafkaAdminClient:
        """The wrapped kafka-python client, for operations not wrapped here."""
        return self._admin

    # -- plumbing ----------------------------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[], T], idempotent: bool = True) -> T:
        """``fn()`` with retries; kafka-python exceptions come out as :class:`AdminError`."""
        def attempt() -> T:
            try:
                return fn()
            except Exception as e:
                err = to_admin_error(e, idempotent)
                if err is None or err is e:
                    raise
                raise err from e
        return self._retry.retrying(what)(attempt)

    def _send_to_controller(self, request: Any) -> Any:
        """Send one protocol request to the active controller; a top-level error raises :class:`AdminError`."""
        response = self._admin._manager.run(  # noqa: SLF001 (see module docstring)
            self._admin._send_request_to_controller, request,  # noqa: SLF001
            lambda r: (kerr.for_code(r.error_code),), False)
        if response.error_code:
            raise AdminError.from_code(response.error_code, response.error_message)
        return response

    def send_request(self, request: Any, node_id: int | None = None) -> Any:
        """One protocol request to ``node_id`` (or the least loaded broker), no retries: for the tools that
        speak an API this client does not wrap (``kafkatier transactions``)."""
        return self._send(request, node_id)

    def _send(self, request: Any, node_id: int | None = None) -> Any:
        """Send one protocol request (to ``node_id``, or the least loaded broker) and wait for the response."""
        manager = self._admin._manager  # noqa: SLF001 (see module docstring)

        async def send():
            return await manager.send(request, node_id=node_id)
        return manager.run(send)

    # -- topics ------------------------------------------------------------------------------------------

    def create_topics(self, topics: Sequence[NewTopicSpec], timeout_ms: int | None = None,
                      validate_only: bool = False) -> dict[str, AdminError | None]:
        """Create topics; per topic, None or the error that stopped it.  Topics failing with a retriable error
        are retried (only they)."""
        return self._per_topic("create_topics", [t.name for t in topics], lambda names: self._admin.create_topics(
            {t.name: _create_spec(t) for t in topics if t.name in names}, timeout_ms=timeout_ms or self._timeout_ms,
            validate_only=validate_only, raise_errors=False)["topics"])

    def delete_topics(self, names: Sequence[str], timeout_ms: int | None = None) -> dict[str, AdminError | None]:
        """Delete topics; per topic, None or the error."""
        return self._per_topic("delete_topics", list(names), lambda pending: self._admin.delete_topics(
            list(pending), timeout_ms=timeout_ms or self._timeout_ms, raise_errors=False)["topics"])

    def create_partitions(self, counts: Mapping[str, int], timeout_ms: int | None = None,
                          validate_only: bool = False) -> dict[str, AdminError | None]:
        """Grow topics to the given partition counts (CreatePartitions); per topic, None or the error."""
        return self._per_topic("create_partitions", list(counts), lambda pending: [
            {"name": r.name, "error_code": r.error_code, "error_message": r.error_message}
            for r in self._admin.create_partitions({n: counts[n] for n in pending},
                                                   timeout_ms=timeout_ms or self._timeout_ms,
                                                   validate_only=validate_only, raise_errors=False).results])

    def _per_topic(self, what: str, names: list[str],
                   send: Callable[[list[str]], list[Mapping[str, Any]]]) -> dict[str, AdminError | None]:
        results: dict[str, AdminError | None] = {}
        pending = list(dict.fromkeys(names))

        def attempt() -> None:
            nonlocal pending
            retry_later = []
            for row in send(pending):
                name, code = row.get("name"), int(row.get("error_code") or 0)
                err = AdminError.from_code(code, row.get("error_message")) if code else None
                results[name] = err
                if err is not None and err.retriable:
                    retry_later.append(name)
            missing = [n for n in pending if n not in results]
            for n in missing:
                results[n] = AdminError("UNKNOWN_SERVER_ERROR", f"no result for topic {n!r} in the response")
            if retry_later:
                pending = retry_later
                raise results[retry_later[0]]  # retriable: tenacity calls attempt() again

        try:
            self._call(what, attempt, idempotent=False)
        except AdminError as e:
            if not any(r is e for r in results.values()):
                raise  # the whole request failed
        return {n: results.get(n) for n in dict.fromkeys(names)}

    def list_topics(self, include_internal: bool = True) -> list[str]:
        """Topic names, sorted."""
        if include_internal:
            return sorted(self._call("list_topics", self._admin.list_topics))
        return sorted(t.name for t in self.describe_topics() if not t.internal)

    def describe_topics(self, names: Sequence[str] | None = None) -> list[TopicInfo]:
        """Partitions, leaders, replicas and ISRs of ``names`` (all topics if None), sorted by name.  A topic
        error (e.g. UNKNOWN_TOPIC_OR_PARTITION) raises :class:`AdminError`."""
        topics = self._call("describe_topics", lambda: self._admin.describe_topics(
            list(names) if names is not None else None))
        out = []
        for t in topics:
            code = int(t.get("error_code") or 0)
            if code:
                name = t.get("name")
                msg = f"Topic '{name}' does not exist." if code == Errors.UNKNOWN_TOPIC_OR_PARTITION else None
                raise AdminError.from_code(code, msg)
            out.append(topic_info_from_metadata(t))
        return sorted(out, key=lambda t: t.name)

    def broker_ids(self) -> list[int]:
        """Ids of the live brokers, sorted."""
        cluster = self._call("describe_cluster", self._admin.describe_cluster)
        return sorted(int(b["broker_id"]) for b in cluster.get("brokers") or ())

    # -- configs -----------------------------------------------------------------------------------------

    def describe_configs(self, entity_type: str, names: Sequence[str], include_synonyms: bool = True
                         ) -> dict[str, list[ConfigEntry]]:
        """Every config entry of each resource (``entity_type``: topics, brokers, broker-loggers; a broker is
        named by its id, ``""`` is the cluster default).  The first resource error raises :class:`AdminError`.
        """
        rtype = _resource_type(entity_type)
        by_node: dict[int | None, list[str]] = defaultdict(list)
        for name in names:
            by_node[_node_for(rtype, name)].append(name)
        out: dict[str, list[ConfigEntry]] = {}
        for node, group in by_node.items():
            request = DescribeConfigsRequest(
                resources=[DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=int(rtype), resource_name=n, configuration_keys=None) for n in group],
                include_synonyms=include_synonyms, include_documentation=False)
            response = self._call("describe_configs", lambda: self._send(request, node))
            for result in response.results:
                if result.error_code:
                    raise AdminError.from_code(result.error_code, result.error_message)
                out[result.resource_name] = config_entries_from_result(result)
        return {n: out.get(n, []) for n in names}

    def alter_configs(self, entity_type: str, name: str, set_configs: Mapping[str, str] | None = None,
                      delete_configs: Iterable[str] = (), validate_only: bool = False) -> None:
        """IncrementalAlterConfigs of one resource: SET each of ``set_configs``, DELETE each of
        ``delete_configs``; a refused change raises :class:`AdminError`."""
        rtype = _resource_type(entity_type)
        entries = [IncrementalAlterConfigsRequest.AlterConfigsResource.AlterableConfig(
            name=k, config_operation=0, value=v) for k, v in (set_configs or {}).items()]
        entries += [IncrementalAlterConfigsRequest.AlterConfigsResource.AlterableConfig(
            name=k, config_operation=1, value=None) for k in delete_configs]
        request = IncrementalAlterConfigsRequest(
            resources=[IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=int(rtype), resource_name=name, configs=entries)],
            validate_only=validate_only)

        def attempt() -> None:
            response = self._send(request, _node_for(rtype, name))
            for r in response.responses:
                if r.error_code:
                    raise AdminError.from_code(r.error_code, r.error_message)
        self._call("incremental_alter_configs", attempt, idempotent=True)

    # -- SCRAM users -------------------------------------------------------------------------------------

    def alter_user_scram_credentials(self, user: str, upserts: Mapping[str, tuple[str, int]],
                                     deletes: Iterable[str] = ()) -> None:
        """AlterUserScramCredentials for one user: ``upserts`` {mechanism: (password, iterations)} (salted here,
        the password never leaves), ``deletes`` mechanisms; a refusal raises :class:`AdminError`."""
        from kafka.admin import UserScramCredentialDeletion, UserScramCredentialUpsertion

        changes = [UserScramCredentialUpsertion(user, m, pw, iterations=it) for m, (pw, it) in upserts.items()]
        changes += [UserScramCredentialDeletion(user, m) for m in deletes]

        def attempt() -> None:
            for name, message in self._admin.alter_user_scram_credentials(changes).items():
                if message:
                    raise AdminError("AlterUserScramCredentials", f"{name}: {message}")
        self._call("alter_user_scram_credentials", attempt, idempotent=True)

    def describe_user_scram_credentials(self, users: Sequence[str] | None = None) -> dict[str, dict[str, int]]:
        """{user: {mechanism: iterations}} (all users when ``users`` is None)."""
        from kafka.protocol.admin.users import DescribeUserScramCredentialsRequest

        request = DescribeUserScramCredentialsRequest(
            users=None if users is None else [DescribeUserScramCredentialsRequest.UserName(name=u) for u in users])
        response = self._call("describe_user_scram_credentials", lambda: self._send(request))
        if response.error_code:
            raise AdminError.from_code(response.error_code, response.error_message)
        names = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
        return {r.user: {names.get(c.mechanism, str(c.mechanism)): c.iterations for c in r.credential_infos}
                for r in response.results if not r.error_code}

    # -- client quotas (KIP-546) ------------------------------------------------------------------------

    def alter_client_quotas(self, entity: Mapping[str, str | None], sets: Mapping[str, float],
                            deletes: Iterable[str] = (), validate_only: bool = False) -> None:
        """AlterClientQuotas for one entity (``{"user": u, "client-id": c}``, None = the default); a refusal
        raises :class:`AdminError` with the broker's message."""
        from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest

        entry = AlterClientQuotasRequest.EntryData
        request = AlterClientQuotasRequest(validate_only=validate_only, entries=[entry(
            entity=[entry.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
            ops=[entry.OpData(key=k, value=float(v), remove=False) for k, v in sets.items()]
            + [entry.OpData(key=k, value=0.0, remove=True) for k in deletes])])

        def attempt() -> None:
            response = self._send(request)
            for r in response.entries:
                if r.error_code:
                    raise AdminError.from_code(r.error_code, r.error_message)
        self._call("alter_client_quotas", attempt, idempotent=True)

    def describe_client_quotas(self, components: Sequence[tuple[str, int, str | None]], strict: bool = False
                               ) -> list[tuple[dict[str, str | None], dict[str, float]]]:
        """DescribeClientQuotas: ``[(entity, {key: value})]`` for the filter ``[(entity_type, match_type,
        match)]`` (match type 0 exact, 1 default, 2 any)."""
        from kafka.protocol.admin.client_quotas import DescribeClientQuotasRequest

        request = DescribeClientQuotasRequest(strict=strict, components=[
            DescribeClientQuotasRequest.ComponentData(entity_type=t, match_type=m, match=x) for t, m, x in components])
        response = self._call("describe_client_quotas", lambda: self._send(request))
        if response.error_code:
            raise AdminError.from_code(response.error_code, response.error_message)
        return [({e.entity_type: e.entity_name for e in entry.entity}, {v.key: v.value for v in entry.values})
                for entry in response.entries or []]

    # -- records and log dirs ----------------------------------------------------------------------------

    def delete_records(self, records_to_delete: Mapping[Any, int], timeout_ms: int | None = None,
                       partition_leader_id: int | None = None) -> dict:
        """kafka-python's ``delete_records`` (``{TopicPartition: offset}``), with retries."""
        return self._call("delete_records", lambda: self._admin.delete_records(
            records_to_delete, timeout_ms=timeout_ms, partition_leader_id=partition_leader_id))

    def describe_log_dirs(self, topic_partitions: Any = None, brokers: Sequence[int] | None = None) -> list:
        """kafka-python's ``describe_log_dirs``: per broker ``{"broker": id, "log_dirs": [...]}``."""
        return self._call("describe_log_dirs", lambda: self._admin.describe_log_dirs(
            topic_partitions=topic_partitions, brokers=list(brokers) if brokers is not None else None))

    def alter_replica_log_dirs(self, assignments: Mapping[tuple[str, int, int], str]) -> dict[tuple[str, int, int], int]:
        """kafka-python's ``alter_replica_log_dirs`` ({(topic, partition, broker): path}): the error code per
        replica (0 = the move started, or nothing to do).  Sent once: REPLICA_NOT_AVAILABLE is returned, not
        retried (the caller decides, as kafka-reassign-partitions does)."""
        result = self._call("alter_replica_log_dirs",
                            lambda: self._admin.alter_replica_log_dirs(dict(assignments)), idempotent=True)
        return {(k.topic, k.partition, k.broker_id): int(getattr(v, "errno", 0) or 0) for k, v in result.items()}

    # -- ACLs (DescribeAcls / CreateAcls / DeleteAcls, v2; fields and codes as on the wire) ---------------------

    def describe_acls(self, acl_filter: Mapping[str, Any]) -> list[Any]:
        """The resources (with their ``acls``) matching a DescribeAcls filter; an error raises AdminError."""
        def attempt() -> list[Any]:
            r = self._send(build(codec.REGISTRY[ApiKeys.DESCRIBE_ACLS][0], 2, acl_filter))
            if r.error_code:
                raise AdminError.from_code(r.error_code, r.error_message)
            return list(r.resources)
        return self._call("describe_acls", attempt)

    def create_acls(self, creations: Sequence[Mapping[str, Any]]) -> list[AdminError | None]:
        """CreateAcls: per creation None (created) or its AdminError.  Sent once (not idempotent to retry
        blindly; adding an existing ACL is harmless, but the caller reports)."""
        r = self._call("create_acls", lambda: self._send(build(codec.REGISTRY[ApiKeys.CREATE_ACLS][0], 2, {"creations": creations})))
        return [AdminError.from_code(c.error_code, c.error_message) if c.error_code else None for c in r.results]

    def delete_acls(self, filters: Sequence[Mapping[str, Any]]) -> list[tuple[AdminError | None, list[Any]]]:
        """DeleteAcls: per filter (its AdminError or None, the ACLs it deleted)."""
        r = self._call("delete_acls", lambda: self._send(build(codec.REGISTRY[ApiKeys.DELETE_ACLS][0], 2, {"filters": filters})))
        return [(AdminError.from_code(f.error_code, f.error_message) if f.error_code else None,
                 list(f.matching_acls)) for f in r.filter_results]


    # -- partition reassignments (KIP-455) -------------------------------------------------------------

    def alter_partition_reassignments(self, reassignments: Mapping[tuple[str, int], Sequence[int] | None],
                                      timeout_ms: int | None = None) -> dict[tuple[str, int], AdminError | None]:
        """AlterPartitionReassignments: ``{(topic, partition): target replicas}``, ``None`` cancels.  Per
        partition, None (the reassignment started, or was cancelled) or the error (e.g. INVALID_REPLICA_ASSIGNMENT,
        UNKNOWN_TOPIC_OR_PARTITION, NO_REASSIGNMENT_IN_PROGRESS)."""
        by_topic: dict[str, list] = defaultdict(list)
        for (topic, partition), replicas in reassignments.items():
            by_topic[topic].append(AlterPartitionReassignmentsRequest.ReassignableTopic.ReassignablePartition(
                partition_index=int(partition), replicas=None if replicas is None else [int(r) for r in replicas]))
        request = AlterPartitionReassignmentsRequest(
            timeout_ms=timeout_ms or self._timeout_ms,
            topics=[AlterPartitionReassignmentsRequest.ReassignableTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()])

        def attempt() -> dict[tuple[str, int], AdminError | None]:
            response = self._send_to_controller(request)
            return {(t.name, p.partition_index): AdminError.from_code(p.error_code, p.error_message)
                    if p.error_code else None for t in response.responses for p in t.partitions}
        results = self._call("alter_partition_reassignments", attempt, idempotent=True)
        return {(t, int(p)): results.get((t, int(p)), AdminError("UNKNOWN_SERVER_ERROR", f"no result for {t}-{p}"))
                for t, p in reassignments}

    def list_partition_reassignments(self, partitions: Iterable[tuple[str, int]] | None = None
                                     ) -> dict[tuple[str, int], OngoingPartitionReassignment]:
        """ListPartitionReassignments: the ongoing reassignments of ``partitions`` (all if None)."""
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = defaultdict(list)
            for topic, partition in partitions:
                by_topic[topic].append(int(partition))
            topics = [ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics(
                name=t, partition_indexes=ps) for t, ps in by_topic.items()]
        request = ListPartitionReassignmentsRequest(timeout_ms=self._timeout_ms, topics=topics)

        def attempt() -> dict[tuple[str, int], OngoingPartitionReassignment]:
            response = self._send_to_controller(request)
            return {(t.name, p.partition_index): OngoingPartitionReassignment(
                tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas))
                for t in response.topics for p in t.partitions}
        return self._call("list_partition_reassignments", attempt, idempotent=True)


def _create_spec(t: NewTopicSpec) -> dict[str, Any]:
    spec: dict[str, Any] = {"num_partitions": t.num_partitions, "replication_factor": t.replication_factor,
                            "configs": dict(t.configs)}
    if t.replica_assignment:
        spec.update(num_partitions=-1, replication_factor=-1,
                    assignments={p: list(r) for p, r in t.replica_assignment.items()})
    return spec


def _resource_type(entity_type: str) -> ConfigResourceType:
    try:
        return RESOURCE_TYPES[entity_type]
    except KeyError:
        raise ValueError(f"unsupported entity type {entity_type!r}; expected one of "
                         f"{', '.join(RESOURCE_TYPES)}") from None


def _node_for(rtype: ConfigResourceType, name: str) -> int | None:
    """Broker resources go to the broker itself (the default, ``""``, to any broker)."""
    if rtype in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER) and name:
        return int(name)
    return None
