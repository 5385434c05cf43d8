"""Client workloads of a scenario: real Kafka clients (confluent-kafka / librdkafka) whose every operation is
recorded in the history (Jepsen's invoke / ok / fail / info).

- :class:`ProducerWorkload` (process ``producer-N``): sends ``value = "producer-N:<seq>"`` at a fixed rate.
  ``invoke`` when handed to the client, ``ok`` with ``partition`` and ``offset`` on acknowledgement, ``fail``
  on a definite error, ``info`` when the outcome is unknown (timed out in flight).
- :class:`ConsumerWorkload` (process ``consumer-N``): assigns every partition, starts at the beginning (or
  end), and records each non-empty poll as ``{"<partition>": [[offset, value], ...]}``; ``seek`` entries start a
  new read session (checkers compare offsets only within one session).
- :class:`OffsetsSampler` (process ``offsets``): ListOffsets earliest and latest of every partition every
  ``interval_s`` (``{"<partition>": [log_start_offset, high_watermark]}``).
- :class:`SparkProducerWorkload` (process ``spark_producer-N``): one PySpark batch job, ``kafkatier spark
  produce --rows N --record-size S`` in a subprocess (the scenario process stays light), recorded as one
  ``spark-produce`` invoke and ``ok`` (the job succeeded: every row ``str(i).zfill(S)``, ``0 <= i < N``, is
  acknowledged; Spark may retry a task, so duplicates are allowed) or ``fail``.  With ``exactly_once`` the job
  writes with ``exactlyOnce=true`` (duplicates are then anomalies for read_committed readers, and a failed job
  must leave nothing visible); ``kill_task_after_s`` kills its Python task workers with SIGKILL that long after
  the first progress report that saw its records (``spark-kill-task`` info), so Spark retries those tasks.
- :class:`~kafkatier.scenario.txn_workload.TxnProducerWorkload` (process ``txn_producer-N``): Jepsen's
  transactional workload, in ``txn_workload.py``.
- :class:`AdminOperations` (process ``admin``): the schedule's ``alter_config`` (IncrementalAlterConfigs) and
  ``delete_records`` steps; a DeleteRecords ``ok`` carries each partition's acknowledged ``low_watermark``;
  ``move_replica`` (KIP-113 AlterReplicaLogDirs through the repo's admin client) is ``ok`` when the broker
  accepted the move (``value``: topic, partition, broker, destination dir).
"""
from __future__ import annotations

import os
import threading
import time

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from kafkatier.logsetup import get_logger
from kafkatier.scenario.history import FAIL, INFO, INVOKE, OK, History
from kafkatier.scenario.spec import WorkloadSpec

log = get_logger("scenario.workloads")

# Errors after which the record is certainly not in the log.
DEFINITE_FAILURES = {
    KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.INVALID_REQUIRED_ACKS, KafkaError._INVALID_ARG, KafkaError._UNKNOWN_TOPIC, KafkaError._QUEUE_FULL,
    KafkaError.RECORD_LIST_TOO_LARGE,
}
# Definite only when retries cannot have appended an earlier attempt unnoticed (idempotent producers).
DEFINITE_IF_IDEMPOTENT = {KafkaError.NOT_ENOUGH_REPLICAS}
HW_LOOKUP_S = 10.0
QUIET_LOGGER = __import__("logging").getLogger("scenario.librdkafka")
QUIET_LOGGER.setLevel("CRITICAL")
DEBUG_ENV = "KAFKATIER_SCENARIO_RDKAFKA_DEBUG"


def error_name(err) -> str:
    """librdkafka's name for a Kafka error, or ours for codes librdkafka does not know (KIP-950's 950)."""
    if not hasattr(err, "name"):
        return repr(err)
    name = err.name()
    if name.startswith("ERR_") and name.endswith("?"):
        from kafkatier.protocol.errors import Errors
        try:
            return Errors(err.code()).name
        except ValueError:
            pass
    return name


def client_config(bootstrap: str, client_id: str | None = None) -> dict:
    """librdkafka settings of every scenario client: quiet, short timeouts, metadata refreshed every second;
    ``client_id``: the process the client records as.  With ``KAFKATIER_SCENARIO_RDKAFKA_DEBUG=CONTEXTS``
    (``cgrp,fetch,broker,protocol``...) every client logs those debug contexts to the run's stderr, from
    librdkafka's own threads (so a client blocked in a call still logs; its lines name ``client_id``)."""
    conf = {"bootstrap.servers": bootstrap, "logger": QUIET_LOGGER, "socket.timeout.ms": 5000,
            "topic.metadata.refresh.interval.ms": 1000, "reconnect.backoff.max.ms": 500}
    if client_id is not None:
        conf["client.id"] = client_id
    debug = os.environ.get(DEBUG_ENV)
    if debug:
        del conf["logger"]
        conf["debug"] = debug
    return conf


class Workload(threading.Thread):
    def __init__(self, name: str, history: History):
        super().__init__(name=f"scenario-{name}", daemon=True)
        self.process = name
        self.history = history
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self.last_progress_ns: int | None = None   # history time of the last operation that got an answer

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        try:
            self.work()
        except BaseException as e:  # noqa: BLE001 - reported by the runner
            log.exception("workload %s failed", self.process)
            self.error = e
            self.history.info(self.process, "crashed", repr(e))

    def work(self) -> None:
        raise NotImplementedError


class ProducerWorkload(Workload):
    def __init__(self, name: str, spec: WorkloadSpec, bootstrap: str, history: History,
                 on_ack=None, max_records: int | None = None):
        super().__init__(name, history)
        self.spec = spec
        self.max_records = max_records
        self.on_ack = on_ack
        self.sent = self.acked = self.failed = self.unknown = 0
        conf = client_config(bootstrap) | {
            "acks": spec.acks, "enable.idempotence": spec.idempotence, "linger.ms": 5,
            "message.timeout.ms": spec.delivery_timeout_ms, "request.timeout.ms": 5000,
            "retry.backoff.ms": 100, "retry.backoff.max.ms": 500,
            # Below the small segment.bytes of tiered scenarios: a batch larger than a segment is refused
            # (RECORD_LIST_TOO_LARGE), and batches grow while a send stalls on a failover.
            "batch.size": 4096,
        }
        if not spec.idempotence:
            conf["max.in.flight.requests.per.connection"] = 1
        self.producer = Producer(conf)
        self._pad = "x" * max(0, spec.value_bytes - 16)
        self._raw = history.raw_appender()
        self._ok_name = f"{name}:ok"
        history.register_expander(self._ok_name, self._expand_ok)

    def _expand_ok(self, v: tuple) -> tuple[list, dict, list]:
        """An acknowledgement and, rebuilt from librdkafka's latency, its invoke."""
        t, key, value, partition, offset, latency_s = v
        kv = [key.decode() if key is not None else None, value.decode()]
        invoke = (t - int(latency_s * 1e9), INVOKE, kv, {"topic": self.spec.topic})
        return kv, {"topic": self.spec.topic, "partition": partition, "offset": offset, "acks": self.spec.acks}, \
            [invoke]

    def _record_failed(self, type_: str, msg, error: str) -> None:
        now = self.history.clock()
        kv = [msg.key().decode() if msg.key() is not None else None, msg.value().decode()]
        self.history.record_at(now - int((msg.latency() or 0) * 1e9), INVOKE, self.process, "send", kv,
                               topic=msg.topic())
        self.history.record_at(now, type_, self.process, "send", kv, topic=msg.topic(), error=error)

    def _delivered(self, err, msg) -> None:
        if err is None:   # the hot path: keep the message, decode it when the history is flushed
            self.acked += 1
            if self._raw:
                t = self._raw[1]()
                self._raw[0]((t, OK, self.process, "send",
                              (t, msg.key(), msg.value(), msg.partition(), msg.offset(), msg.latency()),
                              self._ok_name))
            if self.on_ack:
                self.on_ack()
            return
        if err.code() in DEFINITE_FAILURES or (self.spec.idempotence and err.code() in DEFINITE_IF_IDEMPOTENT):
            self.failed += 1
            self._record_failed(FAIL, msg, err.name())
        else:
            self.unknown += 1
            self._record_failed(INFO, msg, err.name())

    def work(self) -> None:
        spec, period = self.spec, 1.0 / self.spec.rate
        start = time.monotonic()
        seq = 0
        while not self.stopping.is_set() and (self.max_records is None or seq < self.max_records):
            due = start + seq * period
            now = time.monotonic()
            if due > now:
                self.producer.poll(min(due - now, 0.05))
                continue
            value = f"{self.process}:{seq}{self._pad}"
            key = f"k{seq % spec.keys}" if spec.keys else None
            try:
                self.producer.produce(spec.topic, value=value, key=key, on_delivery=self._delivered)
            except BufferError:
                self.history.record(INVOKE, self.process, "send", [key, value], topic=spec.topic)
                self.history.record(FAIL, self.process, "send", [key, value], topic=spec.topic, error="_QUEUE_FULL")
                self.producer.poll(0.1)
            except KafkaException as e:
                self.history.record(INVOKE, self.process, "send", [key, value], topic=spec.topic)
                self.history.record(FAIL, self.process, "send", [key, value], topic=spec.topic,
                                    error=e.args[0].name() if e.args else repr(e))
            self.sent += 1
            seq += 1
            self.producer.poll(0)

    def finish(self, timeout: float) -> int:
        """Wait up to ``timeout`` for outstanding sends; returns how many are still unknown."""
        return self.producer.flush(timeout)


class ConsumerWorkload(Workload):
    def __init__(self, name: str, spec: WorkloadSpec, bootstrap: str, partitions: int, history: History):
        super().__init__(name, history)
        self.spec = spec
        self.partitions = partitions
        self.polled = 0
        self.consumer = Consumer(client_config(bootstrap, name) | {
            "group.id": f"scenario-{name}", "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "enable.partition.eof": False, "fetch.wait.max.ms": 100, "session.timeout.ms": 6000,
            "isolation.level": spec.isolation_level} | ({"client.rack": spec.client_rack} if spec.client_rack else {}))

    def _assign(self) -> None:
        start = OFFSET_BEGINNING if self.spec.seek == "beginning" else OFFSET_END
        self.consumer.assign([TopicPartition(self.spec.topic, p, start) for p in range(self.partitions)])
        self.history.info(self.process, "seek", self.spec.seek, topic=self.spec.topic)

    def work(self) -> None:
        self._assign()
        last_seek = time.monotonic()
        while not self.stopping.is_set():
            if self.spec.reseek_s and time.monotonic() - last_seek >= self.spec.reseek_s:
                self._assign()
                last_seek = time.monotonic()
            t_invoke = self.history.now()
            msgs = self.consumer.consume(num_messages=500, timeout=0.2)
            polled: dict[str, list] = {}
            for m in msgs:
                if m.error():
                    self.history.info(self.process, "poll-error", m.error().name(), topic=self.spec.topic)
                    continue
                polled.setdefault(str(m.partition()), []).append([m.offset(), m.value().decode()])
            if polled:
                self.last_progress_ns = self.history.now()
                self.polled += sum(len(v) for v in polled.values())
                self.history.record(INVOKE, self.process, "poll", None, topic=self.spec.topic, invoked=t_invoke)
                self.history.record(OK, self.process, "poll", polled, topic=self.spec.topic, invoked=t_invoke)

    def close(self) -> None:
        self.consumer.close()


class OffsetsSampler(Workload):
    def __init__(self, name: str, spec: WorkloadSpec, bootstrap: str, partitions: int, history: History):
        super().__init__(name, history)
        self.spec = spec
        self.partitions = partitions
        self.consumer = Consumer(client_config(bootstrap) | {"group.id": f"scenario-{name}",
                                                             "enable.auto.commit": False})

    def work(self) -> None:
        while not self.stopping.wait(self.spec.interval_s):
            for p in range(self.partitions):
                t_invoke = self.history.now()
                self.history.record(INVOKE, self.process, "list-offsets", None, topic=self.spec.topic, partition=p)
                try:
                    lo, hi = self.consumer.get_watermark_offsets(TopicPartition(self.spec.topic, p), timeout=2.0,
                                                                 cached=False)
                except KafkaException as e:
                    self.history.record(FAIL, self.process, "list-offsets", None, topic=self.spec.topic,
                                        partition=p, error=e.args[0].name() if e.args else repr(e))
                    continue
                self.history.record(OK, self.process, "list-offsets", [lo, hi], topic=self.spec.topic, partition=p,
                                    invoked=t_invoke)
                self.last_progress_ns = self.history.now()

    def close(self) -> None:
        self.consumer.close()


class SparkProducerWorkload(Workload):
    JOB_TIMEOUT_S = 240.0

    def __init__(self, name: str, spec: WorkloadSpec, bootstrap: str, history: History, on_progress=None):
        super().__init__(name, history)
        self.spec = spec
        self.bootstrap = bootstrap
        self.process = name
        self.on_progress = on_progress
        self._offsets = None

    def work(self) -> None:
        import subprocess
        import sys
        w = self.spec
        if w.start_s and self.stopping.wait(w.start_s):
            return
        value = {"topic": w.topic, "rows": w.rows, "record_size": w.value_bytes, "exactly_once": w.exactly_once}
        self.history.record(INVOKE, self.process, "spark-produce", value)
        # local[2, 4]: two cores, a failed task tried up to 4 times (local[2] never retries one).
        cmd = [sys.executable, "-m", "kafkatier", "spark", "produce", "--bootstrap-server", self.bootstrap,
               "--topic", w.topic, "--rows", str(w.rows), "--record-size", str(w.value_bytes), "--no-progress",
               "--master", "local[2,4]", "--option", f"kafka.acks={'all' if w.acks == 'all' else w.acks}",
               "--option", "kafka.delivery.timeout.ms=120000"]
        if w.exactly_once:
            cmd += ["--option", "exactlyOnce=true", "--option", f"transactionalIdPrefix=scenario-{self.process}"]
        deadline = time.monotonic() + self.JOB_TIMEOUT_S
        kill_timer = None
        # A session of its own: on timeout the whole job (its JVM and Python workers too) is killed.
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True) as p:
            # While the job runs, report the topic's committed rows (sum of high watermarks) as progress, so a
            # schedule step can wait for the job to be writing (``when = { acked_at_least = N }``).
            while True:
                try:
                    out, err = p.communicate(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    if time.monotonic() > deadline:
                        import os
                        import signal
                        os.killpg(p.pid, signal.SIGKILL)
                        p.communicate()
                        self.history.record(INFO, self.process, "spark-produce", value, error="timeout")
                        return
                    written = self._report_progress(w.topic)
                    if written and w.kill_task_after_s and kill_timer is None:
                        # A timer of its own: the progress polls block for seconds while a broker is down.
                        kill_timer = threading.Timer(w.kill_task_after_s, self._kill_task_workers, (p.pid, written))
                        kill_timer.daemon = True
                        kill_timer.start()
        if p.returncode == 0:
            self.history.record(OK, self.process, "spark-produce", value, output=out.strip()[-200:])
        else:
            last = (err.strip().splitlines() or [f"exit {p.returncode}"])[-1]
            self.history.record(FAIL, self.process, "spark-produce", value, error=last[:300])

    def _kill_task_workers(self, pid: int, written: int) -> None:
        """SIGKILL every Python worker the job's PySpark daemons forked (the tasks' processes; not the
        daemons, not the planner workers of the driver): the running tasks fail and Spark retries them."""
        import os
        import signal
        procs = _process_tree(pid)
        daemons = {p for p, (_, cmd) in procs.items() if "pyspark.daemon" in cmd and "sql.worker" not in cmd}
        workers = [p for p, (parent, _) in procs.items() if parent in daemons]
        for w in workers:
            try:
                os.kill(w, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.history.record(INFO, self.process, "spark-kill-task", {"pids": workers, "log_records_seen": written})

    def _report_progress(self, topic: str) -> int:
        """The topic's records (sum of high watermarks, open transactions' records included), reported."""
        try:
            if self._offsets is None:
                self._offsets = Consumer(client_config(self.bootstrap) | {"group.id": "scenario-spark-progress"})
            md = self._offsets.list_topics(topic, timeout=2.0).topics[topic]
            total = sum(self._offsets.get_watermark_offsets(TopicPartition(topic, p), timeout=2.0, cached=False)[1]
                        for p in md.partitions)
        except KafkaException:
            return 0   # a broker being killed: try again next time
        if self.on_progress is not None:
            self.on_progress(total)
        return total

    def finish(self, timeout: float) -> int:
        """Wait for the job (it is not cut short by the end of the workload phase); 1 if still running."""
        self.join(timeout)
        if self._offsets is not None and not self.is_alive():
            self._offsets.close()
        return int(self.is_alive())


def _process_tree(root: int) -> dict[int, tuple[int, str]]:
    """``{pid: (parent pid, command line)}`` of ``root``'s descendants (Linux ``/proc``)."""
    import os
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        table[int(name)] = (parent, cmd)
    out, frontier = {}, {root}
    while frontier:
        frontier = {p for p, (parent, _) in table.items() if parent in frontier and p not in out}
        out.update({p: table[p] for p in frontier})
    return out


class AdminOperations:
    """The schedule's admin steps, recorded as process ``admin``."""

    def __init__(self, bootstrap: str, history: History):
        self.history = history
        self.admin = AdminClient(client_config(bootstrap))
        self.offsets = Consumer(client_config(bootstrap) | {"group.id": "scenario-admin", "enable.auto.commit": False})
        self._lock = threading.Lock()
        self.bootstrap = bootstrap
        self._kafkatier_admin = None

    def alter_config(self, topic: str, set_: dict[str, str], delete: tuple[str, ...], timeout_s: float = 30.0):
        """Returns the error name, or None."""
        value = {"topic": topic, "set": set_, "delete": list(delete)}
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in set_.items()]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete]
        self.history.record(INVOKE, "admin", "alter-config", value)
        try:
            futures = self.admin.incremental_alter_configs(
                [ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)],
                request_timeout=timeout_s)
            for f in futures.values():
                f.result(timeout=timeout_s)
        except KafkaException as e:
            err = e.args[0]
            name = error_name(err)
            # A broker's answer is definite; a local error (_TRANSPORT, _TIMED_OUT...) leaves it unknown whether
            # the change was made (the controller may have written it and died before answering).
            definite = not name.startswith("_") and hasattr(err, "retriable") and not err.retriable()
            self.history.record(FAIL if definite else INFO, "admin", "alter-config", value, error=name,
                                message=err.str() if hasattr(err, "str") else str(err))
            return name
        self.history.record(OK, "admin", "alter-config", value)
        return None

    def high_watermark(self, topic: str, partition: int) -> int:
        """The partition's high watermark (for ``offset = "hw-N"``), asked again (bounded) while the leader
        moves: NOT_LEADER_FOR_PARTITION from a broker that just lost the leadership is not the step's outcome."""
        def ask() -> int:
            with self._lock:
                return self.offsets.get_watermark_offsets(TopicPartition(topic, partition), timeout=5.0,
                                                          cached=False)[1]
        return Retrying(retry=retry_if_exception_type(KafkaException), stop=stop_after_delay(HW_LOOKUP_S),
                        wait=wait_exponential(multiplier=0.1, max=0.5), reraise=True)(ask)

    def delete_records(self, topic: str, partition: int, offset, timeout_ms: int):
        """``offset``: an int, -1 (the high watermark) or ``"hw-N"``.  Returns the error name, or None."""
        if isinstance(offset, str):
            offset = max(0, self.high_watermark(topic, partition) - int(offset[3:]))
        value = {"topic": topic, "partition": partition, "offset": offset}
        self.history.record(INVOKE, "admin", "delete-records", value)
        try:
            futures = self.admin.delete_records([TopicPartition(topic, partition, offset)],
                                                request_timeout=max(5.0, timeout_ms / 1000 + 5),
                                                operation_timeout=timeout_ms / 1000)
            result = next(iter(futures.values())).result(timeout=timeout_ms / 1000 + 10)
        except KafkaException as e:
            name = error_name(e.args[0])
            self.history.record(INFO, "admin", "delete-records", value, error=name)
            return name
        self.history.record(OK, "admin", "delete-records", value, low_watermark=result.low_watermark)
        return None

    def move_replica(self, topic: str, partition: int, broker: int, log_dir: str) -> str | None:
        """AlterReplicaLogDirs of one replica to ``log_dir`` of its broker.  Returns the error name, or None."""
        from kafka.errors import for_code

        from kafkatier.admin.client import AdminClient as KafkatierAdmin, AdminError
        value = {"topic": topic, "partition": partition, "broker": broker, "dir": log_dir}
        self.history.record(INVOKE, "admin", "move-replica", value)
        try:
            with self._lock:
                if self._kafkatier_admin is None:
                    self._kafkatier_admin = KafkatierAdmin(self.bootstrap.split(","), request_timeout_ms=10000)
                codes = self._kafkatier_admin.alter_replica_log_dirs({(topic, partition, broker): log_dir})
        except AdminError as e:
            self.history.record(INFO, "admin", "move-replica", value, error=e.name)
            return e.name
        except Exception as e:  # noqa: BLE001 - a connection error: whether the broker got it is unknown
            self.history.record(INFO, "admin", "move-replica", value, error=type(e).__name__)
            return type(e).__name__
        code = codes.get((topic, partition, broker), 0)
        if code:
            name = for_code(code).message
            self.history.record(FAIL, "admin", "move-replica", value, error=name)
            return name
        self.history.record(OK, "admin", "move-replica", value)
        return None

    def close(self) -> None:
        if self._kafkatier_admin is not None:
            self._kafkatier_admin.close()
        self.offsets.close()
