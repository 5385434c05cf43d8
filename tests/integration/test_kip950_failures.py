"""KIP-950 disablement when storage work is slow, on 3-broker clusters whose storage manager pauses in every
copy or every delete (``rsm.config.copy.delay.ms`` / ``rsm.config.delete.delay.ms``):

* scenario 20 (docs/acceptance.md): a copy in flight when a delete disablement starts never reaches
  COPY_SEGMENT_FINISHED, its files are removed and the remote tier ends empty;
* scenario 19 with deletion still running: tiering is re-enabled while the old segments are still being deleted;
  new segments (same tiered epoch as the disablement) are copied from the local log start offset, the old ones
  are never served and end up deleted — no mix-up, offsets continuous.
"""
from __future__ import annotations

import pytest

from kafkatier.waiting import wait_for
from kip950_support import (DELETE, S, TIERED, TOPIC_CONFIG, WAIT_S, alter, broker_log, consume, create_topic,
                           earliest, finished_chain, partition_state, produce, remote, remote_files, segments,
                           tiered, topic_id, values, wait_offloaded, wait_state)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def test_a_copy_in_flight_when_a_delete_disablement_starts_is_fenced(cluster_factory):
    c = cluster_factory(brokers=3, log_dirs=1, overrides={**TIERED, "rsm.config.copy.delay.ms": "3000"})
    t = "inflight"
    create_topic(c, t, configs=TOPIC_CONFIG)
    tid = topic_id(c.zk, t)
    produce(c, t, 12)                                                # [0,6) rolled, [6,12) active
    wait_for(lambda: [m.state for m in remote(c.zk, t)] == [S.COPY_SEGMENT_STARTED] and remote_files(c, t),
             WAIT_S, interval=0.05, message="the upload of [0,6) in progress")
    leader = partition_state(c.zk, t)["leader"]
    assert alter(c, t, DELETE) is None
    wait_state(c.zk, t, "DISABLED", 1)

    def gone() -> bool:
        segs = remote(c.zk, t, tid=tid)
        assert S.COPY_SEGMENT_FINISHED not in [m.state for m in segs], "the fenced copy finished"
        return segs == [] and remote_files(c, t, tid=tid) == []
    wait_for(gone, WAIT_S, interval=0.1, message="the in-flight copy's metadata and files removed")
    log = broker_log(c, leader)
    assert "event=uploaded_data_discarded" in log and "event=copied_segment" not in log
    assert earliest(c, t) == 0 and consume(c, t) == values(0, 12)   # nothing was tiered: the log is whole


def test_re_enable_while_old_segments_are_still_being_deleted(cluster_factory):
    c = cluster_factory(brokers=3, log_dirs=1, overrides={**TIERED, "rsm.config.delete.delay.ms": "1200"})
    t = "reenable"
    create_topic(c, t, configs=TOPIC_CONFIG)
    tid = topic_id(c.zk, t)
    produce(c, t, 30)
    wait_offloaded(c, t, 24)
    old_ids = {m.segment_id for m in remote(c.zk, t)}
    assert alter(c, t, DELETE) is None
    wait_state(c.zk, t, "DISABLED", 1)                               # answered once all were DELETE_STARTED
    assert alter(c, t, {"remote.storage.enable": "true"}) is None
    assert tiered(c.zk, t) == (1, "ENABLED")
    produce(c, t, 12, first=30)                                      # rolls [24,30) and [30,36)

    def new_copied_old_pending() -> bool:
        segs = remote(c.zk, t)
        old = [m for m in segs if m.segment_id in old_ids]
        assert all(m.state == S.DELETE_SEGMENT_STARTED and m.tiered_epoch == 0 for m in old)
        return finished_chain(segs, tiered_epoch=1) == segments(24, 36) and old
    wait_for(new_copied_old_pending, WAIT_S, interval=0.1,
             message="new segments copied while old ones are still being deleted")
    assert earliest(c, t) == 24 and consume(c, t) == values(24, 42)  # never served: old segments
    wait_for(lambda: {m.segment_id for m in remote(c.zk, t)}.isdisjoint(old_ids), WAIT_S, interval=0.2,
             message="old segments deleted")
    segs = remote(c.zk, t)
    assert [(m.start_offset, m.end_offset, m.state, m.tiered_epoch) for m in segs] == [
        (24, 29, S.COPY_SEGMENT_FINISHED, 1), (30, 35, S.COPY_SEGMENT_FINISHED, 1)]
    assert remote_files(c, t, tid=tid) == sorted(f"{m.start_offset:020d}-{m.segment_id}" for m in segs)
    assert consume(c, t) == values(24, 42)
