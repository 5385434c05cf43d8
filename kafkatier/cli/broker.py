"""``kafkatier broker start``: run one broker in the foreground."""
from __future__ import annotations


from kafkatier import logsetup


def register(sub) -> None:
    p = sub.add_parser("broker", help="run a broker process")
    bsub = p.add_subparsers(dest="broker_command", metavar="ACTION")
    bsub.required = True
    s = bsub.add_parser("start", help="start a broker in the foreground (SIGTERM stops it cleanly)")
    s.add_argument("--id", type=int, required=True, help="broker.id")
    s.add_argument("--zookeeper", required=True, help="HOST:PORT[/chroot]")
    s.add_argument("--log-dirs", required=True, help="comma-separated log directories (JBOD)")
    s.add_argument("--port", type=int, default=9092, help="PLAINTEXT listener port on 127.0.0.1 (0 = any free)")
    s.add_argument("--remote-storage-dir", default=None, help="directory of the shared file-based remote storage")
    s.add_argument("--rack", default=None)
    s.add_argument("--session-timeout-ms", type=int, default=6000, help="zookeeper.session.timeout.ms")
    s.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="Kafka broker property, e.g. delete.topic.enable=false (repeatable)")
    s.add_argument("--status-file", default=None, help="write a JSON metrics snapshot here every 5 s")
    s.set_defaults(func=_start)


def parse_overrides(items) -> dict:
    from kafkatier.cli.main import UsageError
    out = {}
    for item in items:
        if "=" not in item:
            raise UsageError(f"--override expects KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def build_config(args):
    from kafkatier.server.config import BrokerConfig
    overrides = parse_overrides(args.override)

    def flag(name, default):
        v = overrides.get(name)
        return default if v is None else v.lower() == "true"

    def num(name, default):
        v = overrides.get(name)
        return default if v is None else int(v)

    return BrokerConfig(
        broker_id=args.id, zookeeper_connect=args.zookeeper, log_dirs=args.log_dirs, port=args.port,
        remote_storage_dir=args.remote_storage_dir, rack=args.rack,
        zookeeper_session_timeout_ms=num("zookeeper.session.timeout.ms", args.session_timeout_ms),
        delete_topic_enable=flag("delete.topic.enable", True),
        unclean_leader_election_enable=flag("unclean.leader.election.enable", False),
        min_insync_replicas=num("min.insync.replicas", 1),
        default_replication_factor=num("default.replication.factor", 1),
        num_partitions=num("num.partitions", 1),
        replica_lag_time_max_ms=num("replica.lag.time.max.ms", 30000),
        replica_fetch_wait_max_ms=num("replica.fetch.wait.max.ms", 500),
        replica_fetch_max_bytes=num("replica.fetch.max.bytes", 1048576),
        request_timeout_ms=num("request.timeout.ms", 30000),
        log_retention_check_interval_ms=num("log.retention.check.interval.ms", 300000),
        remote_log_storage_system_enable=flag("remote.log.storage.system.enable", False),
        overrides=overrides)


def _start(args) -> int:
    from kafkatier.server.kafka_server import run_broker
    from kafkatier.zk.broker_registration import BrokerIdConflictError
    logsetup.set_process_tag(f"broker-{args.id}")
    # Missing log dirs are created by the log manager; one that is not a usable directory is taken offline
    # there (KIP-112), so nothing is created or checked here.
    try:
        return run_broker(build_config(args), status_file=args.status_file)
    except BrokerIdConflictError as e:
        logsetup.get_logger("server").error("start-up failed: %s", e)
        return 1
