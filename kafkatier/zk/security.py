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
"""
from __future__ import annotations

import os
import re
import shlex
from typing import Mapping

import attrs
from kazoo.exceptions import NoNodeError
from kazoo.security import ACL, CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

JAAS_PROPERTY = "java.security.auth.login.config"
JAAS_ENV = "KAFKATIER_JAAS_CONFIG"
SET_ACL_PROPERTY = "zookeeper.set.acl"

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
class ZkSecurity:
    """How a kazoo client authenticates (``username``/``password``: SASL DIGEST-MD5) and whether it sets ACLs."""

    username: str | None = None
    password: str | None = attrs.field(default=None, repr=False)
    set_acl: bool = False
    jaas_path: str | None = None

    @property
    def sasl(self) -> bool:
        return self.username is not None

    def kazoo_kwargs(self) -> dict:
        if not self.sasl:
            return {}
        return {"sasl_options": {"mechanism": "DIGEST-MD5", "username": self.username, "password": self.password}}


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
    """The security of a client: a broker passes its properties (``zookeeper.set.acl``); a tool passes none and
    sets ACLs whenever it authenticates, as Kafka's tools do."""
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
