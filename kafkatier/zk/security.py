"""ZooKeeper authentication and ACLs as Kafka sets them (``zookeeper.set.acl``, a JAAS ``Client`` section).

Kafka's clients authenticate to ZooKeeper with SASL (DIGEST-MD5) when the JVM is given a JAAS file
(``-Djava.security.auth.login.config=F`` in ``KAFKA_OPTS``) whose ``Client`` section names a user and password.
kafkatier reads the same file from the broker property ``java.security.auth.login.config``, else from
``KAFKATIER_JAAS_CONFIG``, else from ``KAFKA_OPTS``.

With ``zookeeper.set.acl=true`` (a broker) or SASL enabled (a tool, as Kafka's ``JaasUtils.isZkSaslEnabled``) every
znode created gets Kafka's ``ZkData.defaultAcls``: creator-all (the ``auth`` scheme: the authenticated SASL user)
plus world-read; on sensitive paths no world access at all.  Kafka's sensitive roots are ``/config/users`` (SCRAM
credentials), ``/config/brokers`` (dynamic broker passwords) and ``/delegation_token``; kafkatier adds its control
channel and fault znodes, which a writer or reader could use to delete data or learn the cluster's faults.

TLS to ZooKeeper takes Kafka's names: ``zookeeper.ssl.client.enable=true``,
``zookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty`` (Kafka refuses TLS without it; kazoo is
its own socket, the name is checked only), ``zookeeper.ssl.keystore.{location,password,type}`` and
``zookeeper.ssl.truststore.{location,password,type}`` (PEM, PKCS12 or JKS),
``zookeeper.ssl.endpoint.identification.algorithm`` (``HTTPS``, the default, checks the server's host name; empty
does not).  A broker reads them from its properties; a tool from the file named by ``KAFKATIER_ZK_TLS_CONFIG``
(the content of Kafka's ``--zk-tls-config-file``).  PKCS12 and JKS stores are turned into PEM, which kazoo loads,
in a private directory that lives as long as the process.
"""
from __future__ import annotations

import atexit
import os
import re
import shlex
import shutil
import tempfile
from typing import Mapping

import attrs
from kazoo.exceptions import NoNodeError
from kazoo.security import ACL, CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

from kafkatier.common.keystores import KeystoreError, store_to_pem

JAAS_PROPERTY = "java.security.auth.login.config"
JAAS_ENV = "KAFKATIER_JAAS_CONFIG"
SET_ACL_PROPERTY = "zookeeper.set.acl"
TLS_ENABLE_PROPERTY = "zookeeper.ssl.client.enable"
CNXN_SOCKET_PROPERTY = "zookeeper.clientCnxnSocket"
NETTY_CNXN_SOCKET = "org.apache.zookeeper.ClientCnxnSocketNetty"
TLS_CONFIG_ENV = "KAFKATIER_ZK_TLS_CONFIG"

SENSITIVE_ROOT_PATHS = ("/config/users", "/config/brokers", "/delegation_token",
                        "/kafkatier/control", "/kafkatier/faults", "/kafkatier/fault_state")
CONSUMERS_PATH = "/consumers"  # Kafka leaves the old consumers' path open


class ZooKeeperSecurityError(ValueError):
    """A JAAS file that cannot be read or parsed, or a ``Client`` section without credentials."""


def sensitive_path(path: str) -> bool:
    return any(path == root or path.startswith(root + "/") for root in SENSITIVE_ROOT_PATHS)


def default_acls(secure: bool, path: str) -> list[ACL]:
    """Kafka's ``ZkData.defaultAcls``: open when not secure; creator-all (+ world-read off sensitive paths)."""
    if not secure or path == CONSUMERS_PATH:
        return list(OPEN_ACL_UNSAFE)
    return list(CREATOR_ALL_ACL) + ([] if sensitive_path(path) else list(READ_ACL_UNSAFE))


@attrs.frozen
class ZkTls:
    """The client side of TLS to ZooKeeper, as kazoo takes it: PEM files (``keystore``: the key and its chain,
    None: no client certificate; ``truststore``: the CAs, None: the system's)."""

    keystore: str | None = None
    truststore: str | None = None
    check_hostname: bool = True

    def kazoo_kwargs(self) -> dict:
        kwargs: dict = {"use_ssl": True, "verify_certs": True, "check_hostname": self.check_hostname}
        if self.truststore:
            kwargs["ca"] = self.truststore
        if self.keystore:
            kwargs.update(certfile=self.keystore, keyfile=self.keystore)
        return kwargs


@attrs.frozen
class ZkSecurity:
    """How a kazoo client authenticates (``username``/``password``: SASL DIGEST-MD5), whether it sets ACLs, and
    its TLS (``tls``: None for a plain connection)."""

    username: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    set_acl: bool = False
    jaas_path: str | None = None
    tls: ZkTls | None = None

    @property
    def sasl(self) -> bool:
        return self.username is not None

    def kazoo_kwargs(self) -> dict:
        kwargs = self.tls.kazoo_kwargs() if self.tls is not None else {}
        if self.sasl:
            kwargs["sasl_options"] = {"mechanism": "DIGEST-MD5", "username": self.username,
                                      "password": self.password}
        return kwargs


def _truthy(value) -> bool:
    return str(value).strip().lower() == "true"


def read_properties(path: str, what: str) -> dict[str, str]:
    """A Java properties file (``k=v`` / ``k: v`` lines, ``#``/``!`` comments) -- one line on error."""
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        raise ZooKeeperSecurityError(f"cannot read {what} {path}: {e.strerror}") from None
    props = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)\s*[=:]\s*(.*)$", line)
        if not m:
            raise ZooKeeperSecurityError(f"{what} {path}: line {n} is not key=value")
        props[m.group(1)] = m.group(2)
    return props


_PRIVATE_DIR: list[str] = []


def _private_pem(pem: bytes, name: str) -> str:
    """``pem`` in a file of this process's private directory (0700, removed at exit): kazoo loads files only."""
    if not _PRIVATE_DIR:
        _PRIVATE_DIR.append(tempfile.mkdtemp(prefix="kafkatier-zk-tls-"))
        atexit.register(shutil.rmtree, _PRIVATE_DIR[0], True)
    path = os.path.join(_PRIVATE_DIR[0], name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    return path


def zk_tls(props: Mapping[str, str]) -> ZkTls | None:
    """The client TLS of Kafka's ``zookeeper.ssl.*`` properties, None when ``zookeeper.ssl.client.enable`` is not
    true.  A store that cannot be read is one :class:`ZooKeeperSecurityError` line naming the property."""
    if not _truthy(props.get(TLS_ENABLE_PROPERTY, "false")):
        return None
    socket_class = props.get(CNXN_SOCKET_PROPERTY)
    if socket_class != NETTY_CNXN_SOCKET:
        raise ZooKeeperSecurityError(f"{TLS_ENABLE_PROPERTY}=true needs {CNXN_SOCKET_PROPERTY}={NETTY_CNXN_SOCKET}"
                                     + (f" (got {socket_class})" if socket_class else ""))
    algorithm = props.get("zookeeper.ssl.endpoint.identification.algorithm", "HTTPS").strip()
    if algorithm.upper() not in ("HTTPS", ""):
        raise ZooKeeperSecurityError(f"zookeeper.ssl.endpoint.identification.algorithm={algorithm}: only HTTPS or "
                                     "empty are supported")
    files = {}
    for store in ("keystore", "truststore"):
        location = props.get(f"zookeeper.ssl.{store}.location")
        if not location:
            files[store] = None
            continue
        kind = props.get(f"zookeeper.ssl.{store}.type") or "JKS"   # Kafka's default, as for listeners
        if kind.upper() == "PEM":
            try:
                with open(location, "rb"):
                    pass
            except OSError as e:
                raise ZooKeeperSecurityError(f"zookeeper.ssl.{store}.location={location}: {e.strerror}") from None
            files[store] = location
            continue
        try:
            pem = store_to_pem(location, kind, props.get(f"zookeeper.ssl.{store}.password"),
                               f"zookeeper.ssl.{store}.location", need_key=store == "keystore")
        except KeystoreError as e:
            raise ZooKeeperSecurityError(str(e)) from None
        files[store] = _private_pem(pem, f"{store}.pem")
    return ZkTls(keystore=files["keystore"], truststore=files["truststore"], check_hostname=bool(algorithm))


_ENTRY = re.compile(r"""(\w[\w.-]*)\s*\{(.*?)\}\s*;""", re.S)
_OPTION = re.compile(r"""([\w.-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s;]+)""")


def parse_jaas(text: str, what: str = "JAAS file") -> dict[str, dict[str, str]]:
    """``{section: {option: value}}`` of a JAAS login configuration (one login module per section)."""
    stripped = re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)
    sections: dict[str, dict[str, str]] = {}
    pos = 0
    for m in _ENTRY.finditer(stripped):
        if stripped[pos:m.start()].strip():
            raise ZooKeeperSecurityError(f"{what}: syntax error near {stripped[pos:m.start()].strip()[:40]!r}")
        pos = m.end()
        body = m.group(2).strip()
        if not body.endswith(";"):
            raise ZooKeeperSecurityError(f"{what}: section {m.group(1)} must end its login module with ';'")
        head = body[:-1].split(None, 2)
        if len(head) < 2 or head[1] not in ("required", "requisite", "sufficient", "optional"):
            raise ZooKeeperSecurityError(f"{what}: section {m.group(1)} needs 'LoginModule required key=\"value\";'")
        rest = head[2] if len(head) > 2 else ""
        options = {k: (v[1:-1].replace('\\"', '"') if v.startswith('"') else v) for k, v in _OPTION.findall(rest)}
        leftover = _OPTION.sub("", rest).strip()
        if leftover:
            raise ZooKeeperSecurityError(f"{what}: section {m.group(1)}: cannot parse {leftover[:40]!r}")
        sections[m.group(1)] = options
    if stripped[pos:].strip():
        raise ZooKeeperSecurityError(f"{what}: syntax error near {stripped[pos:].strip()[:40]!r}")
    return sections


def jaas_path(config: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """The JAAS file: the broker property, else ``KAFKATIER_JAAS_CONFIG``, else ``-D...`` in ``KAFKA_OPTS``."""
    env = os.environ if env is None else env
    if config and config.get(JAAS_PROPERTY):
        return config[JAAS_PROPERTY]
    if env.get(JAAS_ENV):
        return env[JAAS_ENV]
    for word in shlex.split(env.get("KAFKA_OPTS", "")):
        if word.startswith(f"-D{JAAS_PROPERTY}="):
            return word.split("=", 1)[1]
    return None


def zk_security(config: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None) -> ZkSecurity:
    """The security of a client: a broker passes its properties (``zookeeper.set.acl``, ``zookeeper.ssl.*``); a
    tool passes none, sets ACLs whenever it authenticates, as Kafka's tools do, and takes its ``zookeeper.ssl.*``
    from the file named by ``KAFKATIER_ZK_TLS_CONFIG``."""
    env = os.environ if env is None else env
    if config is not None:
        tls = zk_tls(config)
    elif env.get(TLS_CONFIG_ENV):
        tls = zk_tls(read_properties(env[TLS_CONFIG_ENV], f"${TLS_CONFIG_ENV}"))
    else:
        tls = None
    return attrs.evolve(_zk_sasl(config, env), tls=tls)


def _zk_sasl(config: Mapping[str, str] | None, env: Mapping[str, str]) -> ZkSecurity:
    path = jaas_path(config, env)
    if config is not None and SET_ACL_PROPERTY in config:
        set_acl = str(config[SET_ACL_PROPERTY]).strip().lower() == "true"
    else:
        set_acl = path is not None
    if path is None:
        if set_acl:
            raise ZooKeeperSecurityError(f"{SET_ACL_PROPERTY}=true needs a JAAS file with a Client section "
                                         f"({JAAS_PROPERTY}, ${JAAS_ENV} or -D{JAAS_PROPERTY}= in $KAFKA_OPTS)")
        return ZkSecurity()
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        raise ZooKeeperSecurityError(f"cannot read the JAAS file {path}: {e.strerror}") from None
    client = parse_jaas(text, f"JAAS file {path}").get("Client")
    if client is None:
        raise ZooKeeperSecurityError(f"JAAS file {path} has no Client section")
    if not client.get("username") or "password" not in client:
        raise ZooKeeperSecurityError(f"JAAS file {path}: the Client section needs username and password")
    return ZkSecurity(username=client["username"], password=client["password"], set_acl=set_acl, jaas_path=path)


def server_jaas(users: Mapping[str, str]) -> str:
    """A JAAS file for a SASL-requiring ZooKeeper server with ``users``, and a ``Client`` section for the first."""
    def q(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
    server = "\n".join(f"    user_{u}={q(p)}" for u, p in users.items())
    first, password = next(iter(users.items()))
    return (f"Server {{\n    org.apache.zookeeper.server.auth.DigestLoginModule required\n{server};\n}};\n"
            f"Client {{\n    org.apache.zookeeper.server.auth.DigestLoginModule required\n"
            f"    username={q(first)}\n    password={q(password)};\n}};\n")


def migrate_acls(client, secure: bool, root: str = "/") -> int:
    """Set Kafka's default ACLs (:func:`default_acls`) on ``root`` and every znode below it, as
    zookeeper-security-migration.sh does; ZooKeeper's own ``/zookeeper`` tree is left alone.  Returns the count."""
    count = 0
    stack = [root]
    while stack:
        path = stack.pop()
        if path == "/zookeeper" or path.startswith("/zookeeper/"):
            continue
        try:
            client.set_acls(path, default_acls(secure, path))
            count += 1
            children = client.get_children(path)
        except NoNodeError:
            continue
        stack.extend((path.rstrip("/") + "/" + c) for c in children)
    return count


def validate_server_jaas(path: str) -> dict[str, str]:
    """The users of a ZooKeeper server's JAAS file (its ``Server`` section's ``user_<name>`` options)."""
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        raise ZooKeeperSecurityError(f"cannot read the JAAS file {path}: {e.strerror}") from None
    server = parse_jaas(text, f"JAAS file {path}").get("Server")
    users = {k[len("user_"):]: v for k, v in (server or {}).items() if k.startswith("user_")}
    if not users:
        raise ZooKeeperSecurityError(f"JAAS file {path} needs a Server section with user_<name>=\"<password>\"")
    return users


def secure_root(client) -> bool:
    """Give the cluster's root znode (``/`` of the chroot) creator-all plus world-read if it is still open:
    ZooKeeper's ``/`` is world-all, and anyone could otherwise delete a top-level leaf such as ``/controller`` or
    create a top-level znode.  Returns whether it changed the ACL."""
    acls, stat = client.get_acls("/")
    if list(acls) != list(OPEN_ACL_UNSAFE):
        return False
    client.set_acls("/", default_acls(True, "/"), version=stat.aversion)
    return True
