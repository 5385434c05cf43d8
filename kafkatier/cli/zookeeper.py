"""``kafkatier zookeeper start|stop|shell|build-image``: run the embedded ZooKeeper and ZooKeeper's own CLI
(zkCli); build the ZooKeeper container image the docker tests use."""
from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from kafkatier.cli.main import UsageError
from kafkatier.logsetup import get_logger
from kafkatier.cluster import embedded_zookeeper as embedded
from kafkatier.cluster.embedded_zookeeper import (CLI_MAIN, DEFAULT_TICK_MS, EmbeddedZooKeeper,
                                                  EmbeddedZooKeeperError)
from kafkatier.zk.security import TLS_CONFIG_ENV, ZooKeeperSecurityError, migrate_acls, validate_server_jaas
from kafkatier.zk.security import jaas_path, zk_security

log = get_logger("zookeeper")

SHELL_JVM_OPTS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "zookeeper", help="run the embedded ZooKeeper, or its shell (zkCli)",
        description="Run a single-node ZooKeeper from the jars bundled with pyspark (Java 17+ needed), "
                    "or ZooKeeper's own shell against any ZooKeeper.")
    sub = parser.add_subparsers(dest="zk_command", metavar="SUBCOMMAND", required=True)

    start = sub.add_parser("start", help="start a ZooKeeper server (foreground unless --detach)")
    start.add_argument("--port", type=int, default=2181, help="client port on 127.0.0.1 (0 = any free port; "
                                                               "default 2181)")
    start.add_argument("--data-dir", required=True, help="directory for zoo.cfg, logs, pid file and data")
    start.add_argument("--detach", action="store_true",
                       help="return once the server serves, leaving it running; prints the connect string")
    start.add_argument("--tick-time-ms", type=int, default=DEFAULT_TICK_MS,
                       help=f"ZooKeeper tickTime (default {DEFAULT_TICK_MS})")
    start.add_argument("--max-session-timeout-ms", type=int, default=60_000,
                       help="largest session timeout the server grants (default 60000)")
    start.add_argument("--wait-timeout", type=float, default=60.0,
                       help="seconds to wait for the server to serve (default 60)")
    start.add_argument("--sasl-jaas-config", metavar="FILE",
                       help="require SASL (DIGEST-MD5) of every client: a JAAS file whose Server section names "
                            "the users (user_<name>=\"<password>\"), as ZooKeeper's java.security.auth.login.config")
    start.add_argument("--tls-keystore", metavar="PEM",
                       help="serve TLS only, on a secureClientPort (no plain client port): the server's PEM "
                            "keystore (PKCS#8 key + certificate chain, e.g. from kafkatier tls make-cert)")
    start.add_argument("--tls-truststore", metavar="PEM", help="with --tls-keystore: the CAs client certificates "
                                                               "must chain to")
    start.add_argument("--tls-client-auth", choices=("need", "want", "none"), default="need",
                       help="ZooKeeper's ssl.clientAuth (default need: every client presents a certificate)")
    start.set_defaults(func=_start)

    migrate = sub.add_parser("security-migration", help="set Kafka's ACLs on every znode, secure or unsecure "
                                                        "(zookeeper-security-migration.sh)",
                             description="Walks the tree under --zookeeper.connect and sets, on every znode, "
                                         "creator-all plus world-read (none on sensitive paths) with 'secure', or "
                                         "world-all with 'unsecure'.  Authenticates with the JAAS Client section "
                                         "of $KAFKATIER_JAAS_CONFIG or -Djava.security.auth.login.config in "
                                         "$KAFKA_OPTS.")
    migrate.add_argument("--zookeeper.acl", dest="zookeeper_acl", required=True, choices=("secure", "unsecure"))
    migrate.add_argument("--zookeeper.connect", dest="zookeeper_connect", required=True, metavar="HOST:PORT[/CHROOT]")
    migrate.add_argument("--zk-tls-config-file", metavar="FILE",
                         help="zookeeper.ssl.* properties for TLS to ZooKeeper (Kafka's option; default "
                              "$KAFKATIER_ZK_TLS_CONFIG)")
    migrate.set_defaults(func=_security_migration)

    stop = sub.add_parser("stop", help="stop the server running from a data directory")
    stop.add_argument("--data-dir", required=True)
    stop.add_argument("--timeout", type=float, default=10.0, help="seconds before SIGKILL (default 10)")
    stop.set_defaults(func=_stop)

    shell = sub.add_parser("shell", help="ZooKeeper's own CLI (org.apache.zookeeper.ZooKeeperMain)",
                           description="Runs zkCli against --zookeeper; with no command it is interactive. "
                                       "Example: kafkatier zookeeper shell --zookeeper 127.0.0.1:2181 "
                                       "get /controller")
    shell.add_argument("--zookeeper", required=True, metavar="HOST:PORT[/CHROOT]")
    shell.add_argument("cmd", nargs=argparse.REMAINDER, help="zkCli command and arguments, e.g. ls /brokers/ids")
    shell.set_defaults(func=_shell)

    build = sub.add_parser("build-image", help="build the ZooKeeper container image (Docker, root)",
                           description="Builds kafkatier/zookeeper:<hash of inputs> with debootstrap (bookworm, "
                                       "headless JRE) and the ZooKeeper jars from pyspark, then docker import; "
                                       "reuses the image when its inputs are unchanged.  Prints the tag.")
    build.add_argument("--rebuild", action="store_true", help="build even if the image exists")
    build.set_defaults(func=_build_image)


def _fail(error: Exception) -> int:
    text = str(error)
    print(text if text.startswith("kafkatier") else f"kafkatier zookeeper: {text}", file=sys.stderr)
    return 1


def _data_dir(value: str) -> Path:
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--data-dir {value} exists and is not a directory")
    return path


def _start(args: argparse.Namespace) -> int:
    if not 0 <= args.port < 65536:
        raise UsageError(f"--port must be in 0..65535, got {args.port}")
    if args.tick_time_ms <= 0:
        raise UsageError(f"--tick-time-ms must be positive, got {args.tick_time_ms}")
    if args.sasl_jaas_config:
        try:
            validate_server_jaas(args.sasl_jaas_config)
        except ZooKeeperSecurityError as e:
            raise UsageError(str(e)) from None
    tls = None
    if args.tls_keystore or args.tls_truststore:
        if not (args.tls_keystore and args.tls_truststore):
            raise UsageError("--tls-keystore and --tls-truststore go together")
        try:
            tls = embedded.ZooKeeperTls(Path(args.tls_keystore).resolve(), Path(args.tls_truststore).resolve(),
                                        args.tls_client_auth)
        except EmbeddedZooKeeperError as e:
            raise UsageError(str(e).removeprefix("kafkatier: ")) from None
    try:
        server = EmbeddedZooKeeper(_data_dir(args.data_dir), port=args.port, tick_time_ms=args.tick_time_ms,
                                   max_session_timeout_ms=args.max_session_timeout_ms,
                                   sasl_jaas_config=args.sasl_jaas_config, tls=tls)
    except EmbeddedZooKeeperError as e:
        return _fail(e)
    if args.detach:
        try:
            server.start_detached(wait_timeout=args.wait_timeout)
        except EmbeddedZooKeeperError as e:
            return _fail(e)
        print(server.connect_string, flush=True)
        return 0
    return _run_foreground(server, args.wait_timeout)


def _security_migration(args: argparse.Namespace) -> int:
    from kafkatier.zk.client import start_client
    import os
    env = dict(os.environ, **({TLS_CONFIG_ENV: args.zk_tls_config_file} if args.zk_tls_config_file else {}))
    try:
        security = zk_security(env=env)
    except ZooKeeperSecurityError as e:
        raise UsageError(str(e)) from None
    if not security.sasl:
        raise UsageError("security-migration needs a ZooKeeper login: a JAAS file with a Client section in "
                         "$KAFKATIER_JAAS_CONFIG or -Djava.security.auth.login.config= in $KAFKA_OPTS")
    try:
        client = start_client(args.zookeeper_connect, timeout=10.0, connect_timeout=30.0, security=security)
    except ConnectionError as e:
        return _fail(e)
    try:
        count = migrate_acls(client, args.zookeeper_acl == "secure")
    finally:
        client.stop()
        client.close()
    print(f"set {args.zookeeper_acl} ACLs on {count} znodes")
    return 0


def _run_foreground(server: EmbeddedZooKeeper, wait_timeout: float) -> int:
    """Serve until SIGTERM/SIGINT (forwarded to java as SIGTERM) or until java exits."""
    stopping = False

    def on_signal(signum, frame) -> None:
        nonlocal stopping
        stopping = True
        server.send_signal(signal.SIGTERM)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        try:
            server.start(wait_timeout=wait_timeout)
        except EmbeddedZooKeeperError as e:
            return 0 if stopping else _fail(e)
        if stopping:  # the signal came before java was spawned
            server.stop()
            return 0
        print(server.connect_string, flush=True)
        log.info("serving in the foreground; stop with Ctrl-C, SIGTERM or "
                 "`kafkatier zookeeper stop --data-dir %s` (log: %s)", server.data_dir, server.log_path)
        rc = server.wait()
        log.info("ZooKeeper exited rc=%s", rc)
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopping or rc in (0, 143, -signal.SIGTERM):
        return 0
    print(f"kafkatier zookeeper: the server exited with status {rc}; see {server.log_path}", file=sys.stderr)
    return 1


def _stop(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir)
    if not data_dir.is_dir():
        print("No zookeeper server to stop", file=sys.stderr)
        return 1
    pid = embedded.stop_data_dir(data_dir, timeout=args.timeout)
    if pid is None:
        print("No zookeeper server to stop", file=sys.stderr)
        return 1
    return 0


def _shell(args: argparse.Namespace) -> int:
    try:
        embedded.parse_connect_string(args.zookeeper)
    except ValueError as e:
        raise UsageError(f"--zookeeper: {e}") from None
    cmd = list(args.cmd)
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    with tempfile.TemporaryDirectory(prefix="kafkatier-zkcli-") as tmp:
        log_config = Path(tmp) / "log4j2.xml"
        log_config.write_text(embedded.log4j2_xml(None, level="ERROR"))
        try:
            argv = embedded.java_command(CLI_MAIN, ["-server", args.zookeeper, *cmd], log_config=log_config,
                                         jvm_opts=SHELL_JVM_OPTS + _shell_security_opts())
        except (EmbeddedZooKeeperError, ZooKeeperSecurityError) as e:
            return _fail(e)
        # Ctrl-C belongs to the shell (same process group); we only wait for it.  A no-op handler rather than
        # SIG_IGN: an ignored signal stays ignored across exec, and java would then keep it ignored.
        previous = signal.signal(signal.SIGINT, lambda signum, frame: None)
        try:
            return subprocess.call(argv)
        finally:
            signal.signal(signal.SIGINT, previous)


def _shell_security_opts() -> tuple[str, ...]:
    """zkCli's system properties for the login and TLS the environment gives the tools (a JAAS file;
    ``$KAFKATIER_ZK_TLS_CONFIG``, its stores as the PEM files kazoo also loads)."""
    opts: list[str] = []
    jaas = jaas_path()
    if jaas:
        # ZooKeeper 3.9's client refuses DIGEST-MD5 in its default FIPS mode
        opts += [f"-Djava.security.auth.login.config={jaas}", "-Dzookeeper.fips-mode=false"]
    tls = zk_security().tls
    if tls is not None:
        opts += ["-Dzookeeper.client.secure=true",
                 "-Dzookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty",
                 f"-Dzookeeper.ssl.hostnameVerification={'true' if tls.check_hostname else 'false'}"]
        if tls.keystore:
            opts += [f"-Dzookeeper.ssl.keyStore.location={tls.keystore}", "-Dzookeeper.ssl.keyStore.type=PEM"]
        if tls.truststore:
            opts += [f"-Dzookeeper.ssl.trustStore.location={tls.truststore}", "-Dzookeeper.ssl.trustStore.type=PEM"]
    return tuple(opts)


def _build_image(args: argparse.Namespace) -> int:
    from kafkatier.testing.docker_engine import DockerUnavailableError
    from kafkatier.testing.zookeeper_image import ImageBuildError, ensure_image

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)
    try:
        result = ensure_image(rebuild=args.rebuild, progress=progress)
    except (DockerUnavailableError, ImageBuildError, EmbeddedZooKeeperError) as e:
        return _fail(e)
    verb = "built" if result.built else "cached"
    progress(f"{verb} {result.tag} in {result.seconds:.1f}s")
    print(result.tag, flush=True)
    return 0
