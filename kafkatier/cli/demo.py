"""``kafkatier demo``: the main job.  Starts a 3-broker cluster on an embedded ZooKeeper, creates a replicated
topic, produces and consumes through kafka-python with acks=all, kills the controller with SIGKILL and shows
the failover, restarts the broker, deletes the topic, and tears everything down."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time


def register(sub) -> None:
    p = sub.add_parser("demo", help="run the end-to-end demonstration on a local 3-broker cluster")
    p.add_argument("--data-dir", default=None, help="keep the cluster's files here (default: a temporary dir)")
    p.add_argument("--records", type=int, default=2000, help="records to produce (default 2000)")
    p.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    p.set_defaults(func=_demo)


class _Steps:
    def __init__(self):
        self.n = 0
        self.t0 = time.monotonic()

    def step(self, title: str) -> None:
        self.n += 1
        print(f"\n[{self.n}] {title}  (t={time.monotonic() - self.t0:.1f}s)", flush=True)

    @staticmethod
    def info(text: str) -> None:
        print(f"    {text}", flush=True)


def _demo(args) -> int:
    from kafkatier.cluster.manager import ClusterManager
    from kafkatier.waiting import wait_for
    from kafkatier.zk.client import start_client

    s = _Steps()
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="kafkatier-demo-")
    m = ClusterManager(data_dir)
    zk = None
    ok = False
    try:
        s.step("Starting an embedded ZooKeeper and 3 brokers (2 log dirs each)")
        m.up(brokers=3, log_dirs_per_broker=2)
        s.info(f"zookeeper={m.zookeeper} bootstrap_servers={m.bootstrap_servers}")
        zk = start_client(m.zookeeper)
        ctrl = json.loads(zk.get("/controller")[0])
        s.info(f"controller: broker {ctrl['brokerid']}, /controller_epoch={zk.get('/controller_epoch')[0].decode()}")

        s.step("Creating topic 'demo' (3 partitions, replication factor 3, min.insync.replicas=2)")
        from kafka.admin import KafkaAdminClient, NewTopic
        admin = KafkaAdminClient(bootstrap_servers=m.bootstrap_servers, client_id="kafkatier-demo")
        admin.create_topics([NewTopic("demo", 3, 3, topic_configs={"min.insync.replicas": "2"})])
        wait_for(lambda: all(json.loads(zk.get(f"/brokers/topics/demo/partitions/{p}/state")[0])["leader"] >= 0
                             for p in range(3)), 30, message="leaders", ignore=(Exception,))
        for p in range(3):
            st = json.loads(zk.get(f"/brokers/topics/demo/partitions/{p}/state")[0])
            s.info(f"demo-{p}: leader={st['leader']} isr={st['isr']} leader_epoch={st['leader_epoch']}")
        admin.close()

        s.step(f"Producing {args.records} records with acks=all (kafka-python)")
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition
        producer = KafkaProducer(bootstrap_servers=m.bootstrap_servers, acks="all", linger_ms=5,
                                 retries=10, max_in_flight_requests_per_connection=1)
        t = time.monotonic()
        futures = [producer.send("demo", key=str(i % 3).encode(), value=f"record-{i}".encode())
                   for i in range(args.records)]
        producer.flush()
        acked = sum(1 for f in futures if f.succeeded())
        s.info(f"acknowledged {acked}/{args.records} in {time.monotonic() - t:.2f}s")

        s.step(f"Killing the controller (broker {ctrl['brokerid']}) with SIGKILL")
        old = ctrl["brokerid"]
        t = time.monotonic()
        m.kill_broker(old)

        def new_controller():
            try:
                b = json.loads(zk.get("/controller")[0])["brokerid"]
                return b if b != old else None
            except Exception:  # noqa: BLE001
                return None
        new = wait_for(new_controller, 30, message="a new controller")
        s.info(f"broker {new} became controller after {time.monotonic() - t:.2f}s, "
               f"/controller_epoch={zk.get('/controller_epoch')[0].decode()}")
        wait_for(lambda: all(json.loads(zk.get(f"/brokers/topics/demo/partitions/{p}/state")[0])["leader"] not in (old, -1)
                             for p in range(3)), 30, message="new leaders")
        for p in range(3):
            st = json.loads(zk.get(f"/brokers/topics/demo/partitions/{p}/state")[0])
            s.info(f"demo-{p}: leader={st['leader']} isr={st['isr']} leader_epoch={st['leader_epoch']}")

        s.step("Consuming everything back from the surviving brokers")
        consumer = KafkaConsumer(bootstrap_servers=m.bootstrap_servers, enable_auto_commit=False,
                                 auto_offset_reset="earliest", consumer_timeout_ms=10000)
        tps = [TopicPartition("demo", p) for p in range(3)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        seen = set()
        for msg in consumer:
            seen.add(msg.value)
            if len(seen) >= acked:
                break
        consumer.close()
        s.info(f"consumed {len(seen)} distinct records; all acknowledged present: "
               f"{all(f'record-{i}'.encode() in seen for i, f in enumerate(futures) if f.succeeded())}")
        producer.close()

        s.step(f"Restarting broker {old}; it rejoins with a new broker epoch")
        m.start_broker(old)
        s.info(f"/brokers/ids/{old} czxid={zk.exists(f'/brokers/ids/{old}').czxid}")

        s.step("Deleting topic 'demo'")
        admin = KafkaAdminClient(bootstrap_servers=m.bootstrap_servers, client_id="kafkatier-demo")
        admin.delete_topics(["demo"])
        admin.close()
        wait_for(lambda: zk.exists("/brokers/topics/demo") is None and zk.exists("/admin/delete_topics/demo") is None,
                 60, message="deletion")
        s.info("/brokers/topics/demo, /config/topics/demo and /admin/delete_topics/demo are gone")
        ok = True
    finally:
        if zk is not None:
            zk.stop()
            zk.close()
        if not args.keep:
            s.step("Stopping the cluster")
            m.down() if m.state else None
            if not args.data_dir:
                shutil.rmtree(data_dir, ignore_errors=True)
        else:
            print(f"\ncluster left running; stop it with: kafkatier cluster down --data-dir {data_dir}")
    print("\ndemo " + ("completed" if ok else "FAILED"))
    return 0 if ok else 1
