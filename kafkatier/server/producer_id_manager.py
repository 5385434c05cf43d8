"""ProducerIdManager: hands out producer ids for idempotent producers (InitProducerId without a
transactional id), from blocks reserved in ``/latest_producer_id_block`` as Kafka's ZooKeeper mode does::

    {"version":1,"broker":1,"block_start":"0","block_end":"999"}

The block is claimed with a conditional write on the znode's version, so two brokers never get the same ids.
"""
from __future__ import annotations

import json
import threading

import tenacity
from kafkatier.zk.errors import (BadVersionError, ConnectionLoss, NoNodeError, NodeExistsError, OperationTimeoutError,
                              SessionExpiredError)

from kafkatier.logsetup import get_logger, kv
from kafkatier.zk import paths

log = get_logger("server.producer-ids")

BLOCK_SIZE = 1000
# ZooKeeper unreachable (a paused or restarting ensemble, this broker's session expired and being renewed): the
# claim is tried again for this long, then InitProducerId answers COORDINATOR_LOAD_IN_PROGRESS (clients retry).
ZK_UNAVAILABLE_RETRY_S = 10.0
ZK_UNAVAILABLE = (ConnectionLoss, OperationTimeoutError, SessionExpiredError)


class ProducerIdsUnavailableError(Exception):
    """No block of producer ids could be claimed in ZooKeeper for now."""


class ProducerIdManager:
    def __init__(self, zk, broker_id: int):
        self.zk = zk
        self.broker_id = broker_id
        self._lock = threading.Lock()
        self._next = 0
        self._end = -1

    def generate_producer_id(self) -> int:
        """The next id; :class:`ProducerIdsUnavailableError` when a new block is needed and ZooKeeper stayed
        unreachable for ``ZK_UNAVAILABLE_RETRY_S``."""
        with self._lock:
            if self._next > self._end:
                try:
                    tenacity.Retrying(retry=tenacity.retry_if_exception_type(ZK_UNAVAILABLE),
                                      stop=tenacity.stop_after_delay(ZK_UNAVAILABLE_RETRY_S),
                                      wait=tenacity.wait_exponential(multiplier=0.05, max=1.0),
                                      reraise=True)(self._claim_block)
                except ZK_UNAVAILABLE as e:
                    log.warning("cannot claim a producer id block %s", kv(reason=type(e).__name__))
                    raise ProducerIdsUnavailableError(type(e).__name__) from e
            pid = self._next
            self._next += 1
            return pid

    @tenacity.retry(retry=tenacity.retry_if_exception_type(BadVersionError), stop=tenacity.stop_after_attempt(20),
                    wait=tenacity.wait_random(0.005, 0.05), reraise=True)
    def _claim_block(self) -> None:
        # Every call goes through the client's bounded command retry: a ZooKeeper connection loss (a server
        # paused, a leader change) waits for the reconnection, as Kafka's ZooKeeperClient does, instead of
        # failing InitProducerId.  A retried ``set`` that had been applied fails its version check and the
        # whole claim is retried: a block may be skipped, never handed out twice.
        zk = self.zk
        try:
            data, stat = zk.retry(zk.get, paths.LATEST_PRODUCER_ID_BLOCK)
        except NoNodeError:
            try:
                zk.retry(zk.create, paths.LATEST_PRODUCER_ID_BLOCK, b"", makepath=True)
            except NodeExistsError:
                pass
            data, stat = zk.retry(zk.get, paths.LATEST_PRODUCER_ID_BLOCK)
        start = 0
        if data:
            try:
                start = int(json.loads(data)["block_end"]) + 1
            except (ValueError, KeyError, TypeError) as e:
                log.warning("malformed %s (%s); starting a new block after it is overwritten",
                            paths.LATEST_PRODUCER_ID_BLOCK, e)
        end = start + BLOCK_SIZE - 1
        payload = json.dumps({"version": 1, "broker": self.broker_id, "block_start": str(start),
                              "block_end": str(end)}).encode()
        zk.retry(zk.set, paths.LATEST_PRODUCER_ID_BLOCK, payload, version=stat.version)
        self._next, self._end = start, end
        log.info("claimed producer id block %s", kv(start=start, end=end))
