"""``kafkatier broker start``: run one broker in the foreground."""
from __future__ import annotations

import sys

from kafkatier import logsetup
from kafkatier.logsetup import kv
from kafkatier.server.config import loggable_configs


def register(sub) -> None:
    p = sub.add_parser("broker", help="run a broker process")
    bsub = p.add_subparsers(dest="broker_command", metavar="ACTION", required=True)
    s = bsub.add_parser("start", help="start a broker in the foreground (SIGTERM stops it cleanly)")
    s.add_argument("--id", type=int, required=True, help="broker.id")
    s.add_argument("--zookeeper", required=True, help="HOST:PORT[/chroot]")
    s.add_argument("--log-dirs", required=True, help="comma-separated log directories (JBOD)")
    s.add_argument("--port", type=int, default=9092, help="PLAINTEXT listener port on 127.0.0.1 (0 = any free)")
    s.add_argument("--remote-storage-dir", default=None, help="directory of the shared file-based remote storage")
    s.add_argument("--rack", default=None)
    s.add_argument("--session-timeout-ms", type=int, default=6000, help="zookeeper.session.timeout.ms")
    s.add_argument("--config", default=None, metavar="FILE",
                   help="broker properties file (Kafka's server.properties format), e.g. for JAAS configs and "
                        "passwords, which a command line would show to anyone running ps")
    s.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="Kafka broker property, e.g. delete.topic.enable=false (repeatable; wins over --config)")
    s.add_argument("--status-file", default=None, help="write a JSON metrics snapshot here every 5 s")
    s.add_argument("--any-port-if-taken", action="store_true",
                   help="--port is a preference: if another process holds it, listen on any free port")
    s.add_argument("--port-file", default=None, metavar="FILE",
                   help='once started, write {"port": N, "pid": PID} here (the port it listens on)')
    s.set_defaults(func=_start)


def parse_overrides(items) -> dict:
    from kafkatier.cli.main import UsageError
    out = {}
    for n, item in enumerate(items, start=1):
        if "=" not in item:  # not echoed: it may be a secret with its '=' lost
            raise UsageError(f"--override expects KEY=VALUE, got an argument without '=' (--override number {n})")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def broker_properties(args) -> dict[str, str]:
    """The ``--config`` file's properties with ``--override`` on top (as ``kafka-server-start.sh``)."""
    from kafkatier.admin.bootstrap import BootstrapConfigError
    from kafkatier.cli.main import UsageError
    from kafkatier.server.server_properties import read_server_properties
    props: dict[str, str] = {}
    if args.config is not None:
        try:
            props.update(read_server_properties(args.config))
        except BootstrapConfigError as e:
            raise UsageError(str(e)) from None
    props.update(parse_overrides(args.override))
    return props


def build_config(args):
    """The broker's config: its properties (``--config`` with ``--override`` on top), each setting typed and
    checked by its definition (``BrokerSettingError`` with Kafka's message), and what the command line says
    (``--rack`` wins over ``broker.rack``; ``--session-timeout-ms`` is the default of
    ``zookeeper.session.timeout.ms``)."""
    from kafkatier.server.config import BrokerConfig
    props = broker_properties(args)
    fields = dict(broker_id=args.id, zookeeper_connect=args.zookeeper, log_dirs=args.log_dirs, port=args.port,
                  any_port_if_taken=args.any_port_if_taken, remote_storage_dir=args.remote_storage_dir)
    if args.rack is not None:
        fields["rack"] = args.rack
    if "zookeeper.session.timeout.ms" not in props:
        fields["zookeeper_session_timeout_ms"] = args.session_timeout_ms
    return BrokerConfig.from_props(props, **fields)   # a bad value: BrokerSettingError, the last line of the log


def _start(args) -> int:
    from kafkatier.server.kafka_server import run_broker
    from kafkatier.server.config import ListenerConfigError
    from kafkatier.zk.broker_registration import BrokerIdConflictError
    from kafkatier.zk.client import ZooKeeperAuthError
    from kafkatier.zk.security import ZooKeeperSecurityError
    logsetup.set_process_tag(f"broker-{args.id}")
    config = build_config(args)
    logsetup.get_logger("server").info("broker properties %s", kv(
        config_file=args.config, **loggable_configs(config.overrides)))
    # Missing log dirs are created by the log manager; one that is not a usable directory is taken offline
    # there (KIP-112), so nothing is created or checked here.
    try:
        return run_broker(config, status_file=args.status_file, port_file=args.port_file)
    except (BrokerIdConflictError, ZooKeeperAuthError, ZooKeeperSecurityError, ListenerConfigError) as e:
        logsetup.get_logger("server").error("start-up failed: %s", e)
        print(f"kafkatier: error: {e}", file=sys.stderr)
        return 1
