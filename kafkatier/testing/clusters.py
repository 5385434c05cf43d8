"""Broker clusters for tests: real broker processes against any ZooKeeper, each cluster in its own chroot.

A ``RunningCluster`` wraps a :class:`~kafkatier.cluster.manager.ClusterManager` started on
``<zookeeper connect string>/cluster-<random>`` and a kazoo client chrooted the same way, so tests read the
cluster's znodes (``/controller``, ``/brokers/ids``...) at their usual paths.
"""
from __future__ import annotations

import json
import uuid

import attrs
from kafkatier.zk.errors import KazooException
from kafkatier.zk.errors import KazooTimeoutError

from kafkatier.cluster import request_faults
from kafkatier.cluster.manager import ClusterManager
from kafkatier.zk.client import start_client


@attrs.define
class RunningCluster:
    manager: ClusterManager
    zk: object  # kazoo client chrooted like the brokers

    @property
    def bootstrap_servers(self) -> str:
        return self.manager.bootstrap_servers

    @property
    def zookeeper(self) -> str:
        return self.manager.zookeeper

    @property
    def data_dir(self) -> str:
        return self.manager.data_dir

    def controller_id(self) -> int | None:
        """The broker id in ``/controller``, or None when there is none (or ZooKeeper cannot be read)."""
        try:
            return json.loads(self.zk.get("/controller")[0])["brokerid"]
        except (KazooException, KazooTimeoutError, ValueError, KeyError, TypeError):
            return None

    def broker_ids(self) -> list[int]:
        return [b["id"] for b in self.manager.state["brokers"]]

    # -- request faults and clock skew (server/fault_injection.py) ---------------------------------------------
    def inject_errors(self, broker_id: int, api: str | int, errors=None, *, count: int | None = None,
                      latency_ms: float | None = None, drop_response_nth: int | None = None,
                      close_connection_nth: int | None = None, topic: str | None = None,
                      partition: int | None = None) -> list:
        """Add one request fault to a broker (the options of ``kafkatier cluster inject-errors``); returns once
        the broker has it in force.  ``errors``: names or codes, a list or a comma-separated string."""
        self.manager.broker(broker_id)
        faults = request_faults.build_faults(api, errors=errors, latency_ms=latency_ms, drop_response_nth=drop_response_nth,
                              close_connection_nth=close_connection_nth, count=count, topic=topic,
                              partition=partition)
        request_faults.add_faults(self.zk, broker_id, faults)
        return faults

    def set_clock(self, broker_id: int, offset_ms: float = 0.0, drift_ppm: float = 0.0) -> None:
        """Skew a broker's wall clock (0, 0: back to the system clock)."""
        self.manager.broker(broker_id)
        request_faults.set_clock(self.zk, broker_id, offset_ms, drift_ppm)

    def clear_faults(self, broker_id: int | None = None) -> None:
        """Remove request faults and clock skew (of every broker when no id)."""
        for b in [broker_id] if broker_id is not None else self.broker_ids():
            request_faults.clear_all(self.zk, b)

    def request_faults(self, broker_id: int) -> dict:
        """The broker's faults with what is left of each (``remaining``)."""
        return request_faults.describe(self.zk, broker_id)
    @property
    def links(self):
        """The cluster's links (started with ``links=True``): ``partition(shape, node=..)``,
        ``partition(sources=.., destinations=.., one_way_only=..)``, ``link_fault(sources, destinations, LinkFault)``,
        ``heal()``, ``describe()``, ``stop(kill=True)`` -- ``kafkatier.cluster.link_manager.LinkManager``."""
        return self.manager.links

    def bootstrap_for(self, client_group: str) -> str:
        """The bootstrap servers of a client group (``client_groups=[...]``): its links to every broker."""
        return self.manager.client_bootstrap(client_group)


def start_cluster(connect_string: str, client, data_dir, brokers: int = 3, log_dirs: int = 2,
                  overrides: dict | None = None, session_timeout_ms: int = 6000, links: bool = False,
                  client_groups=(), tls: bool = False, sasl_ssl: bool = False,
                  racks: dict[int, str] | None = None) -> RunningCluster:
    """Start ``brokers`` brokers on a fresh chroot of ``connect_string`` (``client``: an unchrooted client); with
    ``links``, every broker -> broker and broker -> ZooKeeper path runs through the cluster's link process, and
    each of ``client_groups`` gets its own listener reached through links (``bootstrap_for(group)``)."""
    root = f"/cluster-{uuid.uuid4().hex[:10]}"
    client.retry(client.create, root)
    connect = connect_string + root
    manager = ClusterManager(str(data_dir))
    try:
        manager.up(brokers=brokers, log_dirs_per_broker=log_dirs, zookeeper=connect, overrides=overrides or {},
                   session_timeout_ms=session_timeout_ms, links=links, client_groups=client_groups,
                   tls=tls or sasl_ssl, sasl_ssl=sasl_ssl, racks=racks)
    except BaseException:
        manager.down()
        raise
    return RunningCluster(manager, start_client(connect))


def stop_cluster(cluster: RunningCluster) -> None:
    try:
        cluster.zk.stop()
        cluster.zk.close()
    finally:
        cluster.manager.down()
