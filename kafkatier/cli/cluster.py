"""``kafkatier cluster up|down|start-broker|stop-broker|describe``."""
from __future__ import annotations

import json
import signal
import sys
import threading
import time


def register(sub) -> None:
    p = sub.add_parser("cluster", help="run a local cluster: embedded ZooKeeper and broker processes")
    csub = p.add_subparsers(dest="cluster_command", metavar="ACTION")
    csub.required = True

    up = csub.add_parser("up", help="start ZooKeeper (unless --zookeeper) and the brokers; write DATA_DIR/cluster.json")
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--log-dirs-per-broker", type=int, default=2)
    up.add_argument("--data-dir", required=True)
    up.add_argument("--zookeeper", default=None, help="use this ZooKeeper (HOST:PORT) instead of an embedded one")
    up.add_argument("--session-timeout-ms", type=int, default=6000)
    up.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="broker property for every broker (repeatable); tiered storage is on by default, "
                         "--override remote.log.storage.system.enable=false turns it off")
    up.add_argument("--detach", action="store_true", help="return once the cluster is ready")
    up.set_defaults(func=_up)

    down = csub.add_parser("down", help="stop every broker and the embedded ZooKeeper")
    down.add_argument("--data-dir", required=True)
    down.set_defaults(func=_down)

    sb = csub.add_parser("start-broker", help="restart one broker with its original settings; returns once it is "
                                              "registered and serving (after a kill -9, once the old "
                                              "registration's ZooKeeper session has expired)")
    sb.add_argument("--id", type=int, required=True)
    sb.add_argument("--data-dir", required=True)
    sb.add_argument("--timeout", type=float, default=60.0,
                    help="seconds to wait until the broker is registered and serving (default 60)")
    sb.set_defaults(func=_start_broker)

    st = csub.add_parser("stop-broker", help="stop one broker (SIGTERM, or SIGKILL with --kill)")
    st.add_argument("--id", type=int, required=True)
    st.add_argument("--data-dir", required=True)
    st.add_argument("--kill", action="store_true")
    st.set_defaults(func=_stop_broker)

    d = csub.add_parser("describe", help="brokers, controller and metrics")
    d.add_argument("--data-dir", required=True)
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=_describe)


def _manager(args):
    from kafkatier.cluster.manager import ClusterManager
    return ClusterManager(args.data_dir)


def _up(args) -> int:
    from kafkatier.cli.broker import parse_overrides
    from kafkatier.cli.main import UsageError
    from kafkatier.cluster.manager import CLUSTER_UP_DEFAULTS, BrokerStartError
    from kafkatier.waiting import WaitTimeout
    if args.brokers < 1:
        raise UsageError("--brokers must be at least 1")
    if args.log_dirs_per_broker < 1:
        raise UsageError("--log-dirs-per-broker must be at least 1")
    m = _manager(args)
    try:
        state = m.up(brokers=args.brokers, log_dirs_per_broker=args.log_dirs_per_broker, zookeeper=args.zookeeper,
                     session_timeout_ms=args.session_timeout_ms,
                     overrides={**CLUSTER_UP_DEFAULTS, **parse_overrides(args.override)})
    except (BrokerStartError, WaitTimeout) as e:
        if m.state:
            m.down()
        print(f"kafkatier cluster up: {e}", file=sys.stderr)
        return 1
    except BaseException:
        if m.state:
            m.down()
        raise
    print(f"cluster ready: zookeeper={state['zookeeper']} bootstrap_servers={state['bootstrap_servers']}")
    print(f"cluster file: {m.cluster_file}")
    if args.detach:
        return 0
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    print("running; press Ctrl-C to stop")
    stop.wait()
    m.down()
    return 0


def _down(args) -> int:
    m = _manager(args)
    m.load()
    m.down()
    print("cluster stopped")
    return 0


def _start_broker(args) -> int:
    from kafkatier.cluster.manager import BrokerStartError
    from kafkatier.waiting import WaitTimeout
    m = _manager(args)
    m.load()
    t0 = time.monotonic()
    try:
        pid = m.start_broker(args.id, timeout=args.timeout)
    except (BrokerStartError, WaitTimeout) as e:
        print(f"kafkatier cluster start-broker: {e}", file=sys.stderr)
        return 1
    print(f"broker {args.id} started (pid {pid}): registered and serving after {time.monotonic() - t0:.1f}s")
    return 0


def _stop_broker(args) -> int:
    m = _manager(args)
    m.load()
    m.stop_broker(args.id, kill=args.kill)
    print(f"broker {args.id} stopped")
    return 0


def _describe(args) -> int:
    m = _manager(args)
    m.load()
    st = m.status()
    if args.json:
        print(json.dumps(st, indent=2, default=str))
        return 0
    print(f"ZooKeeper:          {st['zookeeper']}")
    print(f"Bootstrap servers:  {st['bootstrap_servers']}")
    for b in st["brokers"]:
        s = b.get("status") or {}
        c = s.get("controller") or {}
        role = "controller" if c.get("active") else "broker"
        print(f"Broker {b['id']}: port={b['port']} pid={b['pid']} alive={b['alive']} role={role} "
              f"epoch={s.get('broker_epoch')} partitions={len(s.get('partitions') or [])}")
        if c.get("active"):
            print(f"  controller epoch={c.get('epoch')} live_brokers={c.get('live_brokers')} topics={c.get('topics')} "
                  f"events_processed={c.get('events_processed')} failover_ms={round(c.get('last_failover_ms', 0), 1)} "
                  f"topics_to_be_deleted={c.get('topics_to_be_deleted')}")
    return 0
