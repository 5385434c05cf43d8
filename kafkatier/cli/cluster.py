"""``kafkatier cluster up|down|start-broker|stop-broker|describe|fail-log-dir|restore-log-dir``, and the network
faults of a cluster started with ``--links``: ``partition|heal|link-fault|links``."""
from __future__ import annotations

import re

import json
import signal
import sys
import threading
import time


def register(sub) -> None:
    p = sub.add_parser("cluster", help="run a local cluster: embedded ZooKeeper and broker processes")
    csub = p.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)

    up = csub.add_parser("up", help="start ZooKeeper (unless --zookeeper) and the brokers; write DATA_DIR/cluster.json")
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--rack", metavar="ID=RACK,...", default=None,
                    help="broker.rack per broker, e.g. 1=a,2=b,3=c (rack-aware assignment, follower fetching)")
    up.add_argument("--log-dirs-per-broker", type=int, default=2)
    up.add_argument("--data-dir", required=True)
    up.add_argument("--zookeeper", default=None, help="use this ZooKeeper (HOST:PORT) instead of an embedded one")
    up.add_argument("--session-timeout-ms", type=int, default=6000)
    up.add_argument("--zookeeper-sasl", action="store_true",
                    help="start the embedded ZooKeeper with SASL (DIGEST-MD5) required and the brokers with "
                         "zookeeper.set.acl=true: a random password in DATA_DIR/zookeeper-jaas.conf (mode 0600), "
                         "never printed; tools log in with KAFKATIER_JAAS_CONFIG=DATA_DIR/zookeeper-jaas.conf")
    up.add_argument("--zookeeper-tls", action="store_true",
                    help="start the embedded ZooKeeper serving TLS only (mutual TLS, certificates from the test CA "
                         "in DATA_DIR/tls) and the brokers with zookeeper.ssl.*; tools connect with "
                         "KAFKATIER_ZK_TLS_CONFIG=DATA_DIR/zookeeper-tls.properties (combines with --zookeeper-sasl)")
    up.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="broker property for every broker (repeatable), kept in each broker's "
                         "DATA_DIR/broker-<id>/server.properties (mode 0600), never on a command line; tiered "
                         "storage is on by default, --override remote.log.storage.system.enable=false turns it off")
    up.add_argument("--detach", action="store_true", help="return once the cluster is ready")
    up.add_argument("--links", action="store_true",
                    help="run every broker -> broker and broker -> ZooKeeper path through the cluster's link "
                         "process, so that partition / link-fault can cut, stall, slow or throttle it")
    up.add_argument("--tls", action="store_true",
                    help="also give every broker an SSL listener, with a test CA and certificates in DIR/tls and a "
                         "client config DIR/client-ssl.properties (docs/security.md#tls)")
    up.add_argument("--sasl-ssl", action="store_true",
                    help="(implies --tls) a SASL_SSL listener too; SASL settings as for SASL_PLAINTEXT (--override "
                         "sasl.enabled.mechanisms=..., sasl.jaas.config=...)")
    up.add_argument("--client-group", action="append", default=[], metavar="NAME",
                    help="(implies --links) a client group with its own listener on every broker, reached through "
                         "links client:NAME -> broker:N; its bootstrap servers are in describe (repeatable)")
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

    log_dir_commands = (
        ("fail-log-dir", _fail_log_dir, "make a broker's log dir fail like a dead disk (data kept in DIR.failed); the "
                                        "broker takes it offline within a second (KIP-112)"),
        ("restore-log-dir", _restore_log_dir, "undo fail-log-dir on disk; the broker uses the dir again once "
                                              "restarted"))
    for name, func, text in log_dir_commands:
        ld = csub.add_parser(name, help=text)
        ld.add_argument("--broker", type=int, required=True)
        ld.add_argument("--dir", required=True)
        ld.add_argument("--data-dir", required=True)
        ld.set_defaults(func=func)

    d = csub.add_parser("describe", help="brokers, controller and metrics")
    d.add_argument("--data-dir", required=True)
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=_describe)
    _register_links(csub)
    from kafkatier.cli import faults  # inject-errors, clock (request faults and clock skew)
    faults.register(csub)


# --- network faults (cluster/links.py, cluster/link_faults.py) ---------------------------------------------------
def _register_links(csub) -> None:
    from kafkatier.cluster.link_faults import DIRECTIONS, SHAPES
    pa = csub.add_parser("partition", help="cut links by a named shape (isolate, isolate-zookeeper, isolate-leader, "
                                           "halves, random-halves, bridge) or between --from and --to")
    pa.add_argument("--data-dir", required=True)
    pa.add_argument("--shape", choices=[s for s in SHAPES if s != "one-way"], default=None)
    pa.add_argument("--node", type=int, default=None, help="the broker of isolate / isolate-zookeeper")
    pa.add_argument("--partition", default=None, metavar="TOPIC:N", help="the partition of isolate-leader")
    pa.add_argument("--seed", type=int, default=0, help="the shuffle of random-halves")
    pa.add_argument("--from", dest="source", default=None, metavar="NODES",
                    help="comma-separated nodes: broker ids, broker:N, zookeeper[:N], client:GROUP, brokers")
    pa.add_argument("--to", dest="destination", default=None, metavar="NODES")
    pa.add_argument("--one-way", action="store_true",
                    help="with --from/--to: bytes from --from never reach --to; the other way they flow")
    pa.add_argument("--blackhole", action="store_true",
                    help="a silent cut: bytes accepted and thrown away (peers time out) instead of resets")
    pa.set_defaults(func=_partition)

    he = csub.add_parser("heal", help="remove link faults (all, or of --link / --from --to / --fault); a link "
                                      "with no fault is left as it is; a dead link process is started again")
    he.add_argument("--data-dir", required=True)
    he.add_argument("--link", action="append", default=[], metavar="SOURCE->DESTINATION")
    he.add_argument("--from", dest="source", default=None, metavar="NODES")
    he.add_argument("--to", dest="destination", default=None, metavar="NODES")
    he.add_argument("--fault", action="append", default=[], metavar="KIND",
                    help="heal only this kind: partition, blackhole, latency, bandwidth (repeatable)")
    he.set_defaults(func=_heal)

    lf = csub.add_parser("link-fault", help="latency, bandwidth, blackhole or partition on the links from --from "
                                            "to --to")
    lf.add_argument("--data-dir", required=True)
    lf.add_argument("--from", dest="source", required=True, metavar="NODES")
    lf.add_argument("--to", dest="destination", required=True, metavar="NODES")
    lf.add_argument("--both-ways", action="store_true", help="also the links from --to to --from")
    lf.add_argument("--direction", choices=DIRECTIONS, default="both",
                    help="bytes towards the destination (forward), the answers (backward), or both (default)")
    kind = lf.add_mutually_exclusive_group(required=True)
    kind.add_argument("--latency-ms", type=float, default=None, help="delay per direction (a round trip "
                                                                      "through a link slowed both ways pays it twice)")
    kind.add_argument("--bandwidth", default=None, metavar="RATE", help="e.g. 1MB/s, 512KiB/s, 250000 (bytes/s)")
    kind.add_argument("--blackhole", action="store_true")
    kind.add_argument("--partition", action="store_true")
    lf.add_argument("--jitter-ms", type=float, default=0.0, help="with --latency-ms: ± uniform jitter")
    lf.set_defaults(func=_link_fault)

    li = csub.add_parser("links", help="the link process: serve (its main), start, stop")
    lsub = li.add_subparsers(dest="links_command", metavar="ACTION", required=True)
    for name, hlp in (("serve", "run the link process in the foreground (what cluster up --links starts)"),
                      ("start", "start the link process if it is not running"),
                      ("stop", "stop the link process: every path through it is cut like a cable")):
        c = lsub.add_parser(name, help=hlp)
        c.add_argument("--data-dir", required=True)
        if name == "stop":
            c.add_argument("--kill", action="store_true")
        c.set_defaults(func=_links_command)


def _link_usage(fn):
    """A link fault error (unknown broker, shape, value) as the CLI's one line and exit 2."""
    from kafkatier.cluster.link_faults import LinkFaultError
    from kafkatier.common.errors import UsageError
    try:
        return fn()
    except LinkFaultError as e:
        raise UsageError(str(e)) from None


def _partition(args) -> int:
    from kafkatier.cluster.link_faults import BLACKHOLE, PARTITION, LinkFaultError
    m = _manager(args)
    m.load()
    lm = m.links

    def plan():
        kind = BLACKHOLE if args.blackhole else PARTITION
        if args.node is not None and args.shape not in ("isolate", "isolate-zookeeper"):
            raise LinkFaultError("--node goes with --shape isolate or isolate-zookeeper")
        if args.partition is not None and args.shape != "isolate-leader":
            raise LinkFaultError("--partition goes with --shape isolate-leader")
        if args.shape is not None:
            if args.source or args.destination or args.one_way:
                raise LinkFaultError("--shape and --from/--to/--one-way are exclusive")
            tp = None
            if args.partition is not None:
                topic, _, n = args.partition.rpartition(":")
                if not topic or not n.isdigit():
                    raise LinkFaultError(f"--partition expects TOPIC:N, got {args.partition!r}")
                tp = (topic, int(n))
            return lm.shape_plan(args.shape, node=args.node, topic_partition=tp, seed=args.seed, kind=kind)
        if not (args.source and args.destination):
            raise LinkFaultError("give --shape, or --from and --to")
        return lm.cut_plan(args.source, args.destination, args.one_way, kind)
    p = _link_usage(plan)
    _link_usage(lambda: lm.apply(p))
    print(f"{p.description}: {len(p.link_names())} links faulted ({', '.join(p.link_names())})")
    return 0


def _heal(args) -> int:
    from kafkatier.cluster.link_faults import LinkFaultError, links_between, resolve_nodes
    m = _manager(args)
    m.load()

    def heal():
        table = m.links.table()
        names = list(args.link)
        if args.source or args.destination:
            if not (args.source and args.destination):
                raise LinkFaultError("--from and --to go together")
            names += links_between(table, resolve_nodes(table, args.source), resolve_nodes(table, args.destination),
                                   both_ways=True)
        for n in names:
            table.link(n)
        return m.links.heal(names or None, kinds=args.fault or None)
    healed = _link_usage(heal)
    print(f"healed {len(healed)} links" + (f": {', '.join(healed)}" if healed else " (none had a fault)"))
    return 0


def _link_fault(args) -> int:
    from kafkatier.cluster.link_faults import (BANDWIDTH, BLACKHOLE, LATENCY, PARTITION, LinkFault, LinkFaultError,
                                               parse_rate)
    m = _manager(args)
    m.load()

    def plan():
        if args.jitter_ms and args.latency_ms is None:
            raise LinkFaultError("--jitter-ms goes with --latency-ms")
        if args.latency_ms is not None:
            f = LinkFault(LATENCY, args.direction, latency_ms=args.latency_ms, jitter_ms=args.jitter_ms)
        elif args.bandwidth is not None:
            f = LinkFault(BANDWIDTH, args.direction, rate_bytes_per_s=parse_rate(args.bandwidth))
        elif args.blackhole:
            f = LinkFault(BLACKHOLE, args.direction)
        else:
            f = LinkFault(PARTITION, args.direction)
        return m.links.fault_plan(args.source, args.destination, f, args.both_ways)
    p = _link_usage(plan)
    _link_usage(lambda: m.links.apply(p))
    print(f"{p.description}: {', '.join(p.link_names())}")
    return 0


def _links_command(args) -> int:
    if args.links_command == "serve":
        from kafkatier.cluster.links import serve
        return serve(args.data_dir)
    m = _manager(args)
    m.load()
    if not m.state.get("links"):
        from kafkatier.common.errors import UsageError
        raise UsageError(f"the cluster at {m.data_dir} runs without links (start it with --links)")
    if args.links_command == "start":
        t = m.links.start()
        print(f"link process serving {len(t.links)} links (pid {t.pid})")
    else:
        m.links.stop(kill=args.kill)
        print("link process stopped")
    return 0


def _manager(args):
    from kafkatier.cluster.manager import ClusterManager
    return ClusterManager(args.data_dir)


_RACK = re.compile(r"^[a-zA-Z0-9._-]+$")


def parse_racks(text: str) -> dict[int, str]:
    """``1=a,2=b,3=c`` -> ``{1: "a", 2: "b", 3: "c"}``; bad syntax or a rack with a character outside
    ``[a-zA-Z0-9._-]`` raises :class:`UsageError` (one line, exit 2)."""
    from kafkatier.cli.main import UsageError
    out: dict[int, str] = {}
    for item in (i.strip() for i in text.split(",")):
        bid, sep, rack = item.partition("=")
        if not sep or not bid.strip().isdigit():
            raise UsageError(f"--rack expects BROKER_ID=RACK items separated by commas, got {item!r}")
        rack = rack.strip()
        if not _RACK.match(rack):
            raise UsageError(f"--rack: invalid rack {rack!r} for broker {bid.strip()}: "
                             "a rack is made of ASCII letters, digits, '.', '_' and '-'")
        if int(bid) in out:
            raise UsageError(f"--rack names broker {int(bid)} twice")
        out[int(bid)] = rack
    return out


def _up(args) -> int:
    from kafkatier.cli.broker import parse_overrides
    from kafkatier.cli.main import UsageError
    from kafkatier.cluster.manager import CLUSTER_UP_DEFAULTS, BrokerStartError
    from kafkatier.waiting import WaitTimeout
    from kafkatier.cluster.embedded_zookeeper import ZooKeeperAlreadyRunningError
    if args.brokers < 1:
        raise UsageError("--brokers must be at least 1")
    if args.log_dirs_per_broker < 1:
        raise UsageError("--log-dirs-per-broker must be at least 1")
    from kafkatier.cluster.link_faults import check_client_group
    for g in args.client_group:
        _link_usage(lambda g=g: check_client_group(g))
    racks = parse_racks(args.rack) if args.rack else None
    m = _manager(args)
    try:
        state = m.up(racks=racks, brokers=args.brokers, log_dirs_per_broker=args.log_dirs_per_broker, zookeeper=args.zookeeper,
                     session_timeout_ms=args.session_timeout_ms,
                     overrides={**CLUSTER_UP_DEFAULTS, **parse_overrides(args.override)}, links=args.links,
                      client_groups=args.client_group, zookeeper_sasl=args.zookeeper_sasl,
                      zookeeper_tls=args.zookeeper_tls,
                      tls=args.tls or args.sasl_ssl, sasl_ssl=args.sasl_ssl)
    except (BrokerStartError, WaitTimeout) as e:
        if m.state:
            m.down()
        print(f"kafkatier cluster up: {e}", file=sys.stderr)
        return 1
    except ZooKeeperAlreadyRunningError:
        # the embedded ZooKeeper of a cluster that is up: the advice is the cluster's, not the ZooKeeper's
        print(f"kafkatier cluster up: a cluster is already running from {m.data_dir}; stop it with: "
              f"kafkatier cluster down --data-dir {args.data_dir}", file=sys.stderr)
        return 1
    except BaseException:
        if m.state:
            m.down()
        raise
    print(f"cluster ready: zookeeper={state['zookeeper']} bootstrap_servers={state['bootstrap_servers']}")
    for g, servers in (state.get("client_groups") or {}).items():
        print(f"client group {g}: bootstrap_servers={servers}")
    _print_tls_listeners(state.get("tls"), with_ca=False)
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
        lc = s.get("log_cleaner")
        if lc and lc.get("enabled"):  # log/log_cleaner.py
            for t in lc.get("threads") or []:
                print(f"  log cleaner thread {t['thread']}: logs_cleaned={t['logs_cleaned']} "
                      f"bytes_read={t['bytes_read']} bytes_written={t['bytes_written']} "
                      f"time_spent_s={t['time_spent_s']} max_dirty_percent={lc.get('max_dirty_percent')} "
                      f"last_log={t.get('last_log')} errors={t.get('errors')}")
        rf = s.get("request_faults") or {}
        clock = rf.get("clock") or {}
        if clock.get("offset_ms") or clock.get("drift_ppm"):
            print(f"  clock skew: offset {clock['offset_ms']:+g} ms, drift {clock['drift_ppm']:+g} ppm")
        for f in rf.get("faults") or []:
            left = "unbounded" if f.get("remaining") is None else f.get("remaining")
            print(f"  request fault {f['id']}: {f['summary']} remaining={left}")
    _print_tls_listeners(st.get("tls"), with_ca=True)
    if st.get("links"):
        for g, servers in (st.get("client_groups") or {}).items():
            print(f"Client group {g}: bootstrap_servers={servers}")
        _describe_links(st["links"])
    return 0


def _print_tls_listeners(tls: dict | None, with_ca: bool) -> None:
    """The SSL (and SASL_SSL) listeners' bootstrap servers and the client config of a cluster with ``--tls``."""
    if not tls:
        return
    print(f"SSL listeners: bootstrap_servers={tls['bootstrap_servers']} client_config={tls['client_config']}"
          + (f" ca={tls['ca']}" if with_ca else ""))
    if tls.get("sasl_ssl_bootstrap_servers"):
        print(f"SASL_SSL listeners: bootstrap_servers={tls['sasl_ssl_bootstrap_servers']}")


def _describe_links(links: dict) -> None:
    state = f"serving (pid {links['pid']})" if links["running"] else "DOWN (every path through it is cut)"
    faulty = [li for li in links["links"] if li["faults"]]
    print(f"Links: {len(links['links'])} {state}, {len(faulty)} with faults")
    for li in links["links"]:
        st = li.get("stats") or {}
        conns = f" connections={st['connections']}" if st else ""
        print(f"  {li['name']}: {li['address']} -> {li['upstream']}{conns}"
              + (f"  FAULT {li['fault_text']}" if li["faults"] else ""))


LONG_MAX = (1 << 63) - 1


def _rate(v) -> str:
    return "unlimited" if v is None or v >= LONG_MAX else f"{v} B/s"
