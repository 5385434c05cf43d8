"""``kafkatier cluster inject-errors | clock``: request faults (librdkafka-mock style) and clock skew of one broker
of a local cluster.  What each fault does: ``kafkatier/server/fault_injection.py``."""
from __future__ import annotations

import argparse

from kafkatier.common.errors import UsageError


def register(csub) -> None:
    """Add the sub-commands to ``kafkatier cluster``'s parser."""
    ie = csub.add_parser(
        "inject-errors",
        help="inject request faults into one broker: error codes popped one per request (--errors), added latency "
             "(--latency-ms), a lost response (--drop-response-nth) or a closed connection (--close-connection-nth); "
             "--clear removes them")
    ie.add_argument("--data-dir", required=True)
    ie.add_argument("--broker", type=int, required=True)
    ie.add_argument("--api", help="Kafka's API name (Produce, Fetch, ListOffsets, Metadata, StopReplica, "
                                  "LeaderAndIsr, ...) or key")
    what = ie.add_mutually_exclusive_group(required=True)
    what.add_argument("--errors", metavar="ERROR[,ERROR...]",
                      help="error names (NOT_LEADER_OR_FOLLOWER) or codes (6), one per request in order")
    what.add_argument("--latency-ms", type=float, help="delay each answer by this many ms")
    what.add_argument("--drop-response-nth", type=int, metavar="N",
                      help="handle the Nth request (1 = the next) but never answer it")
    what.add_argument("--close-connection-nth", type=int, metavar="N",
                      help="close the connection at the Nth request (1 = the next), without handling it")
    what.add_argument("--clear", action="store_true", help="remove the broker's request faults (of --api only, "
                                                           "when given)")
    ie.add_argument("--count", type=int, help="--errors: repeat the list N times (default 1); --latency-ms: "
                                              "delay N requests (default: until cleared)")
    ie.add_argument("--topic", help="only requests naming this partition; --errors: set that partition's "
                                    "error only")
    ie.add_argument("--partition", type=int)
    ie.add_argument("--no-wait", action="store_true", help="return without waiting for the broker to apply it")
    ie.set_defaults(func=_inject_errors)

    ck = csub.add_parser("clock", help="skew one broker's wall clock (record timestamps, time-based retention and "
                                       "ListOffsets follow it; timers do not)")
    ck.add_argument("--data-dir", required=True)
    ck.add_argument("--broker", type=int, required=True)
    mode = ck.add_mutually_exclusive_group(required=True)
    mode.add_argument("--offset-ms", type=float, help="how far ahead (negative: behind) the clock is")
    mode.add_argument("--reset", action="store_true", help="back to the system clock")
    ck.add_argument("--drift-ppm", type=float, default=0.0,
                    help="the clock gains this many microseconds per second from now on (negative: loses)")
    ck.add_argument("--no-wait", action="store_true")
    ck.set_defaults(func=_clock)


def _manager_and_zk(args):
    from kafkatier.cluster.manager import ClusterManager
    from kafkatier.zk.client import start_client
    m = ClusterManager(args.data_dir)
    m.load()
    m.broker(args.broker)  # UsageError for an unknown broker
    return m, start_client(m.zookeeper, timeout=10.0, connect_timeout=30.0)


def _inject_errors(args: argparse.Namespace) -> int:
    from kafkatier.cluster import request_faults
    from kafkatier.server import fault_injection as fi
    api_key = None
    if args.api is not None:
        try:
            api_key = fi.parse_api(args.api)
        except fi.FaultSpecError as e:
            raise UsageError(str(e)) from None
    if args.clear:
        faults = []
    else:
        if args.api is None:
            raise UsageError("--api is required")
        faults = request_faults.build_faults(args.api, errors=args.errors, latency_ms=args.latency_ms,
                              drop_response_nth=args.drop_response_nth,
                              close_connection_nth=args.close_connection_nth, count=args.count, topic=args.topic,
                              partition=args.partition)
    _, zk = _manager_and_zk(args)
    try:
        if args.clear:
            request_faults.clear_faults(zk, args.broker, api_key, wait=not args.no_wait)
            print(f"broker {args.broker}: request faults cleared"
                  + (f" for {fi.codec.api_name(api_key)}" if api_key is not None else ""))
        else:
            request_faults.add_faults(zk, args.broker, faults, wait=not args.no_wait)
            later = "" if zk.exists(f"/brokers/ids/{args.broker}") else " (not running: in force when it starts)"
            for f in faults:
                print(f"broker {args.broker}: {f.describe()} (fault {f.id}){later}")
    finally:
        zk.stop()
        zk.close()
    return 0


def _clock(args: argparse.Namespace) -> int:
    from kafkatier.cluster import request_faults
    offset, drift = (0.0, 0.0) if args.reset else (args.offset_ms, args.drift_ppm)
    if abs(offset) > 3153600000000 or abs(drift) > 1000000:
        raise UsageError("offset at most 100 years, drift at most 1,000,000 ppm")
    _, zk = _manager_and_zk(args)
    try:
        request_faults.set_clock(zk, args.broker, offset, drift, wait=not args.no_wait)
    finally:
        zk.stop()
        zk.close()
    print(f"broker {args.broker}: clock " + ("reset" if offset == 0 and drift == 0 else
                                             f"offset {offset:+g} ms, drift {drift:+g} ppm"))
    return 0
