"""The remote log manager's fence in ZooKeeper mode: the znode checks every remote-metadata write carries (the
partition's leader epoch, and for tiered copies the topic's KIP-950 tiered state, ``zk/tiered_state.py``)."""
from __future__ import annotations

from kafkatier.log.remote.remote_log_manager import FenceProvider, PartitionLike, RemoteLogTaskFencedError
from kafkatier.zk import codecs, paths
from kafkatier.zk.errors import NoNodeError
from kafkatier.zk.fenced import Check, read_retrying
from kafkatier.zk.tiered_state import ENABLED, read_tiered_state

def zk_fence(zk, broker_id: int) -> FenceProvider:
    """The remote log manager's fence: checks on the partition state znode (this broker leads at the epoch) and,
    for a tiered epoch, on the topic's ``tiered_epoch`` and ``state`` znodes (ENABLED: KIP-950 read-only or
    disabling topics get no more uploads)."""
    def fence(p: PartitionLike, leader_epoch: int, tiered_epoch: int | None) -> list:
        path = paths.partition_state(p.topic, p.partition)
        try:
            data, stat = read_retrying(zk.get, path)
        except NoNodeError:
            raise RemoteLogTaskFencedError(f"partition {p.topic}-{p.partition} no longer exists") from None
        st = codecs.decode_partition_state(data, stat, path)
        if st.leader != broker_id or st.leader_epoch != leader_epoch:
            raise RemoteLogTaskFencedError(
                f"broker {broker_id} no longer leads {p.topic}-{p.partition} at leader epoch {leader_epoch} "
                f"(leader {st.leader}, leader epoch {st.leader_epoch})")
        checks = [Check(path, stat.version)]
        if tiered_epoch is not None:
            ts = read_tiered_state(zk, p.topic)
            if ts is not None:
                if ts.tiered_epoch != tiered_epoch:
                    raise RemoteLogTaskFencedError(f"tiered epoch of {p.topic} moved from {tiered_epoch} to "
                                                   f"{ts.tiered_epoch}")
                if ts.state != ENABLED:
                    raise RemoteLogTaskFencedError(f"tiered storage of {p.topic} is {ts.state} at tiered epoch "
                                                   f"{tiered_epoch}")
                checks.append(ts.epoch_check(p.topic))
                checks.append(Check(paths.tiered_state(p.topic), ts.state_version))
        return checks
    return fence
