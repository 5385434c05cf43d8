"""ClusterManager: start, stop and restart a local cluster (embedded ZooKeeper + broker processes) described by
``<data-dir>/cluster.json``::

    {"zookeeper": "127.0.0.1:PORT", "bootstrap_servers": "127.0.0.1:P1,...", "zookeeper_pid": PID or null,
     "brokers": [{"id": 1, "port": P1, "pid": PID, "log_dirs": [...], "args": [...]}], ...}

Each broker's properties (``cluster up --override k=v``, JAAS passwords included) are in its own
``<data-dir>/broker-<id>/server.properties``, mode 0600 (``server/server_properties.py``); ``cluster.json`` and
the broker's command line (``broker start ... --config <file>``) hold only that file's path, so ``ps`` shows no
secret.  ``cluster describe`` shows the properties with PASSWORD-type values as ``[hidden]``.

Broker processes are started in their own session, so they outlive a ``--detach``-ed ``cluster up``; logs go
to ``<data-dir>/logs/broker-<id>.log`` and a metrics snapshot to ``<data-dir>/status/broker-<id>.json``.

A started broker counts as up once it is registered in ZooKeeper -- with a new ``/brokers/ids/<id>``, not the one
its killed predecessor left until that session expires (the broker waits for it, see
``kafkatier/zk/broker_registration.py``) -- and answers ApiVersions on its port.  Nobody picks a port for a
broker to bind later (another process could take it in between): a new broker listens on any free port, a
restarted one on its previous port unless it is taken, and each writes the port it got to
``<data-dir>/status/broker-<id>.port`` (with its pid), from which ``cluster.json`` learns it.  A process that exits
before that is reported with the last error line of its log (:class:`BrokerStartError`).  Several commands may start
brokers of one cluster at once: ``cluster.json`` is read, updated and written under ``cluster.json.lock``.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time

import attrs

from kafkatier.admin.bootstrap import BootstrapConfigError
from kafkatier.common.atomic_file import atomic_write
from kafkatier.logsetup import get_logger, kv
from kafkatier.server.config import loggable_configs
from kafkatier.server.metadata_cache import LINK_ENDPOINTS_CONFIG
from kafkatier.server.server_properties import SERVER_PROPERTIES, read_server_properties, write_server_properties
from kafkatier.waiting import wait_for
from kafkatier.zk.errors import NoNodeError
from kafkatier.cluster.embedded_zookeeper import pid_alive as _pid_alive

log = get_logger("cluster")

_CANNOT_ASK = object()  # a broker whose Metadata the manager cannot ask for (a SASL listener without its login)

CLUSTER_FILE = "cluster.json"

# What ``kafkatier cluster up`` and the demo set for every broker unless overridden (``--override k=v``):
# tiered storage is what the simulator is for, so the cluster-wide flag is on; topics still opt in with
# ``remote.storage.enable=true``.  The remote storage lives under the data dir (``remote-storage/``).
CLUSTER_UP_DEFAULTS = {"remote.log.storage.system.enable": "true"}


class BrokerStartError(RuntimeError):
    """A broker process exited during start-up; the message carries the last error line of its log."""


# A log line at ERROR or worse, or the last line of a Python traceback ("pkg.SomeError: message").
_ERROR_LINE = re.compile(r"^\S+ (ERROR|CRITICAL) |^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b")


def last_error_line(log_text: str) -> str | None:
    for line in reversed(log_text.splitlines()):
        if _ERROR_LINE.match(line):
            return line.strip()
    return None


def pid_alive(pid: int | None) -> bool:
    return bool(pid) and _pid_alive(pid)


def atomic_write_json(path: str, obj) -> None:
    atomic_write(path, (json.dumps(obj, indent=2) + "\n").encode())


@attrs.define
class BrokerSpec:
    id: int
    port: int
    log_dirs: list[str]
    pid: int | None = None
    args: list[str] = attrs.field(factory=list)


class ClusterManager:
    def __init__(self, data_dir: str):
        self.data_dir = os.path.abspath(data_dir)
        self.state: dict = {}
        self._procs: dict[int, subprocess.Popen] = {}
        self._previous_registration: dict[int, int | None] = {}  # broker id -> czxid before we started it
        self._log_start: dict[int, int] = {}  # broker id -> size of its log when we started it
        self._awaiting_port: dict[int, int] = {}  # broker id -> pid started here that has not published its port

    @property
    def cluster_file(self) -> str:
        return os.path.join(self.data_dir, CLUSTER_FILE)

    # --- state ----------------------------------------------------------------------------------------------
    def load(self) -> dict:
        from kafkatier.common.errors import UsageError
        try:
            with open(self.cluster_file) as f:
                self.state = json.load(f)
        except FileNotFoundError:
            raise UsageError(f"no cluster at {self.data_dir} ({CLUSTER_FILE} not found)") from None
        except (json.JSONDecodeError, OSError) as e:
            raise UsageError(f"cannot read {self.cluster_file}: {e}") from None
        if not isinstance(self.state, dict) or "brokers" not in self.state or "zookeeper" not in self.state:
            raise UsageError(f"{self.cluster_file} is not a kafkatier cluster file")
        return self.state

    def save(self) -> None:
        atomic_write_json(self.cluster_file, self.state)

    @property
    def zookeeper(self) -> str:
        return self.state["zookeeper"]

    @property
    def bootstrap_servers(self) -> str:
        return self.state["bootstrap_servers"]

    def broker(self, broker_id: int) -> dict:
        for b in self.state["brokers"]:
            if b["id"] == broker_id:
                return b
        from kafkatier.common.errors import UsageError
        raise UsageError(f"broker {broker_id} is not part of the cluster in {self.data_dir}")

    # --- up / down ------------------------------------------------------------------------------------------
    def up(self, brokers: int = 3, log_dirs_per_broker: int = 2, zookeeper: str | None = None,
           session_timeout_ms: int = 6000, overrides: dict | None = None, timeout: float = 90.0,
           first_broker_id: int = 1, links: bool = False, client_groups=(), zookeeper_sasl: bool = False,
           tls: bool = False, sasl_ssl: bool = False, zookeeper_tls: bool = False,
           racks: dict[int, str] | None = None) -> dict:
        """``zookeeper_sasl``: the embedded ZooKeeper requires SASL, the brokers log in with a generated password
        (``zookeeper-jaas.conf``, mode 0600) and set Kafka's ZooKeeper ACLs.  ``zookeeper_tls``: the embedded
        ZooKeeper serves TLS only (mTLS, certificates from the cluster's test CA); the brokers connect with Kafka's
        ``zookeeper.ssl.*``, the tools with ``KAFKATIER_ZK_TLS_CONFIG=DIR/zookeeper-tls.properties``.  ``racks``:
        ``broker.rack`` per broker id (``cluster up --rack 1=a,2=b,3=c``)."""
        from kafkatier.common.errors import UsageError
        unknown = sorted(set(racks or {}) - set(range(first_broker_id, first_broker_id + brokers)))
        if unknown:
            raise UsageError(f"--rack names broker {unknown[0]}, which this cluster does not have (ids "
                             f"{first_broker_id}-{first_broker_id + brokers - 1})")
        if zookeeper_sasl and zookeeper is not None:
            raise UsageError("--zookeeper-sasl starts the embedded ZooKeeper: with --zookeeper, give the brokers "
                             "zookeeper.set.acl=true and java.security.auth.login.config instead")
        if zookeeper_tls and zookeeper is not None:
            raise UsageError("--zookeeper-tls starts the embedded ZooKeeper: with --zookeeper, give the brokers "
                             "zookeeper.ssl.client.enable=true and zookeeper.ssl.* instead")
        if tls and (links or client_groups):
            raise UsageError("--tls cannot be combined with --links or --client-group: the link process relays the "
                             "PLAINTEXT listeners only, so TLS traffic would bypass every link fault")
        if zookeeper_tls and links:
            raise UsageError("--zookeeper-tls cannot be combined with --links: the link process relays plain TCP "
                             "to ZooKeeper and cannot fault a TLS session it cannot read")
        os.makedirs(os.path.join(self.data_dir, "logs"), exist_ok=True)
        os.makedirs(os.path.join(self.data_dir, "status"), exist_ok=True)
        remote = os.path.join(self.data_dir, "remote-storage")
        os.makedirs(remote, exist_ok=True)
        zk_pid = None
        if zookeeper is None:
            from kafkatier.cluster.embedded_zookeeper import EmbeddedZooKeeper
            jaas = self._write_zookeeper_jaas() if zookeeper_sasl else None
            if jaas:
                overrides = {**(overrides or {}), "zookeeper.set.acl": "true",
                             "java.security.auth.login.config": jaas}
            zk_tls = None
            if zookeeper_tls:
                zk_tls, tls_props = self._zookeeper_tls()
                overrides = {**tls_props, **(overrides or {})}
            zk = EmbeddedZooKeeper(data_dir=os.path.join(self.data_dir, "zookeeper"), port=0, sasl_jaas_config=jaas,
                                   tls=zk_tls)
            zk.start_detached()
            zookeeper, zk_pid = zk.connect_string, zk.pid
            log.info("embedded ZooKeeper started %s", kv(connect=zookeeper, pid=zk_pid))
        try:
            specs = []
            for i in range(brokers):
                bid = first_broker_id + i
                dirs = [os.path.join(self.data_dir, f"broker-{bid}", f"logdir-{j}")
                        for j in range(log_dirs_per_broker)]
                port = 0  # the broker binds any free port and publishes it (``_learn_ports``)
                args = ["--id", str(bid), "--zookeeper", zookeeper, "--log-dirs", ",".join(dirs),
                        "--remote-storage-dir", remote, "--session-timeout-ms", str(session_timeout_ms),
                        "--status-file", os.path.join(self.data_dir, "status", f"broker-{bid}.json")]
                properties = os.path.join(self.data_dir, f"broker-{bid}", SERVER_PROPERTIES)
                props = dict(overrides or {})
                if racks and bid in racks:
                    props["broker.rack"] = racks[bid]
                write_server_properties(properties, props, comment=f"broker {bid}, by kafkatier cluster up")
                args += ["--config", properties]
                specs.append(BrokerSpec(bid, port, dirs, None, args))
            self.state = {
                "zookeeper": zookeeper,
                "bootstrap_servers": "",   # once the brokers published their ports
                "brokers": [attrs.asdict(s) for s in specs],
                "zookeeper_pid": zk_pid,
                "remote_storage_dir": remote,
                "data_dir": self.data_dir,
                "zookeeper_jaas": overrides.get("java.security.auth.login.config") if overrides else None,
                "zookeeper_tls_config": (os.path.join(self.data_dir, "zookeeper-tls.properties") if zookeeper_tls
                                         else None),
            }
        except BaseException:
            # Interrupted before the state that ``down`` reads exists: the ZooKeeper just started would be left
            # running in its own session.
            if zk_pid:
                from kafkatier.cluster.embedded_zookeeper import stop_pid
                stop_pid(zk_pid)
            raise
        if tls:
            self._wire_tls(specs, overrides or {}, sasl_ssl)
        if links or client_groups:
            self._wire_links(specs, zookeeper, overrides or {}, client_groups)
        self.save()
        for s in specs:
            self.start_broker(s.id, wait=False)
        self.wait_until_ready(timeout=timeout)
        return self.state

    def start_broker(self, broker_id: int, wait: bool = True, timeout: float = 60.0,
                     extra_env: dict[str, str] | None = None) -> int:
        """Start one broker with its original settings (``extra_env``: more environment, e.g. a test's crash
        point).  With ``wait``, return once it is registered (a new ``/brokers/ids/{id}``, after the previous
        incarnation's has expired) and answers ApiVersions on its port; :class:`BrokerStartError` if the process
        exits first, ``WaitTimeout`` if that takes over ``timeout`` s.

        Several ``kafkatier cluster start-broker`` commands may run at once: the pid is recorded in
        ``cluster.json`` under a file lock."""
        with self._state_lock():
            if os.path.exists(self.cluster_file):
                self.load()  # another command may have started a broker since we read it
            b = self.broker(broker_id)
            if pid_alive(b.get("pid")):
                from kafkatier.common.errors import UsageError
                raise UsageError(f"broker {broker_id} is already running (pid {b['pid']})")
            for d in b["log_dirs"]:
                if not os.path.lexists(d):  # a dir failed on purpose (a file in its place) stays failed
                    os.makedirs(d)
            self._previous_registration[broker_id] = self._registration_czxid(broker_id)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._port_path(broker_id))   # the previous incarnation's
            logf = open(self._log_path(broker_id), "ab")
            self._log_start[broker_id] = logf.tell()
            env = dict(os.environ, KAFKATIER_PROCESS=f"broker-{broker_id}", PYTHONUNBUFFERED="1", **(extra_env or {}))
            proc = subprocess.Popen([sys.executable, "-m", "kafkatier", "broker", "start", *self._start_args(b)],
                                    stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, env=env)
            logf.close()
            self._procs[broker_id] = proc
            self._awaiting_port[broker_id] = proc.pid
            b["pid"] = proc.pid
            self.save()
        log.info("broker started %s", kv(id=broker_id, pid=proc.pid, port=b["port"]))
        if wait:
            self.wait_for_brokers([broker_id], timeout=timeout)
            self.wait_for_metadata(broker_id, timeout=timeout)
        return proc.pid

    def _start_args(self, b: dict) -> list[str]:
        """The broker's command line: its settings, and the port to listen on -- any free one the first time, then
        the one it had (users reconnect to it) unless another process took it meanwhile.  Nothing picks a port
        for a broker to bind later: another process could take it in between."""
        args, kept = list(b["args"]), []
        while args:
            a = args.pop(0)
            if a in ("--port", "--port-file") and args:    # a cluster.json written before ports were published
                args.pop(0)
            elif a != "--any-port-if-taken":
                kept.append(a)
        port = int(b.get("port") or 0)
        return [*kept, "--port", str(port), *(["--any-port-if-taken"] if port else []),
                "--port-file", self._port_path(b["id"])]

    def _port_path(self, broker_id: int) -> str:
        return os.path.join(self.data_dir, "status", f"broker-{broker_id}.port")

    def _learn_ports(self) -> None:
        """Record in ``cluster.json`` the port each broker started here published (its port file, written by that
        very process once it listens)."""
        learned = {}
        for i, pid in list(self._awaiting_port.items()):
            try:
                with open(self._port_path(i)) as f:
                    published = json.load(f)
            except (OSError, ValueError):
                continue
            if isinstance(published, dict) and published.get("pid") == pid and isinstance(published.get("port"), int):
                learned[i] = (published["port"], published.get("listeners") or {})
        if not learned:
            return
        with self._state_lock():
            if os.path.exists(self.cluster_file):
                self.load()
            for i, (port, listener_ports) in learned.items():
                b = self.broker(i)
                b["listener_ports"] = listener_ports
                if b["port"] and b["port"] != port:
                    log.warning("broker restarted on another port (its previous one was taken) %s",
                                kv(id=i, port=port, previous=b["port"]))
                b["port"] = port
                del self._awaiting_port[i]
            self.state["bootstrap_servers"] = ",".join(
                f"127.0.0.1:{b['port']}" for b in self.state["brokers"] if b.get("port"))
            tls = self.state.get("tls")
            for key, listener in (("bootstrap_servers", "SSL"), ("sasl_ssl_bootstrap_servers", "SASL_SSL")):
                if tls is not None and key in tls:   # the TLS listeners' ports, published by the brokers
                    tls[key] = ",".join(f"127.0.0.1:{b['listener_ports'][listener]}" for b in self.state["brokers"]
                                        if (b.get("listener_ports") or {}).get(listener))
            self.save()

    def wait_for_ports(self, ids, timeout: float = 60.0) -> None:
        """Until each broker started here has published the port it listens on (``cluster.json`` updated)."""
        def known() -> bool:
            self._check_processes(ids)
            self._learn_ports()
            return not set(self._awaiting_port) & {int(i) for i in ids}
        wait_for(known, timeout, interval=0.05, message=f"brokers {sorted(ids)} to publish their ports")

    @contextlib.contextmanager
    def _state_lock(self):
        os.makedirs(self.data_dir, exist_ok=True)
        with open(f"{self.cluster_file}.lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _zk(self):
        from kafkatier.zk.client import start_client
        from kafkatier.zk.security import read_properties, zk_security
        jaas = self.state.get("zookeeper_jaas") if self.state else None
        tls_config = self.state.get("zookeeper_tls_config") if self.state else None
        config = {**({"java.security.auth.login.config": jaas, "zookeeper.set.acl": "true"} if jaas else {}),
                  **(read_properties(tls_config, "the ZooKeeper TLS config") if tls_config else {})}
        security = zk_security(config) if config else None
        return start_client(self.zookeeper, timeout=10.0, connect_timeout=30.0, security=security)

    def _tls_ca(self) -> tuple[str, str]:
        """The cluster's test CA (``DIR/tls``), made once for the listeners and ZooKeeper: (dir, ca.pem)."""
        from kafkatier.cluster.certificates import make_ca
        tls_dir = os.path.join(self.data_dir, "tls")
        ca = os.path.join(tls_dir, "ca.pem")
        if not os.path.exists(ca):
            make_ca(tls_dir)
        return tls_dir, ca

    def _zookeeper_tls(self):
        """``--zookeeper-tls``: the embedded server's certificate (``CN=zookeeper``), a client certificate for the
        brokers and tools (``CN=zookeeper-client``), the brokers' ``zookeeper.ssl.*`` and the tools' config file
        ``DIR/zookeeper-tls.properties`` (Kafka's ``--zk-tls-config-file``)."""
        from pathlib import Path
        from kafkatier.cluster.certificates import make_cert
        from kafkatier.cluster.embedded_zookeeper import ZooKeeperTls
        tls_dir, ca = self._tls_ca()
        server = make_cert(tls_dir, "zookeeper", "CN=zookeeper")
        client = make_cert(tls_dir, "zookeeper-client", "CN=zookeeper-client", hosts=None)
        props = {"zookeeper.ssl.client.enable": "true",
                 "zookeeper.clientCnxnSocket": "org.apache.zookeeper.ClientCnxnSocketNetty",
                 "zookeeper.ssl.keystore.type": "PEM", "zookeeper.ssl.keystore.location": str(client.keystore),
                 "zookeeper.ssl.truststore.type": "PEM", "zookeeper.ssl.truststore.location": ca}
        write_server_properties(os.path.join(self.data_dir, "zookeeper-tls.properties"), props,
                                comment="TLS to ZooKeeper for tools: KAFKATIER_ZK_TLS_CONFIG=<this file> "
                                        "(kafkatier cluster up --zookeeper-tls)")
        return ZooKeeperTls(Path(server.keystore), Path(ca)), props

    def _write_zookeeper_jaas(self) -> str:
        """A JAAS file (mode 0600) for the embedded ZooKeeper's one user, ``kafka``, with a random password."""
        import secrets
        from kafkatier.zk.security import server_jaas
        path = os.path.join(self.data_dir, "zookeeper-jaas.conf")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(server_jaas({"kafka": secrets.token_urlsafe(24)}))
        os.chmod(path, 0o600)
        return os.path.abspath(path)

    def _registration_czxid(self, broker_id: int) -> int | None:
        """The czxid of the broker's current registration, if any: a restarted broker is registered once the
        node has another one (the old node may live on until its session expires)."""
        zk = self._zk()
        try:
            stat = zk.exists(f"/brokers/ids/{broker_id}")
            return stat.czxid if stat is not None else None
        finally:
            zk.stop()
            zk.close()

    def wait_for_brokers(self, ids, timeout: float = 60.0, need_controller: bool = False) -> None:
        """Until each broker (1) is registered by the process this manager started (not a stale node of its
        previous incarnation) and (2) answers ApiVersions on its port; with ``need_controller`` also until a
        controller is elected.  A broker process that exits meanwhile raises :class:`BrokerStartError`."""
        zk = self._zk()
        pending = {int(i) for i in ids}
        try:
            def ready():
                self._check_processes(ids)
                self._learn_ports()
                for i in sorted(pending):
                    if i in self._awaiting_port:
                        continue
                    stat = zk.exists(f"/brokers/ids/{i}")
                    if stat is None or stat.czxid == self._previous_registration.get(i):
                        continue
                    if self._answers_api_versions(self.broker(i)["port"]):
                        pending.discard(i)
                return not pending and (not need_controller or zk.exists("/controller") is not None)
            wait_for(ready, timeout, interval=0.1,
                     message=f"brokers {sorted(ids)} to register in ZooKeeper and answer ApiVersions"
                             + (" and a controller" if need_controller else ""))
        finally:
            zk.stop()
            zk.close()

    @staticmethod
    def _answers_api_versions(port: int) -> bool:
        from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

        from kafkatier.server.broker_client import BrokerClient, BrokerConnectionError
        client = BrokerClient("127.0.0.1", port, client_id="kafkatier-cluster", timeout_s=5.0)
        try:
            resp = client.send(ApiVersionsRequest[2](), ApiVersionsResponse, 2)
        except (BrokerConnectionError, OSError):
            return False
        finally:
            client.close()
        return resp.error_code == 0

    def _check_processes(self, ids) -> None:
        for i in ids:
            p = self._procs.get(i)
            if p is not None and p.poll() is not None:
                line = last_error_line(self._log_since_start(i)) or "no error line in its log"
                raise BrokerStartError(f"broker {i} exited with status {p.returncode} during start-up: {line} "
                                       f"(log: {self._log_path(i)})")

    def _log_path(self, broker_id: int) -> str:
        return os.path.join(self.data_dir, "logs", f"broker-{broker_id}.log")

    def _log_since_start(self, broker_id: int) -> str:
        try:
            with open(self._log_path(broker_id), "rb") as f:
                f.seek(self._log_start.get(broker_id, 0))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self, broker_id: int, lines: int = 20) -> str:
        try:
            with open(self._log_path(broker_id), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def wait_until_ready(self, timeout: float = 90.0) -> None:
        """Every broker registered, a controller elected, and every broker's Metadata answer lists all brokers
        and the controller (so a client bootstrapping from any of them sees the whole cluster)."""
        ids = [b["id"] for b in self.state["brokers"]]
        self.wait_for_brokers(ids, timeout=timeout, need_controller=True)
        wait_for(lambda: all(self._metadata_complete(b, ids) for b in self.state["brokers"]), timeout,
                 interval=0.1, message="every broker to know the whole cluster")

    def wait_for_metadata(self, broker_id: int, timeout: float = 60.0) -> None:
        """Until the broker's Metadata answer lists every registered broker and the current controller: a broker
        just restarted answers before the controller's UpdateMetadata reached it, and a client bootstrapping from
        it would be told of no brokers but itself (kafka-python's admin then raises UnknownBrokerIdError for the
        controller another broker names).  Without a controller nobody would tell it: no wait."""
        zk = self._zk()
        try:
            def knows() -> bool:
                self._check_processes([broker_id])
                try:
                    controller = json.loads(zk.get("/controller")[0])["brokerid"]
                except (NoNodeError, ValueError, KeyError, TypeError):
                    return True
                resp = self._metadata(self.broker(broker_id))
                if resp is _CANNOT_ASK:
                    return True
                if resp is None:
                    return False
                # this cluster's brokers only: a foreign or malformed /brokers/ids/99 is never in any answer
                ours = {b["id"] for b in self.state.get("brokers", [])}
                registered = {int(i) for i in zk.get_children("/brokers/ids") if i.isdigit()} & ours
                nodes = {b.node_id for b in resp.brokers}
                return resp.controller_id == controller and registered | {controller, broker_id} <= nodes
            wait_for(knows, timeout, interval=0.1,
                     message=f"broker {broker_id} to learn the cluster's brokers and controller")
        finally:
            zk.stop()
            zk.close()

    @staticmethod
    def _overrides(broker: dict) -> dict[str, str]:
        """The broker's properties as it reads them: its ``--config`` file, then ``--override`` arguments on top
        (an unreadable file counts as empty: the broker itself reports it)."""
        args = broker.get("args", [])
        props: dict[str, str] = {}
        for flag, a in zip(args, args[1:]):
            if flag == "--config":
                try:
                    props.update(read_server_properties(a))
                except BootstrapConfigError:
                    pass
        props.update(a.split("=", 1) for flag, a in zip(args, args[1:]) if flag == "--override" and "=" in a)
        return props

    @staticmethod
    def config_file(broker: dict) -> str | None:
        args = broker.get("args", [])
        return next((a for flag, a in zip(args, args[1:]) if flag == "--config"), None)

    @classmethod
    def _metadata_complete(cls, broker: dict, ids: list[int]) -> bool:
        """The broker's Metadata answer lists every broker in ``ids`` and a controller among them."""
        resp = cls._metadata(broker)
        if resp is _CANNOT_ASK:
            return True
        return resp is not None and sorted(b.node_id for b in resp.brokers) == sorted(ids) \
            and resp.controller_id in ids

    @classmethod
    def _metadata(cls, broker: dict):
        """The broker's Metadata answer (no topics); None if it does not answer.  On a SASL listener the probe
        logs in as the brokers do (the inter-broker credentials of the JAAS config); without such credentials,
        or when that login is refused, it cannot ask: ``_CANNOT_ASK``."""
        from kafka.protocol.metadata import MetadataRequest, MetadataResponse

        from kafkatier.server.broker_client import BrokerAuthenticationError, BrokerClient, BrokerConnectionError
        from kafkatier.server.sasl import inter_broker_login, sasl_enabled
        overrides = cls._overrides(broker)
        login = inter_broker_login(overrides) if sasl_enabled(overrides) else None
        if sasl_enabled(overrides) and login is None:
            return _CANNOT_ASK
        client = BrokerClient("127.0.0.1", broker["port"], client_id="kafkatier-cluster", timeout_s=5.0,
                              login=login)
        try:
            return client.send(MetadataRequest[1](topics=[]), MetadataResponse, 1)
        except BrokerAuthenticationError as e:
            log.warning("cannot check the broker's metadata: its own login is refused %s",
                        kv(broker=broker["id"], error=str(e)))
            return _CANNOT_ASK
        except (BrokerConnectionError, OSError):
            return None
        finally:
            client.close()

    def stop_broker(self, broker_id: int, kill: bool = False, timeout: float = 30.0) -> None:
        b = self.broker(broker_id)
        pid = b.get("pid")
        if not pid_alive(pid):
            return
        with contextlib.suppress(ProcessLookupError):   # it exited since
            os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
        proc = self._procs.pop(broker_id, None)
        try:
            wait_for(lambda: (proc.poll() is not None) if proc else not pid_alive(pid), timeout,
                     message=f"broker {broker_id} to stop")
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):   # it exited just now
                os.kill(pid, signal.SIGKILL)
            wait_for(lambda: (proc.poll() is not None) if proc else not pid_alive(pid), 10,
                     message=f"broker {broker_id} to die")
        log.info("broker stopped %s", kv(id=broker_id, pid=pid, signal="KILL" if kill else "TERM"))

    def kill_broker(self, broker_id: int) -> None:
        self.stop_broker(broker_id, kill=True)

    # --- links (cluster/links.py): every broker -> broker and broker -> ZooKeeper path through the link process --
    @property
    def links(self):
        from kafkatier.cluster.link_manager import LinkManager
        return LinkManager(self.data_dir, partition_replicas=self.partition_replicas)

    def _wire_links(self, specs: list[BrokerSpec], zookeeper: str, overrides: dict, client_groups=()) -> None:
        """Create the links of a new cluster, start the link process, and point each broker at its own links:
        ``--zookeeper`` becomes its links to each ZooKeeper server (chroot kept), and
        ``kafkatier.links.broker.endpoints`` (in its server.properties) maps every other broker to its link.

        Each client group ``g`` gets a listener ``G`` on every broker (``listeners``), advertised at the group's
        link to that broker (``advertised.listeners``): a client bootstrapping from the group's links is
        answered with link addresses only, so all its traffic goes through them."""
        from kafkatier.cluster.link_faults import (Link, broker_node, check_client_group, client_node,
                                                   linked_zookeeper_connect, port_file_upstream, zookeeper_node,
                                                   zookeeper_servers)
        zk_servers, _ = zookeeper_servers(zookeeper)
        groups = [check_client_group(g) for g in dict.fromkeys(client_groups)]
        links = []
        # A link to a broker reads the broker's port from the file the broker publishes once it listens
        # (its port, and each client group's listener), so no port is chosen for a broker before it binds it.
        for s in specs:
            links += [Link(broker_node(s.id), broker_node(o.id), port_file_upstream(self._port_path(o.id)))
                      for o in specs if o.id != s.id]
            links += [Link(broker_node(s.id), zookeeper_node(n), hp) for n, hp in enumerate(zk_servers, start=1)]
        for g in groups:
            links += [Link(client_node(g), broker_node(s.id), port_file_upstream(self._port_path(s.id), g.upper()))
                      for s in specs]
        lm = self.links
        lm.create(links)
        table = lm.start()
        for s in specs:
            s.args[s.args.index("--zookeeper") + 1] = linked_zookeeper_connect(table, s.id, zookeeper)
            endpoints = ",".join(f"{o.id}:{table.link(f'{broker_node(s.id)}->{broker_node(o.id)}').address}"
                                 for o in specs if o.id != s.id)
            props = {**overrides, LINK_ENDPOINTS_CONFIG: endpoints}
            if groups:
                props["listeners"] = ",".join([f"PLAINTEXT://127.0.0.1:{s.port}"] + [
                    f"{g.upper()}://127.0.0.1:0" for g in groups])   # bound by the broker, published in its port file
                props["advertised.listeners"] = ",".join(
                    f"{g.upper()}://{table.link(f'{client_node(g)}->{broker_node(s.id)}').address}" for g in groups)
                props["listener.security.protocol.map"] = ",".join(
                    ["PLAINTEXT:PLAINTEXT"] + [f"{g.upper()}:PLAINTEXT" for g in groups])
            write_server_properties(os.path.join(self.data_dir, f"broker-{s.id}", SERVER_PROPERTIES), props,
                                    comment=f"broker {s.id}, by kafkatier cluster up --links")
        self.state["links"] = {"enabled": True, "state_file": lm.state.path}
        self.state["client_groups"] = {
            g: ",".join(table.link(f"{client_node(g)}->{broker_node(s.id)}").address for s in specs) for g in groups}
        self.state["brokers"] = [attrs.asdict(s) for s in specs]
        log.info("links wired %s", kv(links=len(links), pid=table.pid))

    def _wire_tls(self, specs, overrides: dict, sasl_ssl: bool = False) -> None:
        """Give every broker an ``SSL`` listener (``cluster up --tls``): a test CA and certificates in ``DIR/tls``
        (``kafkatier/testing/tls.py``: one per broker, ``CN=broker-N``, and one client ``CN=client``), the
        broker's ``listeners`` / ``listener.security.protocol.map`` / ``ssl.*`` in its server.properties
        (``ssl.client.auth=requested``: TLS with or without a client certificate; the user's overrides win), and
        ``DIR/client-ssl.properties``, a client config in Kafka's names for ``--command-config`` and Kafka's tools.
        ``sasl_ssl``: a ``SASL_SSL`` listener too (SASL settings from the overrides, as for SASL_PLAINTEXT)."""
        from kafkatier.cluster.certificates import make_cert
        tls_dir, ca = self._tls_ca()
        client = make_cert(tls_dir, "client", "CN=client", hosts=None)
        for s in specs:
            cert = make_cert(tls_dir, f"broker-{s.id}", f"CN=broker-{s.id}")
            # port 0: each listener is bound by the broker and published in its port file (``_learn_ports``)
            listeners = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0" + (",SASL_SSL://127.0.0.1:0" if sasl_ssl else "")
            props = {"listeners": listeners,
                     "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL",
                     "ssl.keystore.type": "PEM", "ssl.keystore.location": str(cert.keystore),
                     "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca),
                     "ssl.client.auth": "requested", **overrides}
            write_server_properties(os.path.join(self.data_dir, f"broker-{s.id}", SERVER_PROPERTIES), props,
                                    comment=f"broker {s.id}, by kafkatier cluster up --tls")
        client_config = os.path.join(self.data_dir, "client-ssl.properties")
        write_server_properties(client_config, {
            "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca),
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(client.keystore)},
            comment="client settings for the SSL listeners (kafkatier cluster up --tls); principal User:CN=client")
        self.state["tls"] = {"bootstrap_servers": "",   # once the brokers published their SSL ports
                             "client_config": client_config, "ca": str(ca),
                             "client_certificate": str(client.certificate), "client_key": str(client.key)}
        if sasl_ssl:
            self.state["tls"]["sasl_ssl_bootstrap_servers"] = ""
        log.info("TLS listeners wired %s", kv(brokers=len(specs), tls_dir=tls_dir))

    def client_bootstrap(self, group: str) -> str:
        """The bootstrap servers of a client group: its links to every broker."""
        groups = self.state.get("client_groups") or {}
        if group not in groups:
            from kafkatier.common.errors import UsageError
            known = ", ".join(groups) or "none; cluster up --client-group"
            raise UsageError(f"no client group {group!r} (groups: {known})")
        return groups[group]

    def partition_replicas(self, topic: str, partition: int) -> tuple[int, list[int]]:
        """(leader, replicas) of a partition as ZooKeeper has them, for the ``isolate-leader`` shape."""
        from kafkatier.cluster.link_faults import LinkFaultError
        from kafkatier.common.structs import TopicPartition
        from kafkatier.zk.kafka_zk_client import KafkaZkClient
        zk = self._zk()
        try:
            kzk = KafkaZkClient(zk)
            tp = TopicPartition(topic, partition)
            state = kzk.get_partition_states([tp]).get(tp)
            assignment = kzk.get_topic_assignments([topic]).get(topic)
        finally:
            zk.stop()
            zk.close()
        if state is None or assignment is None or partition not in assignment.partitions:
            raise LinkFaultError(f"unknown partition {topic}-{partition}")
        if state.leader < 0:
            raise LinkFaultError(f"{topic}-{partition} has no leader")
        return state.leader, list(assignment.partitions[partition])

    def down(self, timeout: float = 30.0) -> None:
        for b in self.state.get("brokers", []):
            pid = b.get("pid")
            if pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):   # it exited since
                    os.kill(pid, signal.SIGINT)  # the whole cluster stops: no controlled shutdown (nowhere to move)
        deadline = time.monotonic() + timeout
        for b in self.state.get("brokers", []):
            pid = b.get("pid")
            proc = self._procs.pop(b["id"], None)
            try:
                wait_for(lambda: (proc.poll() is not None) if proc else not pid_alive(pid),
                         max(0.1, deadline - time.monotonic()), message=f"broker {b['id']} to stop")
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):   # it exited just now
                    os.kill(pid, signal.SIGKILL)
        if self.state.get("links"):
            self.links.stop()
        zk_pid = self.state.get("zookeeper_pid")
        if zk_pid:
            from kafkatier.cluster.embedded_zookeeper import stop_pid
            stop_pid(zk_pid)
            log.info("embedded ZooKeeper stopped %s", kv(pid=zk_pid))
        for b in self.state.get("brokers", []):
            b["pid"] = None
        self.state["zookeeper_pid"] = None
        if os.path.exists(self.cluster_file):
            self.save()

    # --- log dir failures (KIP-112 / KIP-113 testing) --------------------------------------------------------
    FAILED_SUFFIX = ".failed"

    def _broker_log_dir(self, broker_id: int, log_dir: str) -> str:
        b = self.broker(broker_id)
        wanted = os.path.abspath(log_dir)
        for d in b["log_dirs"]:
            if os.path.abspath(d) == wanted:
                return wanted
        from kafkatier.common.errors import UsageError
        raise UsageError(f"{log_dir} is not a log dir of broker {broker_id} (its log dirs: {', '.join(b['log_dirs'])})")

    def fail_log_dir(self, broker_id: int, log_dir: str) -> str:
        """Make a log dir fail the way a dead disk does: its contents move to ``<dir>.failed`` (kept, nothing is
        lost) and a file takes its place, so the broker's next I/O there (or its periodic health check, within
        a second) fails and takes the dir offline.  Returns where the data went."""
        d = self._broker_log_dir(broker_id, log_dir)
        if os.path.isfile(d):
            from kafkatier.common.errors import UsageError
            raise UsageError(f"log dir {d} of broker {broker_id} has already failed")
        aside = d + self.FAILED_SUFFIX
        if os.path.lexists(aside):
            from kafkatier.common.errors import UsageError
            raise UsageError(f"{aside} exists; restore or remove it first")
        os.rename(d, aside)
        with open(d, "w") as f:
            f.write(f"log dir failed on purpose by kafkatier; data in {aside}\n")
        log.info("log dir failed on purpose %s", kv(broker=broker_id, dir=d, data=aside))
        return aside

    def restore_log_dir(self, broker_id: int, log_dir: str) -> None:
        """Undo :meth:`fail_log_dir` on disk; the broker uses the dir again after its next restart (as Kafka)."""
        d = self._broker_log_dir(broker_id, log_dir)
        aside = d + self.FAILED_SUFFIX
        if not os.path.isdir(aside):
            from kafkatier.common.errors import UsageError
            raise UsageError(f"log dir {d} of broker {broker_id} was not failed by kafkatier ({aside} not found)")
        if os.path.isfile(d):
            os.unlink(d)
        os.rename(aside, d)
        log.info("log dir restored %s", kv(broker=broker_id, dir=d))

    def status(self) -> dict:
        out = {"zookeeper": self.zookeeper, "bootstrap_servers": self.bootstrap_servers, "brokers": []}
        for b in self.state["brokers"]:
            entry = {"id": b["id"], "port": b["port"], "pid": b.get("pid"), "alive": pid_alive(b.get("pid")),
                     "config_file": self.config_file(b), "properties": loggable_configs(self._overrides(b))}
            try:
                with open(os.path.join(self.data_dir, "status", f"broker-{b['id']}.json")) as f:
                    entry["status"] = json.load(f)
            except (OSError, json.JSONDecodeError):
                entry["status"] = None
            out["brokers"].append(entry)
        if self.state.get("links"):
            out["links"] = self.links.describe()
            out["client_groups"] = self.state.get("client_groups") or {}
        if self.state.get("tls"):
            out["tls"] = self.state["tls"]
        return out
