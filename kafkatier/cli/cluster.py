"""``kafkatier cluster up|down|start-broker|stop-broker|describe|fail-log-dir|restore-log-dir``."""
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
                    help="broker property for every broker (repeatable), kept in each broker's "
                         "DATA_DIR/broker-<id>/server.properties (mode 0600), never on a command line; tiered "
                         "storage is on by default, --override remote.log.storage.system.enable=false turns it off")
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

    f = csub.add_parser("fail-log-dir", help="make a broker's log dir fail like a dead disk (data kept in DIR.failed); "
                                             "the broker takes it offline within a second (KIP-112)")
    f.add_argument("--broker", type=int, required=True)
    f.add_argument("--dir", required=True)
    f.add_argument("--data-dir", required=True)
    f.set_defaults(func=_fail_log_dir)

    r = csub.add_parser("restore-log-dir", help="undo fail-log-dir on disk; the broker uses the dir again once "
                                                "restarted")
    r.add_argument("--broker", type=int, required=True)
    r.add_argument("--dir", required=True)
    r.add_argument("--data-dir", required=True)
    r.set_defaults(func=_restore_log_dir)

    d = csub.add_parser("describe", help="brokers, controller and metrics")
    d.add_argument("--data-dir", required=True)
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=_describe)

    from kafkatier.cli import faults  # inject-errors, clock (request faults and clock skew)
    faults.register(csub)


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
    print(f"broker {args.id} started (pid {pid}): registered and serving after {time.monotonic() - t0:.1f}s "
          f"on port {m.broker(args.id)['port']}")
    return 0


def _stop_broker(args) -> int:
    m = _manager(args)
    m.load()
    m.stop_broker(args.id, kill=args.kill)
    print(f"broker {args.id} stopped")
    return 0


def _fail_log_dir(args) -> int:
    m = _manager(args)
    m.load()
    aside = m.fail_log_dir(args.broker, args.dir)
    print(f"log dir {args.dir} of broker {args.broker} failed (data kept in {aside})")
    return 0


def _restore_log_dir(args) -> int:
    m = _manager(args)
    m.load()
    m.restore_log_dir(args.broker, args.dir)
    print(f"log dir {args.dir} of broker {args.broker} restored; restart the broker to use it again")
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
        if b.get("config_file"):
            props = " ".join(f"{k}={v}" for k, v in sorted((b.get("properties") or {}).items()))
            print(f"  properties {b['config_file']}: {props}")
        fs = s.get("fetch_sessions")
        if fs:  # KIP-227, server/fetch_session.py
            served = fs.get("fetches") or {}
            print(f"  fetch sessions={fs.get('sessions')}/{fs.get('slots')} partitions_cached={fs.get('partitions_cached')} "
                  f"evictions={fs.get('evictions')} fetches_served full={served.get('full')} "
                  f"incremental={served.get('incremental')} sessionless={served.get('sessionless')} "
                  f"session_errors={served.get('error')}")
        if c.get("active"):
            print(f"  controller epoch={c.get('epoch')} live_brokers={c.get('live_brokers')} topics={c.get('topics')} "
                  f"events_processed={c.get('events_processed')} failover_ms={round(c.get('last_failover_ms', 0), 1)} "
                  f"topics_to_be_deleted={c.get('topics_to_be_deleted')}")
            if c.get("last_failover_phases_ms"):
                print("  last failover " + " ".join(f"{k}={v}" for k, v in c["last_failover_phases_ms"].items()))
        ld = s.get("log_dirs") or {}
        for d in ld.get("dirs", []):
            state = "online" if d.get("online") else "OFFLINE"
            free = d.get("usable_bytes", -1)
            print(f"  log dir {d['path']}: {state} free_bytes={free} replicas={d.get('replicas')}")
        for mv in ld.get("moves", []):
            print(f"  move {mv['partition']}: {mv['source_dir']} -> {mv['destination_dir']} "
                  f"bytes_copied={mv['bytes_copied']} offset_lag={mv['offset_lag']} "
                  f"rate={mv['rate_bytes_per_s']:.0f} B/s ({mv['thread']})")
        if ld.get("moves") or (ld.get("throttle_bytes_per_s", LONG_MAX) < LONG_MAX):
            print(f"  move throttle: {_rate(ld.get('throttle_bytes_per_s'))}")
        rf = s.get("request_faults") or {}
        clock = rf.get("clock") or {}
        if clock.get("offset_ms") or clock.get("drift_ppm"):
            print(f"  clock skew: offset {clock['offset_ms']:+g} ms, drift {clock['drift_ppm']:+g} ppm")
        for f in rf.get("faults") or []:
            left = "unbounded" if f.get("remaining") is None else f.get("remaining")
            print(f"  request fault {f['id']}: {f['summary']} remaining={left}")
    return 0


LONG_MAX = (1 << 63) - 1


def _rate(v) -> str:
    return "unlimited" if v is None or v >= LONG_MAX else f"{v} B/s"
