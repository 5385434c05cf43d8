"""Encode and decode of one large LeaderAndIsr (default 20,000 partitions, RF 3) through the control channel's
body path, as the controller and a broker do it, with no ZooKeeper:

- **encode**: the controller's request batch builds the message for one broker (``add_leader_and_isr`` for
  every partition, then ``send_requests_to_brokers``; the UpdateMetadata such a round also sends is left out)
  and the body is serialised as a split body is (compact JSON, zlib level 6: ``zk/control_parts.split_body``);
- **decode**: the broker inflates and parses it and turns it into the typed message, checked against the spec
  (``ControlRequestHandler``'s ``decode_request_body``).

Each is printed with its ratio to the raw transport of the same body measured in the same run (JSON + zlib
alone), so load on the machine affects both.  Runs ``--rounds`` times and keeps each step's least CPU time.

    .venv/bin/python benchmarks/control_messages.py [--partitions 20000] [--rounds 5] [--quick]

``--quick``: 2,000 partitions, 2 rounds.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kafkatier.common.structs import BrokerInfo, LeaderAndIsr, TopicPartition  # noqa: E402
from kafkatier.controller.context import ControllerContext, ReplicaAssignment  # noqa: E402
from kafkatier.controller.request_batch import ControllerBrokerRequestBatch  # noqa: E402
from kafkatier.protocol.api_keys import ApiKeys  # noqa: E402
from kafkatier.zk.codecs import new_topic_id  # noqa: E402

try:
    from kafkatier.server.control_request_handler import decode_request_body
except ImportError:  # a tree from before the typed messages (to measure it): dict bodies and their compiled check
    from kafkatier.protocol.control_requests import LeaderAndIsrRequest, body_problem

    def decode_request_body(api_key, version, body):
        problem = body_problem(LeaderAndIsrRequest, version, body)
        if problem:
            raise ValueError(problem)
        return body


def context(partitions: int, per_topic: int = 100) -> ControllerContext:
    ctx = ControllerContext()
    ctx.epoch = 3
    for b in (1, 2, 3):
        ctx.live_brokers[b] = BrokerInfo(b, "127.0.0.1", 9090 + b, epoch=100 + b)
    for t in range(partitions // per_topic):
        topic = f"topic-{t:05d}"
        ctx.topic_ids[topic] = new_topic_id()
        ctx.all_topics.add(topic)
        for p in range(per_topic):
            tp = TopicPartition(topic, p)
            replicas = tuple(1 + (p + i) % 3 for i in range(3))
            ctx.update_assignment(tp, ReplicaAssignment(replicas))
            ctx.partition_leadership[tp] = LeaderAndIsr(replicas[0], 4, replicas, 3, partition_epoch=7)
    return ctx


def build(ctx: ControllerContext):
    sent = []
    batch = ControllerBrokerRequestBatch(1, ctx, lambda *a: sent.append(a) or True)
    batch.new_batch()
    for tp, leader in ctx.partition_leadership.items():
        batch.add_leader_and_isr([2], tp, leader)
    batch.update_metadata_brokers.clear()   # LeaderAndIsr alone
    batch.send_requests_to_brokers(ctx.epoch)
    (_, key, _, version, body, _), = [s for s in sent if s[1] == ApiKeys.LEADER_AND_ISR]
    return version, body


def best(fn, rounds: int):
    """The least CPU time of ``rounds`` calls (process time: other processes on a shared machine count less
    than in wall time), and the last result."""
    out, times = None, []
    for _ in range(rounds):
        gc.collect()   # each step starts from the same heap: no collection owed by the step before
        t0 = time.process_time()
        out = fn()
        times.append(time.process_time() - t0)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2,000 partitions, 2 rounds")
    args = ap.parse_args()
    if args.quick:
        args.partitions, args.rounds = 2000, 2
    ctx = context(args.partitions)

    def serialise(body):
        return zlib.compress(json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode(), 6)

    t_build, (version, body) = best(lambda: build(ctx), args.rounds)
    t_ser, packed = best(lambda: serialise(body), args.rounds)
    t_parse, parsed = best(lambda: json.loads(zlib.decompress(packed)), args.rounds)
    t_typed, _ = best(lambda: decode_request_body(ApiKeys.LEADER_AND_ISR, version, parsed), args.rounds)
    transport = t_ser + t_parse
    encode, decode = t_build + t_ser, t_parse + t_typed
    print(f"LeaderAndIsr v{version}, {args.partitions} partitions, {len(packed)} bytes compressed "
          f"(load {os.getloadavg()[0]:.2f})")
    print(f"  encode  {encode * 1000:8.1f} ms CPU (build {t_build * 1000:.1f} + JSON/zlib {t_ser * 1000:.1f})")
    print(f"  decode  {decode * 1000:8.1f} ms CPU (zlib/JSON {t_parse * 1000:.1f} + typed {t_typed * 1000:.1f})")
    print(f"summary: encode+decode {(encode + decode) * 1000:.1f} ms = {(encode + decode) / transport:.2f} x "
          f"the JSON+zlib transport alone ({transport * 1000:.1f} ms)")


if __name__ == "__main__":
    main()
