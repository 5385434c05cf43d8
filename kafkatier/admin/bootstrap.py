"""How a client finds and talks to the brokers: bootstrap servers and ``--command-config`` client settings.

Bootstrap servers come from exactly one of:

- ``--bootstrap-server host:port[,host:port...]``;
- ``--zookeeper HOST:PORT[/CHROOT]``: the live registrations under ``/brokers/ids`` (their ``endpoints`` whose
  listener maps to the wanted security protocol, PLAINTEXT by default);
- ``--data-dir D``: the ``bootstrap_servers`` of a local cluster's ``D/cluster.json``.

``--command-config FILE`` is a Java properties file; the keys kafka-python understands are turned into client
keyword arguments (:func:`client_kwargs_from_properties`), the others are reported so the caller can warn.

Two kinds of failure: :class:`BootstrapConfigError` (a bad option or input file: the CLI exits 2) and
:class:`NoReachableBrokerError` (the inputs are fine but nothing answers: the CLI exits 1).
"""
from __future__ import annotations

import json
import logging
import os
import re
import socket
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping

import attrs

from kafkatier.logsetup import get_logger, kv

log = get_logger("bootstrap")

CLUSTER_FILE = "cluster.json"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROBE_TIMEOUT_S = 3.0
DEFAULT_ZK_TIMEOUT_S = 10.0


class BootstrapConfigError(ValueError):
    """A missing or malformed connection option, or an unreadable/malformed input file."""


class NoReachableBrokerError(ConnectionError):
    """The connection options are valid but no broker (or ZooKeeper) could be reached."""


# ---------------------------------------------------------------------------------------------------- servers

@attrs.frozen
class HostPort:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


_HOST_PORT_RE = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9_.-]+)):(?P<port>\d{1,5})$")


def parse_host_port(text: str) -> HostPort:
    """``host:port`` (IPv6 as ``[::1]:9092``); :class:`BootstrapConfigError` otherwise."""
    m = _HOST_PORT_RE.match(text.strip())
    if not m or not 0 < int(m.group("port")) <= 65535:
        raise BootstrapConfigError(f"invalid broker address {text.strip()!r}: expected HOST:PORT")
    return HostPort(m.group("v6") or m.group("host"), int(m.group("port")))


def parse_bootstrap_servers(text: str) -> tuple[HostPort, ...]:
    """``host:port[,host:port...]`` (blanks around commas allowed); duplicates dropped, order kept."""
    items = [t for t in (text or "").split(",") if t.strip()]
    if not items:
        raise BootstrapConfigError("--bootstrap-server needs at least one HOST:PORT")
    return tuple(dict.fromkeys(parse_host_port(t) for t in items))


def servers_from_cluster_file(data_dir: str | os.PathLike, security_protocol: str = "PLAINTEXT"
                              ) -> tuple[HostPort, ...]:
    """The ``bootstrap_servers`` recorded in ``DATA_DIR/cluster.json`` by ``kafkatier cluster up`` (for
    ``security_protocol=SSL``, those of the SSL listeners of ``cluster up --tls``)."""
    path = Path(data_dir) / CLUSTER_FILE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BootstrapConfigError(f"{path} not found: no local cluster in {data_dir} "
                                   f"(start one with: kafkatier cluster up --data-dir {data_dir})") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BootstrapConfigError(f"cannot read {path}: {e}") from None
    servers = state.get("bootstrap_servers") if isinstance(state, dict) else None
    if security_protocol.upper() == "SSL" and isinstance(state, dict):
        servers = (state.get("tls") or {}).get("bootstrap_servers")
        if not servers:
            raise BootstrapConfigError(f"the cluster in {data_dir} has no SSL listeners (kafkatier cluster up --tls)")
    if not isinstance(servers, str) or not servers.strip():
        raise BootstrapConfigError(f"{path} has no \"bootstrap_servers\" string")
    try:
        return parse_bootstrap_servers(servers)
    except BootstrapConfigError as e:
        raise BootstrapConfigError(f"{path}: {e}") from None


def endpoints_for_protocol(registrations: Iterable[Any], security_protocol: str = "PLAINTEXT"
                           ) -> tuple[HostPort, ...]:
    """One address per broker registration (``BrokerRegistration``): its first endpoint whose listener maps
    to ``security_protocol``; brokers without one are skipped with a warning.  Sorted by broker id."""
    out = []
    for reg in sorted(registrations, key=lambda r: r.id):
        spm = reg.listener_security_protocol_map
        for ep in reg.parsed_endpoints():
            if spm.get(ep.listener, ep.listener) == security_protocol:
                out.append(HostPort(ep.host or "localhost", ep.port))
                break
        else:
            log.warning("broker has no endpoint for the security protocol, skipped %s",
                        kv(broker=reg.id, security_protocol=security_protocol, endpoints=",".join(reg.endpoints)))
    return tuple(dict.fromkeys(out))


def servers_from_zookeeper(connect: str, security_protocol: str = "PLAINTEXT",
                           timeout: float = DEFAULT_ZK_TIMEOUT_S) -> tuple[HostPort, ...]:
    """Addresses of the brokers registered under ``/brokers/ids``; malformed registrations are skipped."""
    from kafkatier.zk.errors import KazooException, NoNodeError

    from kafkatier.zk import paths
    from kafkatier.zk.client import ZooKeeperUnavailableError, start_client, zk_retry
    from kafkatier.zk.codecs import BrokerRegistration, MalformedZNodeError

    # kazoo logs every failed connection attempt and warns about a missing chroot: our error says it once.
    quiet = logging.getLogger("kafkatier.bootstrap.kazoo")
    quiet.setLevel(logging.CRITICAL if log.getEffectiveLevel() > logging.DEBUG else logging.DEBUG)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            client = start_client(connect, connect_timeout=timeout, logger=quiet)
    except ZooKeeperUnavailableError as e:
        raise NoReachableBrokerError(str(e)) from None
    except ValueError as e:
        raise BootstrapConfigError(f"invalid --zookeeper {connect!r}: {e}") from None
    try:
        try:
            ids = zk_retry(client.get_children, paths.BROKER_IDS)
        except NoNodeError:
            ids = []
        registrations = []
        for child in ids:
            path = paths.broker(int(child)) if child.isdigit() else f"{paths.BROKER_IDS}/{child}"
            if not child.isdigit():
                log.warning("skipping znode that is not a broker id %s", kv(path=path))
                continue
            try:
                data, _stat = zk_retry(client.get, path)
            except NoNodeError:
                continue  # the broker went away while we listed
            try:
                registrations.append(BrokerRegistration.decode(data, broker_id=int(child), path=path))
            except MalformedZNodeError as e:
                log.warning("skipping malformed znode %s", kv(path=path, reason=e.reason))
    except KazooException as e:
        raise NoReachableBrokerError(f"reading {paths.BROKER_IDS} from ZooKeeper at {connect} failed: "
                                     f"{type(e).__name__}") from None
    finally:
        client.stop()
        client.close()
    servers = endpoints_for_protocol(registrations, security_protocol)
    if not servers:
        raise NoReachableBrokerError(f"no live broker with a {security_protocol} endpoint is registered in "
                                     f"ZooKeeper at {connect} ({paths.BROKER_IDS})")
    return servers


def probe_reachable(servers: Iterable[HostPort], timeout: float = DEFAULT_PROBE_TIMEOUT_S) -> tuple[HostPort, ...]:
    """The servers that accept a TCP connection; :class:`NoReachableBrokerError` naming each failure if none
    does."""
    servers = tuple(servers)
    reachable, failures = [], []
    for hp in servers:
        try:
            with socket.create_connection((hp.host, hp.port), timeout=timeout):
                reachable.append(hp)
        except OSError as e:
            failures.append(f"{hp} ({e.strerror or type(e).__name__})")
    if not reachable:
        raise NoReachableBrokerError("no broker reachable at " + ", ".join(failures))
    return tuple(reachable)


def resolve_bootstrap_servers(bootstrap_server: str | None = None, zookeeper: str | None = None,
                              data_dir: str | None = None, *, security_protocol: str = "PLAINTEXT",
                              probe: bool = True, timeout: float = DEFAULT_PROBE_TIMEOUT_S) -> list[str]:
    """``host:port`` strings for a client, from exactly one of the three sources; with ``probe`` the list is
    checked to contain at least one server accepting connections (all are returned, reachable ones first)."""
    given = [name for name, v in (("--bootstrap-server", bootstrap_server), ("--zookeeper", zookeeper),
                                  ("--data-dir", data_dir)) if v]
    if not given:
        raise BootstrapConfigError("one of --bootstrap-server, --zookeeper or --data-dir is required")
    if len(given) > 1:
        raise BootstrapConfigError(f"give only one of {', '.join(given)}")
    if bootstrap_server:
        servers = parse_bootstrap_servers(bootstrap_server)
    elif data_dir:
        servers = servers_from_cluster_file(data_dir, security_protocol)
    else:
        servers = servers_from_zookeeper(zookeeper, security_protocol, timeout=max(timeout, DEFAULT_ZK_TIMEOUT_S))
    if probe:
        reachable = probe_reachable(servers, timeout)
        servers = reachable + tuple(s for s in servers if s not in reachable)
    return [str(s) for s in servers]


# ---------------------------------------------------------------------------------------------- properties

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str, what: str) -> str:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 == len(text):
            out.append(c)
            i += 1
            continue
        n = text[i + 1]
        if n == "u":
            code = text[i + 2:i + 6]
            if len(code) != 4 or not all(ch in "0123456789abcdefABCDEF" for ch in code):
                raise BootstrapConfigError(f"{what}: malformed \\uXXXX escape")
            out.append(chr(int(code, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(n, n))
        i += 2
    return "".join(out)


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """(first physical line number, logical line) with comments/blank lines dropped and ``\\`` continuations
    joined, as ``java.util.Properties`` reads them."""
    pending, start = None, 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.lstrip(" \t\f")
        if pending is None:
            if not line or line[0] in "#!":
                continue
            start, pending = number, ""
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        yield start, pending + line
        pending = None
    if pending is not None:
        yield start, pending


def parse_properties(text: str, source: str = "properties") -> dict[str, str]:
    """Parse Java properties text (``key=value`` or ``key: value``, ``#``/``!`` comments, ``\\`` line
    continuations and escapes).  A line without a separator or with an empty key is malformed:
    :class:`BootstrapConfigError` naming ``source`` and the line number, never the line (it may hold a password,
    e.g. a JAAS config).  Later keys win."""
    props: dict[str, str] = {}
    for number, line in _logical_lines(text):
        i = 0
        while i < len(line) and line[i] not in "=:":
            i += 2 if line[i] == "\\" else 1
        what = f"{source} line {number}"
        if i >= len(line):
            raise BootstrapConfigError(f"{what}: expected key=value")
        key = _unescape(line[:i].strip(), what)
        if not key:
            raise BootstrapConfigError(f"{what}: empty key")
        props[key] = _unescape(line[i + 1:].strip(), what)
    return props


def load_properties(path: str | os.PathLike, what: str = "properties file") -> dict[str, str]:
    """:func:`parse_properties` on a UTF-8 file; unreadable or malformed -> :class:`BootstrapConfigError`."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise BootstrapConfigError(f"cannot read {what} {path}: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BootstrapConfigError(f"{what} {path} is not UTF-8 text (byte {e.start})") from None
    return parse_properties(text, source=str(path))


# ------------------------------------------------------------------------------------- client keyword args

def _int(key: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise BootstrapConfigError(f"{key}: expected an integer, got {value!r}") from None


def _buffer(key: str, value: str) -> int | None:
    n = _int(key, value)
    return None if n < 0 else n   # Kafka's -1 = OS default


def _protocol(key: str, value: str) -> str:
    v = value.strip().upper()
    if v not in SECURITY_PROTOCOLS:
        raise BootstrapConfigError(f"{key}: expected one of {', '.join(SECURITY_PROTOCOLS)}, got {value!r}")
    return v


#: The SASL mechanisms a client can name (Kafka's; kafka-python speaks each of them).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER")


def _mechanism(key: str, value: str) -> str:
    v = value.strip().upper()
    if v not in SASL_MECHANISMS:
        raise BootstrapConfigError(f"{key}: unsupported SASL mechanism {value!r}, expected one of "
                                   f"{', '.join(SASL_MECHANISMS)}")
    return v


# property -> (kafka-python keyword, converter)
_SIMPLE: dict[str, tuple[str, Any]] = {
    "client.id": ("client_id", lambda k, v: v),
    "security.protocol": ("security_protocol", _protocol),
    "sasl.mechanism": ("sasl_mechanism", _mechanism),
    "sasl.kerberos.service.name": ("sasl_kerberos_service_name", lambda k, v: v),
    "request.timeout.ms": ("request_timeout_ms", _int),
    "retry.backoff.ms": ("retry_backoff_ms", _int),
    "reconnect.backoff.ms": ("reconnect_backoff_ms", _int),
    "reconnect.backoff.max.ms": ("reconnect_backoff_max_ms", _int),
    "connections.max.idle.ms": ("connections_max_idle_ms", _int),
    "metadata.max.age.ms": ("metadata_max_age_ms", _int),
    "receive.buffer.bytes": ("receive_buffer_bytes", _buffer),
    "send.buffer.bytes": ("send_buffer_bytes", _buffer),
    "ssl.key.password": ("ssl_password", lambda k, v: v),
}

_JAAS_RE = re.compile(r"^\s*(?P<module>[\w.$]+)\s+(?:required|requisite|sufficient|optional)\b(?P<opts>.*?);?\s*$",
                      re.DOTALL)
_JAAS_OPT_RE = re.compile(
    r"""(?P<key>\w+)\s*=\s*(?:"(?P<dq>(?:[^"\\]|\\.)*)"|'(?P<sq>[^']*)'|(?P<bare>[^\s;"']+))""")
_CREDENTIAL_MODULES = ("PlainLoginModule", "ScramLoginModule")


def parse_jaas_config(value: str) -> tuple[str, dict[str, str]]:
    """``<LoginModule> required k="v" ...;`` -> (module class name, options)."""
    m = _JAAS_RE.match(value)
    if not m:
        raise BootstrapConfigError(f"sasl.jaas.config: expected '<LoginModule> required key=\"value\" ...;', "
                                   f"got {value[:60]!r}")
    opts = {}
    for o in _JAAS_OPT_RE.finditer(m.group("opts")):
        if o.group("dq") is not None:
            opts[o.group("key")] = re.sub(r"\\(.)", r"\1", o.group("dq"))
        else:
            opts[o.group("key")] = o.group("sq") if o.group("sq") is not None else o.group("bare")
    return m.group("module"), opts


@attrs.frozen
class ClientSettings:
    """kafka-python keyword arguments derived from a properties file, plus the keys that were not used."""

    kwargs: dict[str, Any] = attrs.field(factory=dict)
    ignored: tuple[str, ...] = ()


def client_kwargs_from_properties(props: Mapping[str, str]) -> ClientSettings:
    """Map Kafka client properties to kafka-python keyword arguments common to the admin client, producer and
    consumer.  Bad values raise :class:`BootstrapConfigError`; keys with no sensible mapping are returned in
    ``ignored``."""
    kwargs: dict[str, Any] = {}
    ignored: list[str] = []
    for key, value in props.items():
        if key in _SIMPLE:
            name, convert = _SIMPLE[key]
            kwargs[name] = convert(key, value)
        elif key == "sasl.jaas.config":
            module, opts = parse_jaas_config(value)
            if module.rsplit(".", 1)[-1] in _CREDENTIAL_MODULES and "username" in opts:
                kwargs["sasl_plain_username"] = opts["username"]
                kwargs["sasl_plain_password"] = opts.get("password", "")
            else:
                ignored.append(key)
        elif key == "ssl.endpoint.identification.algorithm":
            kwargs["ssl_check_hostname"] = value.strip() != ""
        elif key in ("ssl.truststore.location", "ssl.keystore.location"):
            store = key.split(".")[1]
            if props.get(f"ssl.{store}.type", "").strip().upper() == "PEM":
                if store == "truststore":
                    kwargs["ssl_cafile"] = value
                else:
                    kwargs["ssl_certfile"] = kwargs["ssl_keyfile"] = value
            else:
                ignored.append(f"{key} (kafka-python reads PEM files only: set ssl.{store}.type=PEM)")
        elif key in ("ssl.truststore.type", "ssl.keystore.type"):
            continue  # consumed with the location
        else:
            ignored.append(key)
    return ClientSettings(kwargs=kwargs, ignored=tuple(ignored))


def load_command_config(path: str | os.PathLike) -> dict[str, Any]:
    """Read a ``--command-config`` file into kafka-python keyword arguments, warning about unused keys."""
    props = load_properties(path, "command config file")
    settings = client_kwargs_from_properties(props)
    for key in ("ssl.truststore.location", "ssl.keystore.location"):
        if props.get(key) and not os.path.isfile(props[key]):
            raise BootstrapConfigError(f"{path}: {key}={props[key]}: no such file")
    for key in settings.ignored:
        log.warning("command config key not supported, ignored %s", kv(file=path, key=key))
    return settings.kwargs
