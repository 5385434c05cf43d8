"""A single-node ZooKeeper run from the jars that ship inside the ``pyspark`` wheel.

``EmbeddedZooKeeper`` writes ``zoo.cfg`` and a log4j2 configuration into its data directory, launches
``org.apache.zookeeper.server.ZooKeeperServerMain`` in its own process group and waits until the server answers
the ``srvr`` four-letter word with a ``Mode:`` line.  Layout of the data directory::

    <data_dir>/zoo.cfg          generated configuration
    <data_dir>/log4j2.xml       server logging configuration
    <data_dir>/zookeeper.log    server log (rolled at 50 MB, 3 kept)
    <data_dir>/zookeeper.out    JVM stdout/stderr (start-up failures land here)
    <data_dir>/zookeeper.pid    pid of the running java process
    <data_dir>/data/            ZooKeeper snapshots and transaction logs
"""
from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from contextlib import contextmanager
from importlib.util import find_spec
from pathlib import Path
from typing import Callable, Iterator, Sequence
from xml.sax.saxutils import quoteattr

import attrs
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt

from kafkatier.common.atomic_file import atomic_write
from kafkatier.logsetup import get_logger, kv
from kafkatier.waiting import poll_until

log = get_logger("zookeeper")

SERVER_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
CLI_MAIN = "org.apache.zookeeper.ZooKeeperMain"

# tickTime bounds the session timeouts a server grants: by default [2 * tick, 20 * tick].  500 ms lets
# failover tests ask for 1 s .. 60 s sessions (we set both bounds explicitly, see ``ZooKeeperSettings``).
DEFAULT_TICK_MS = 500
DEFAULT_HOST = "127.0.0.1"
JARS_ENV = "KAFKATIER_ZOOKEEPER_JARS"

# Small, quick-starting JVM: ZooKeeper for a simulator holds a few thousand znodes at most.
DEFAULT_JVM_OPTS = (
    "-Xms32m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
)

# (glob, required) -- the jars ZooKeeper's server and CLI need, out of pyspark's ~280.
_JAR_PATTERNS: tuple[tuple[str, bool], ...] = (
    ("zookeeper-3.*.jar", True),
    ("zookeeper-jute-*.jar", True),
    ("slf4j-api-*.jar", True),
    ("metrics-core-*.jar", True),            # ZooKeeper's default metrics provider (dropwizard)
    ("snappy-java-*.jar", True),             # referenced when naming snapshots
    ("commons-cli-*.jar", True),             # ZooKeeperMain (the shell)
    ("netty-handler-4*.jar", True),          # client config touches netty's SslContext
    ("netty-common-4*.jar", True),
    ("netty-buffer-4*.jar", True),
    ("netty-transport-4*.jar", True),
    ("netty-resolver-4*.jar", True),
    ("netty-codec-base-4*.jar", False),
    ("netty-codec-4*.jar", False),
    ("netty-transport-native-unix-common-4*.jar", False),
    ("netty-transport-classes-epoll-4*.jar", False),  # the Netty server (TLS): NIO when epoll's native part is absent
    ("log4j-slf4j2-impl-*.jar", False),      # without these three, logging is silently off
    ("log4j-api-2*.jar", False),
    ("log4j-core-2*.jar", False),
    ("audience-annotations-*.jar", False),
    ("jline-2*.jar", False),                 # line editing in the interactive shell
)


class EmbeddedZooKeeperError(RuntimeError):
    """The embedded ZooKeeper could not be set up, started or stopped."""


class JavaNotFoundError(EmbeddedZooKeeperError):
    """No ``java`` executable."""


class ZooKeeperJarsNotFoundError(EmbeddedZooKeeperError):
    """pyspark's bundled ZooKeeper jars are missing."""


class ZooKeeperStartError(EmbeddedZooKeeperError):
    """The server process exited or did not serve in time."""


class ZooKeeperAlreadyRunningError(EmbeddedZooKeeperError):
    """A server recorded in the data directory's pid file is still running."""


# --------------------------------------------------------------------------------------------------------------
# Java and the classpath


def find_java(java: str | None = None) -> str:
    """Path of the ``java`` to use: ``java`` if given, else ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    candidates = []
    if java:
        candidates.append(java)
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidates.append(str(Path(java_home) / "bin" / "java"))
    for candidate in candidates:
        resolved = shutil.which(candidate)
        if resolved:
            return resolved
    resolved = shutil.which("java")
    if resolved:
        return resolved
    raise JavaNotFoundError(
        "kafkatier: Java 17+ is required to run the embedded ZooKeeper (`java` not found on PATH"
        + (f" nor in JAVA_HOME={java_home}" if java_home else "")
        + "); install openjdk-17-jre-headless"
    )


def pyspark_jars_dir() -> Path:
    """pyspark's ``jars/`` directory (or ``$KAFKATIER_ZOOKEEPER_JARS``), found without importing pyspark."""
    override = os.environ.get(JARS_ENV)
    if override:
        path = Path(override)
        if not path.is_dir():
            raise ZooKeeperJarsNotFoundError(f"kafkatier: {JARS_ENV}={override} is not a directory")
        return path
    spec = find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ZooKeeperJarsNotFoundError(
            "kafkatier: the embedded ZooKeeper runs from the jars bundled with pyspark, and pyspark is not "
            "installed; install kafkatier's dependencies (pip install -e .) or set " + JARS_ENV
        )
    for location in spec.submodule_search_locations:
        jars = Path(location) / "jars"
        if jars.is_dir():
            return jars
    raise ZooKeeperJarsNotFoundError(
        f"kafkatier: pyspark is installed at {list(spec.submodule_search_locations)} but has no jars/ directory"
    )


def _version_key(path: Path) -> list:
    parts = []
    for token in path.name.replace("-", ".").split("."):
        parts.append((0, int(token), "") if token.isdigit() else (1, 0, token))
    return parts


def zookeeper_classpath(jars_dir: Path | None = None) -> str:
    """The minimal classpath (``:``-joined) for ZooKeeper's server and shell."""
    jars_dir = Path(jars_dir) if jars_dir else pyspark_jars_dir()
    selected: list[str] = []
    missing: list[str] = []
    for pattern, required in _JAR_PATTERNS:
        matches = sorted(jars_dir.glob(pattern), key=_version_key)
        if matches:
            selected.append(str(matches[-1]))
        elif required:
            missing.append(pattern)
    if missing:
        raise ZooKeeperJarsNotFoundError(
            f"kafkatier: ZooKeeper jars not found in {jars_dir}: missing {', '.join(missing)} "
            "(expected the jars bundled with pyspark 4.x)"
        )
    return os.pathsep.join(selected)


def java_command(main_class: str, args: Sequence[str] = (), *, log_config: Path | None = None,
                 jvm_opts: Sequence[str] = DEFAULT_JVM_OPTS, java: str | None = None,
                 jars_dir: Path | None = None) -> list[str]:
    """argv that runs ``main_class`` of ZooKeeper with the bundled classpath."""
    cmd = [find_java(java), *jvm_opts]
    if log_config is not None:
        cmd.append(f"-Dlog4j2.configurationFile={log_config}")
    cmd += ["-cp", zookeeper_classpath(jars_dir), main_class, *args]
    return cmd


# --------------------------------------------------------------------------------------------------------------
# Four-letter words and waiting


def parse_connect_string(connect_string: str) -> list[tuple[str, int]]:
    """``h1:p1,h2:p2[/chroot]`` -> ``[(h1, p1), (h2, p2)]``; ValueError if malformed."""
    hosts = connect_string.split("/", 1)[0]
    result = []
    for item in hosts.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad ZooKeeper address {item!r} in {connect_string!r} (expected host:port)")
        result.append((host.strip("[]"), int(port)))
    return result


def four_letter_word(host: str, port: int, word: str, timeout: float = 2.0,
                     tls: ssl.SSLContext | None = None) -> str:
    """Send a four-letter word (``ruok``, ``srvr``, ``stat``, ``mntr``...) and return the reply text; over TLS
    with ``tls`` (a server's secure client port)."""
    with socket.create_connection((host, port), timeout=timeout) as raw:
        sock = tls.wrap_socket(raw, server_hostname=host) if tls is not None else raw
        sock.sendall(word.encode("ascii"))
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def is_serving(connect_string: str, timeout: float = 1.0, tls: ssl.SSLContext | None = None) -> bool:
    """True when every server in ``connect_string`` answers ``srvr`` as a running server.

    (``ruok`` answers ``imok`` as soon as the port is bound, before the database is loaded.)
    """
    try:
        return all("Mode:" in four_letter_word(h, p, "srvr", timeout, tls)
                   for h, p in parse_connect_string(connect_string))
    except OSError:  # ssl.SSLError included
        return False


def serves_data_dir(host: str, port: int, data_dir: Path, timeout: float = 1.0,
                    tls: ssl.SSLContext | None = None) -> bool:
    """Whether the server on ``host:port`` is the one keeping its data in ``data_dir`` (its ``conf`` answer):
    another server that took a port we were given answers ``srvr`` just as well."""
    try:
        conf = four_letter_word(host, port, "conf", timeout, tls)
    except OSError:
        return False
    for line in conf.splitlines():
        key, _, value = line.strip().partition("=")
        if key == "dataDir":
            return value == str(data_dir) or value.startswith(str(data_dir) + os.sep)
    return False


def wait_until_serving(connect_string: str, timeout: float = 60.0,
                       alive: Callable[[], bool] | None = None, data_dir: Path | None = None,
                       tls: ssl.SSLContext | None = None) -> None:
    """Block until ZooKeeper at ``connect_string`` serves; TimeoutError after ``timeout`` seconds.

    ``alive`` (optional) is checked between polls; when it turns false the wait ends with ZooKeeperStartError.
    ``data_dir`` (optional): only the server keeping its data there counts (a single server).
    """
    def ready() -> bool:
        if alive is not None and not alive():
            raise ZooKeeperStartError("the ZooKeeper process exited before serving")
        if data_dir is not None:
            (host, port), = parse_connect_string(connect_string)
            return is_serving(connect_string, tls=tls) and serves_data_dir(host, port, data_dir, tls=tls)
        return is_serving(connect_string, tls=tls)

    if not poll_until(ready, timeout):
        raise TimeoutError(f"ZooKeeper at {connect_string} did not start serving within {timeout:g}s")


def free_port(host: str = DEFAULT_HOST) -> int:
    """A TCP port on ``host`` that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------------------------------------------
# Files


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` (write-temp, fsync, rename, fsync the directory)."""
    atomic_write(str(path), text.encode("utf-8"))


@attrs.frozen
class ZooKeeperTls:
    """The server side of TLS to ZooKeeper (ZooKeeper's ``ssl.*`` in ``zoo.cfg``, Netty connection factory): PEM
    files as ZooKeeper 3.6+ reads them (``ssl.keyStore.type=PEM``: the PKCS#8 key and the certificate chain in one
    file).  ``client_auth``: ZooKeeper's ``ssl.clientAuth`` -- ``need`` (its default: every client presents a
    certificate the truststore verifies), ``want`` or ``none``."""

    keystore: Path
    truststore: Path
    client_auth: str = "need"

    def __attrs_post_init__(self) -> None:
        if self.client_auth not in ("need", "want", "none"):
            raise ValueError(f"ssl.clientAuth must be need, want or none, got {self.client_auth!r}")
        for what, path in (("keystore", self.keystore), ("truststore", self.truststore)):
            if not Path(path).is_file():
                raise EmbeddedZooKeeperError(f"kafkatier: the ZooKeeper TLS {what} {path} is not a file")

    def zoo_cfg_lines(self) -> list[str]:
        return [
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            f"ssl.keyStore.location={self.keystore}", "ssl.keyStore.type=PEM",
            f"ssl.trustStore.location={self.truststore}", "ssl.trustStore.type=PEM",
            f"ssl.clientAuth={self.client_auth}",
            # the server does not check a client certificate's host names against the client's address
            "ssl.clientHostnameVerification=false",
        ]

    def client_context(self) -> ssl.SSLContext:
        """The context the server's own readiness probe (four-letter words over TLS) uses: its certificate serves
        as a client certificate (certificates of ``kafkatier tls make-cert`` allow both uses)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.load_verify_locations(cafile=str(self.truststore))
        ctx.load_cert_chain(str(self.keystore))
        return ctx


@attrs.frozen
class ZooKeeperSettings:
    """What goes into ``zoo.cfg``."""

    data_dir: Path
    port: int
    host: str = DEFAULT_HOST
    tick_time_ms: int = DEFAULT_TICK_MS
    min_session_timeout_ms: int | None = None   # default 2 * tick
    max_session_timeout_ms: int = 60_000
    fsync: bool = False  # forceSync: off by default (a crash of the process loses nothing, of the host may)
    sasl: bool = False   # require SASL (DIGEST-MD5 users from the JAAS Server section) of every client
    tls: "ZooKeeperTls | None" = None  # TLS only: a ``secureClientPort`` (Netty) and no plain client port

    @property
    def client_port_lines(self) -> list[str]:
        if self.tls is None:
            return [f"clientPort={self.port}", f"clientPortAddress={self.host}"]
        return [f"secureClientPort={self.port}", f"secureClientPortAddress={self.host}", *self.tls.zoo_cfg_lines()]

    def zoo_cfg(self) -> str:
        min_session = self.min_session_timeout_ms or 2 * self.tick_time_ms
        lines = [
            "# Generated by kafkatier; rewritten on every start.",
            f"tickTime={self.tick_time_ms}",
            f"minSessionTimeout={min_session}",
            f"maxSessionTimeout={max(self.max_session_timeout_ms, min_session)}",
            f"dataDir={self.data_dir / 'data'}",
            *self.client_port_lines,
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=*",
            "autopurge.snapRetainCount=3",
            "autopurge.purgeInterval=1",
            f"forceSync={'yes' if self.fsync else 'no'}",
        ]
        if self.sasl:
            # ZooKeeper 3.7+'s enforcement: a session that has not logged in with SASL is refused every request
            # (AUTH_FAILED) -- 3.9 ignores the older requireClientAuthScheme
            lines += ["authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider",
                      "enforce.auth.enabled=true", "enforce.auth.schemes=sasl"]
        return "\n".join(lines) + "\n"


def log4j2_xml(log_file: Path | None, level: str = "INFO") -> str:
    """log4j2 configuration: to a rolling ``log_file``, or to stderr when ``log_file`` is None."""
    layout = "<PatternLayout pattern=\"%d{yyyy-MM-dd'T'HH:mm:ss.SSS'Z'}{UTC} %-5p [%t] %c{1} - %m%n\"/>"
    if log_file is None:
        appender = f'<Console name="out" target="SYSTEM_ERR">{layout}</Console>'
    else:
        appender = (
            f'<RollingFile name="out" fileName={quoteattr(str(log_file))} '
            f'filePattern={quoteattr(str(log_file) + ".%i")}>{layout}'
            '<Policies><SizeBasedTriggeringPolicy size="50 MB"/></Policies>'
            '<DefaultRolloverStrategy max="3"/></RollingFile>'
        )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<Configuration status="warn">\n'
        f"  <Appenders>{appender}</Appenders>\n"
        f'  <Loggers><Root level="{level}"><AppenderRef ref="out"/></Root></Loggers>\n'
        "</Configuration>\n"
    )


# --------------------------------------------------------------------------------------------------------------
# Processes


def _proc_cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def pid_alive(pid: int) -> bool:
    """True if ``pid`` runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: trust kill(0)
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _is_our_server(pid: int, config_path: Path) -> bool:
    """Is ``pid`` a ZooKeeperServerMain started with ``config_path``?  (Guards against recycled pids.)"""
    if not pid_alive(pid):
        return False
    cmdline = _proc_cmdline(pid)
    if cmdline is None:
        return True  # cannot tell without procfs; the pid file is our only evidence
    return SERVER_MAIN in cmdline and str(config_path) in cmdline


def read_pid_file(data_dir: Path) -> int | None:
    """The pid recorded in ``<data_dir>/zookeeper.pid``, or None if absent or unreadable."""
    path = Path(data_dir) / "zookeeper.pid"
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    if not text.isdigit():
        log.warning("ignoring malformed pid file %s", kv(path=path, content=repr(text[:40])))
        return None
    return int(text)


def running_pid(data_dir: Path) -> int | None:
    """Pid of the ZooKeeper server running from ``data_dir`` according to its pid file, else None."""
    data_dir = Path(data_dir).resolve()
    pid = read_pid_file(data_dir)
    if pid is not None and _is_our_server(pid, data_dir / "zoo.cfg"):
        return pid
    return None


def stop_pid(pid: int, timeout: float = 10.0) -> bool:
    """SIGTERM ``pid``, wait up to ``timeout`` s, then SIGKILL.  True if it stopped on SIGTERM."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    if poll_until(lambda: not pid_alive(pid), timeout):
        return True
    log.warning("ZooKeeper did not stop on SIGTERM; killing %s", kv(pid=pid, timeout_s=timeout))
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    poll_until(lambda: not pid_alive(pid), 5.0)
    return False


def stop_data_dir(data_dir: Path, timeout: float = 10.0) -> int | None:
    """Stop the server whose pid file is in ``data_dir``; returns its pid, or None if none was running."""
    data_dir = Path(data_dir).resolve()
    pid = running_pid(data_dir)
    pid_path = data_dir / "zookeeper.pid"
    if pid is None:
        if pid_path.exists():
            log.info("removing stale pid file %s", kv(path=pid_path))
            pid_path.unlink(missing_ok=True)
        return None
    stop_pid(pid, timeout)
    pid_path.unlink(missing_ok=True)
    log.info("ZooKeeper stopped %s", kv(pid=pid, data_dir=data_dir))
    return pid


_ATTACHED: set["EmbeddedZooKeeper"] = set()  # servers start() made children of this process


@atexit.register
def _stop_attached_servers() -> None:
    for server in list(_ATTACHED):
        try:
            server.stop(timeout=5.0)
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass


class EmbeddedZooKeeper:
    """One ZooKeeper server process on 127.0.0.1.

    ``port=0`` picks a free port on first start and keeps it across restarts, so the connect string stays
    valid when a test stops and restarts the server (the data directory, and so every znode, survives too).
    """

    def __init__(self, data_dir: str | os.PathLike, port: int = 0, tick_time_ms: int = DEFAULT_TICK_MS, *,
                 host: str = DEFAULT_HOST, min_session_timeout_ms: int | None = None,
                 max_session_timeout_ms: int = 60_000, fsync: bool = False, java: str | None = None,
                 jars_dir: str | os.PathLike | None = None, jvm_opts: Sequence[str] = DEFAULT_JVM_OPTS,
                 log_level: str = "INFO", sasl_jaas_config: str | os.PathLike | None = None,
                 tls: ZooKeeperTls | None = None) -> None:
        """``sasl_jaas_config``: a JAAS file with a ``Server`` section (``user_<name>="<password>"``): every client
        must then log in with SASL DIGEST-MD5.  ``tls``: the server listens on a TLS ``secureClientPort`` only
        (``port`` is then that port; there is no plain client port)."""
        if not 0 <= port < 65536:
            raise ValueError(f"port must be in 0..65535, got {port}")
        if tick_time_ms <= 0:
            raise ValueError(f"tick_time_ms must be positive, got {tick_time_ms}")
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self._port = port
        self._port_pinned = port != 0  # a port we chose is pinned once a server has served on it
        self.tick_time_ms = tick_time_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.fsync = fsync
        self.java = java
        self.jars_dir = Path(jars_dir) if jars_dir else None
        self.sasl_jaas_config = Path(sasl_jaas_config).resolve() if sasl_jaas_config else None
        self.jvm_opts = tuple(jvm_opts) + ((f"-Djava.security.auth.login.config={self.sasl_jaas_config}",)
                                           if self.sasl_jaas_config else ())
        self.log_level = log_level
        self.tls = tls
        self._proc: subprocess.Popen | None = None
        self.last_start_seconds: float | None = None

    # -- properties ------------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def connect_string(self) -> str:
        if not self._port:
            raise EmbeddedZooKeeperError("the port is chosen at start(); start the server first")
        return f"{self.host}:{self._port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def config_path(self) -> Path:
        return self.data_dir / "zoo.cfg"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "zookeeper.log"

    @property
    def out_path(self) -> Path:
        return self.data_dir / "zookeeper.out"

    @property
    def pid_path(self) -> Path:
        return self.data_dir / "zookeeper.pid"

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self, wait_timeout: float = 60.0) -> "EmbeddedZooKeeper":
        """Start the server as a child of this process and wait until it serves."""
        self._launch(wait_timeout, detached=False)
        _ATTACHED.add(self)
        return self

    def start_detached(self, wait_timeout: float = 60.0) -> int:
        """Start a server that outlives this process; returns its pid once it serves."""
        self._launch(wait_timeout, detached=True)
        return self.pid  # type: ignore[return-value]

    def _launch(self, wait_timeout: float, detached: bool) -> None:
        if self.is_running():
            raise ZooKeeperAlreadyRunningError(f"ZooKeeper is already running (pid {self.pid})")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        other = running_pid(self.data_dir)
        if other is not None:
            raise ZooKeeperAlreadyRunningError(
                f"a ZooKeeper server (pid {other}) is already running from {self.data_dir}; "
                f"stop it with: kafkatier zookeeper stop --data-dir {self.data_dir}"
            )
        # Resolve Java and the jars before anything else: their errors are the ones a user can act on.
        cmd = java_command(SERVER_MAIN, [str(self.config_path)], log_config=self.data_dir / "log4j2.xml",
                           jvm_opts=self.jvm_opts, java=self.java, jars_dir=self.jars_dir)
        # A port picked by us can be taken by someone else before java binds it: pick again, a few times.
        attempts = 1 if self._port_pinned else 3
        retrying = Retrying(stop=stop_after_attempt(attempts), retry=retry_if_exception_type(_PortTaken),
                            reraise=True)
        try:
            retrying(self._spawn_and_wait, cmd, wait_timeout, detached)
        except _PortTaken as e:
            raise ZooKeeperStartError(str(e)) from None

    def _spawn_and_wait(self, cmd: list[str], wait_timeout: float, detached: bool) -> None:
        if not self._port:
            self._port = free_port(self.host)
        settings = ZooKeeperSettings(
            data_dir=self.data_dir, port=self._port, host=self.host, tick_time_ms=self.tick_time_ms,
            min_session_timeout_ms=self.min_session_timeout_ms,
            max_session_timeout_ms=self.max_session_timeout_ms, fsync=self.fsync,
            sasl=self.sasl_jaas_config is not None, tls=self.tls)
        atomic_write_text(self.config_path, settings.zoo_cfg())
        atomic_write_text(self.data_dir / "log4j2.xml", log4j2_xml(self.log_path, self.log_level))
        started = time.monotonic()
        log.info("starting ZooKeeper %s", kv(port=self._port, data_dir=self.data_dir, detached=detached))
        with open(self.out_path, "ab") as out:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                          cwd=self.data_dir, start_new_session=True)
        atomic_write_text(self.pid_path, f"{self._proc.pid}\n")
        try:
            wait_until_serving(self.connect_string, wait_timeout, alive=self.is_running,
                               data_dir=self.data_dir / "data",
                               tls=self.tls.client_context() if self.tls is not None else None)
        except (ZooKeeperStartError, TimeoutError) as e:
            self._abort_start()
            tail = self._output_tail()
            if not self._port_pinned and "Address already in use" in tail:
                self._port = 0
                raise _PortTaken(f"port taken before ZooKeeper could bind it: {tail}") from None
            raise ZooKeeperStartError(
                f"ZooKeeper did not start ({e}); see {self.out_path} and {self.log_path}:\n{tail}") from None
        except BaseException:
            # Interrupted while waiting (Ctrl-C, or a sweep stopping a run with SIGTERM): the server runs in a
            # session of its own and nobody else knows its pid yet, so stop it here.
            self._abort_start()
            raise
        self.last_start_seconds = time.monotonic() - started
        self._port_pinned = True
        log.info("ZooKeeper serving %s", kv(connect=self.connect_string, pid=self.pid,
                                            start_s=f"{self.last_start_seconds:.2f}"))

    def _abort_start(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=10)
        self._remove_pid_file()

    def _output_tail(self, max_lines: int = 15) -> str:
        lines: list[str] = []
        for path in (self.out_path, self.log_path):
            try:
                lines += path.read_text(errors="replace").splitlines()[-max_lines:]
            except OSError:
                pass
        return "\n".join(lines[-max_lines:])

    def _remove_pid_file(self) -> None:
        pid = read_pid_file(self.data_dir)
        if self._proc is not None and pid == self._proc.pid:
            self.pid_path.unlink(missing_ok=True)

    def send_signal(self, sig: int) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(sig)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the server process to exit; returns its exit status."""
        if self._proc is None:
            raise EmbeddedZooKeeperError("ZooKeeper was not started")
        rc = self._proc.wait(timeout)
        self._remove_pid_file()
        return rc

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the server, SIGKILL after ``timeout`` s; returns the exit status (None if not started)."""
        _ATTACHED.discard(self)
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("ZooKeeper did not stop on SIGTERM; killing %s", kv(pid=self._proc.pid))
                self._proc.kill()
                self._proc.wait()
            log.info("ZooKeeper stopped %s", kv(pid=self._proc.pid, rc=self._proc.returncode))
        self._remove_pid_file()
        return self._proc.returncode

    def kill(self) -> None:
        """SIGKILL the server (a crash, for failure tests)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._remove_pid_file()

    def __enter__(self) -> "EmbeddedZooKeeper":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EmbeddedZooKeeper(data_dir={str(self.data_dir)!r}, port={self._port}, pid={self.pid})"


class _PortTaken(Exception):
    pass


@contextmanager
def embedded_zookeeper(data_dir: str | os.PathLike, **kwargs) -> Iterator[EmbeddedZooKeeper]:
    """``with embedded_zookeeper(dir) as zk: ...`` -- a started server, stopped on exit."""
    server = EmbeddedZooKeeper(data_dir, **kwargs)
    server.start()
    try:
        yield server
    finally:
        server.stop()
