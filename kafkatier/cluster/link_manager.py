"""LinkManager: the commands' side of a cluster's links -- create the table, start and stop the link process
(``cluster/links.py``), apply and heal faults, read what is in force.  Used by ``ClusterManager``, the CLI, the
pytest plugin and the scenario engine.

Every change is made to the state file under its lock, recorded in ``links/faults.jsonl``, and then the process
is told to reload; the call returns once the process answers with the new generation (the fault is in force).
If the process is down, the change waits in the file: :meth:`LinkManager.heal` starts it again (a killed link
process is a cut cable, and healing mends cables).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import attrs

from kafkatier.cluster.link_faults import (BLACKHOLE, KINDS, PARTITION, Link, LinkFault, LinkFaultError,
                                           LinkFaultPlan, LinkTable, cut, link_name, links_between, one_way,
                                           resolve_nodes, shape_faults)
from kafkatier.cluster.link_state import LinkStateFile
from kafkatier.logsetup import get_logger, kv
from kafkatier.waiting import wait_for
from kafkatier.cluster.embedded_zookeeper import pid_alive

log = get_logger("cluster.links")

CONTROL_TIMEOUT_S = 10.0


class LinkProcessError(RuntimeError):
    """The link process did not start, or did not take a change in time."""


class LinkManager:
    """``partition_replicas(topic, partition) -> (leader, replicas)``: where ``isolate-leader`` reads them
    (``ClusterManager.partition_replicas``, from ZooKeeper)."""

    def __init__(self, data_dir: str, partition_replicas=None):
        self.data_dir = os.path.abspath(data_dir)
        self.state = LinkStateFile(self.data_dir)
        self.partition_replicas = partition_replicas
        self._proc: subprocess.Popen | None = None

    @property
    def enabled(self) -> bool:
        return self.state.exists()

    def table(self) -> LinkTable:
        if not self.state.exists():
            raise LinkFaultError(f"the cluster at {self.data_dir} runs without links (start it with --links)")
        return self.state.read()

    # --- set-up ---------------------------------------------------------------------------------------------
    def create(self, links: list[Link]) -> LinkTable:
        """Write the table of a new cluster's links (ports 0: the process binds and records them)."""
        names = [li.name for li in links]
        if len(set(names)) != len(names):
            raise LinkFaultError("duplicate link names")
        table = LinkTable(tuple(links))
        with self.state.locked():
            self.state.write(table)
        return table

    def endpoint(self, source: str, destination: str) -> str:
        return self.table().link(link_name(source, destination)).address

    def running(self) -> bool:
        if not self.state.exists():
            return False
        pid = self.table().pid
        return bool(pid) and pid_alive(pid) and self._ask({"op": "ping"}, timeout=2.0) is not None

    def start(self, timeout: float = 20.0) -> LinkTable:
        """Start the link process (unless one serves); return once every link has its port and it answers."""
        if self.running():
            return self.table()
        os.makedirs(os.path.join(self.data_dir, "logs"), exist_ok=True)
        logf = open(os.path.join(self.data_dir, "logs", "links.log"), "ab")
        env = dict(os.environ, KAFKATIER_PROCESS="links", PYTHONUNBUFFERED="1")
        proc = subprocess.Popen([sys.executable, "-m", "kafkatier", "cluster", "links", "serve",
                                 "--data-dir", self.data_dir], stdout=logf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, env=env)
        logf.close()
        self._proc = proc

        def serving() -> bool:
            if proc.poll() is not None:
                raise LinkProcessError(f"the link process exited with status {proc.returncode} "
                                       f"(log: {self.data_dir}/logs/links.log)")
            t = self.table()
            return t.pid == proc.pid and all(li.port for li in t.links) and self._ask({"op": "ping"}, 1.0) is not None
        wait_for(serving, timeout, interval=0.05, message="the link process to bind its ports")
        log.info("link process started %s", kv(pid=proc.pid, links=len(self.table().links)))
        return self.table()

    def stop(self, kill: bool = False, timeout: float = 10.0) -> None:
        if not self.state.exists():
            return
        pid = self.table().pid
        if not pid or not pid_alive(pid):
            return
        os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
        proc = self._proc if self._proc is not None and self._proc.pid == pid else None
        try:
            wait_for(lambda: (proc.poll() is not None) if proc else not pid_alive(pid), timeout,
                     message="the link process to stop")
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
        log.info("link process stopped %s", kv(pid=pid, signal="KILL" if kill else "TERM"))

    # --- faults ---------------------------------------------------------------------------------------------
    def apply(self, plan: LinkFaultPlan, by: str = "cli") -> LinkTable:
        """Add the plan's faults; in force when this returns (or, with the process down, once it starts)."""
        if not plan.faults:
            raise LinkFaultError(f"no link to fault: {plan.description}")
        with self.state.locked():
            table = self.state.read()
            changed: dict[str, Link] = {}
            for name, fault in plan.faults:
                changed[name] = changed.get(name, table.link(name)).with_fault(fault)
            table = table.replace(changed)
            self.state.write(table)
        self.state.record({"at": time.time(), "action": "apply", "by": by, "description": plan.description,
                           "faults": {n: [f.describe() for f in changed[n].faults] for n in sorted(changed)}})
        log.info("link faults applied %s", kv(what=plan.description, links=len(changed)))
        self._reload(table.generation)
        return table

    # --- the faults every interface offers (CLI, pytest plugin, scenario) --------------------------------------
    def shape_plan(self, shape: str, node: int | None = None, topic_partition: tuple[str, int] | None = None,
                   seed: int = 0, kind: str = PARTITION) -> LinkFaultPlan:
        leader, followers = None, []
        if shape == "isolate-leader":
            if topic_partition is None:
                raise LinkFaultError("shape isolate-leader needs a partition (TOPIC:N)")
            if self.partition_replicas is None:
                raise LinkFaultError("isolate-leader needs the cluster's ZooKeeper")
            leader, replicas = self.partition_replicas(*topic_partition)
            followers = [r for r in replicas if r != leader]
        return shape_faults(self.table(), shape, node=node, leader=leader, followers=followers, seed=seed,
                            kind=kind, now=time.time())

    def cut_plan(self, sources, destinations, one_way_only: bool = False, kind: str = PARTITION) -> LinkFaultPlan:
        """Cut every link between ``sources`` and ``destinations`` (node texts, see ``resolve_nodes``); with
        ``one_way_only``, only the bytes from ``sources`` to ``destinations`` are dropped."""
        table = self.table()
        a, b = resolve_nodes(table, sources), resolve_nodes(table, destinations)
        if one_way_only:
            return LinkFaultPlan(tuple(one_way(table, a, b, time.time())), f"{sorted(a)} cannot reach {sorted(b)}")
        return LinkFaultPlan(tuple(cut(table, a, b, kind, time.time())),
                             f"{sorted(a)} cut from {sorted(b)}" + (" (blackhole)" if kind == BLACKHOLE else ""))

    def fault_plan(self, sources, destinations, fault: LinkFault, both_ways: bool = False) -> LinkFaultPlan:
        table = self.table()
        names = links_between(table, resolve_nodes(table, sources), resolve_nodes(table, destinations), both_ways)
        fault = attrs.evolve(fault, applied_at=time.time())
        return LinkFaultPlan(tuple((n, fault) for n in names), f"{fault.describe()} on {len(names)} links")

    def partition(self, shape: str | None = None, *, node: int | None = None, topic_partition=None, seed: int = 0,
                  sources=None, destinations=None, one_way_only: bool = False, blackhole: bool = False,
                  by: str = "api") -> LinkFaultPlan:
        """A named shape, or a cut between ``sources`` and ``destinations``; applied before it returns."""
        kind = BLACKHOLE if blackhole else PARTITION
        if shape is not None:
            plan = self.shape_plan(shape, node=node, topic_partition=topic_partition, seed=seed, kind=kind)
        else:
            if sources is None or destinations is None:
                raise LinkFaultError("give a shape, or sources and destinations")
            plan = self.cut_plan(sources, destinations, one_way_only, kind)
        self.apply(plan, by=by)
        return plan

    def link_fault(self, sources, destinations, fault: LinkFault, both_ways: bool = False,
                   by: str = "api") -> LinkFaultPlan:
        plan = self.fault_plan(sources, destinations, fault, both_ways)
        self.apply(plan, by=by)
        return plan

    def heal_between(self, sources, destinations, kinds=None, by: str = "api") -> list[str]:
        table = self.table()
        names = links_between(table, resolve_nodes(table, sources), resolve_nodes(table, destinations), True)
        return self.heal(names, kinds=kinds, by=by)

    def heal(self, links: list[str] | None = None, kinds=None, by: str = "cli", restart: bool = True) -> list[str]:
        """Remove the faults (of ``kinds``, default all) of ``links`` (default every link); healing a link with
        no fault is a no-op.  With ``restart``, a link process found dead is started again.  Returns the healed
        links."""
        for k in kinds or ():
            if k not in KINDS:
                raise LinkFaultError(f"unknown link fault {k!r} (one of {', '.join(KINDS)})")
        with self.state.locked():
            table = self.state.read()
            wanted = list(table.links) if links is None else [table.link(n) for n in links]
            changed = {li.name: li.healed(kinds) for li in wanted if li.healed(kinds) != li}
            if changed:
                table = table.replace(changed)
                self.state.write(table)
        if changed:
            self.state.record({"at": time.time(), "action": "heal", "by": by, "links": sorted(changed)})
            log.info("link faults healed %s", kv(links=len(changed)))
        if restart and not self.running():
            self.start()
        elif changed:
            self._reload(table.generation)
        return sorted(changed)

    def _reload(self, generation: int) -> None:
        t = self.state.read()
        if not t.pid or not pid_alive(t.pid):
            log.warning("the link process is down: the change is served once it starts %s", kv(generation=generation))
            return
        answer = self._ask({"op": "reload"})
        if answer is None or not answer.get("ok"):
            raise LinkProcessError(f"the link process did not take the change: {answer}")

    def stats(self) -> dict | None:
        answer = self._ask({"op": "stats"}, timeout=3.0) if self.running() else None
        return answer.get("links") if answer else None

    def describe(self) -> dict:
        """Links, their addresses and faults, and whether the process serves them (``cluster describe``)."""
        t = self.table()
        stats = self.stats() or {}
        return {"pid": t.pid, "running": bool(stats) or self.running(), "control_port": t.control_port,
                "generation": t.generation,
                "links": [{"name": li.name, "source": li.source, "destination": li.destination,
                           "address": li.address, "upstream": li.upstream,
                           "faults": [attrs.asdict(f) for f in li.faults],
                           "fault_text": ", ".join(f.describe() for f in li.faults),
                           **({"stats": stats[li.name]} if li.name in stats else {})} for li in t.links]}

    def _ask(self, request: dict, timeout: float = CONTROL_TIMEOUT_S) -> dict | None:
        port = self.state.read().control_port
        if not port:
            return None
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
                s.sendall((json.dumps(request) + "\n").encode())
                buf = b""
                while not buf.endswith(b"\n"):
                    chunk = s.recv(65536)
                    if not chunk:
                        return None
                    buf += chunk
            return json.loads(buf)
        except (OSError, ValueError):
            return None
