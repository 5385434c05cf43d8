"""The small collaborators the controller hands its managers: ControllerEvents and FencedZkWrites."""
from __future__ import annotations

from kafkatier.controller.context import ControllerContext
from kafkatier.controller.event_manager import ControllerEventManager, ControllerEvents
from kafkatier.controller.fenced_writes import FencedZkWrites
from kafkatier.zk.errors import NoNodeError


def test_events_queue_and_run_active_only_work_only_while_active():
    manager = ControllerEventManager(name="test-controller-events")
    active = [True]
    events = ControllerEvents(manager, is_active=lambda: active[0])
    ran = []
    manager.start()
    try:
        assert events.put_active_only("A", lambda: ran.append("a")).done.wait(10)
        active[0] = False
        assert events.put_active_only("B", lambda: ran.append("b")).done.wait(10)
        assert events.put("C", lambda: ran.append("c")).done.wait(10)
    finally:
        manager.shutdown()
    assert ran == ["a", "c"]


def test_generation_moves_only_when_the_controller_says_so():
    events = ControllerEvents(ControllerEventManager(), is_active=lambda: True)
    assert events.generation == 0
    assert events.next_generation() == 1 and events.generation == 1


class _Writer:
    def __init__(self, log, missing):
        self.log, self.missing = log, missing

    def delete(self, path):
        if path in self.missing:
            raise NoNodeError()
        self.log.append(path)


class _KafkaZk:
    def __init__(self, missing=()):
        self.deleted, self.versions, self.missing = [], [], set(missing)

    def writer(self, epoch_zk_version):
        self.versions.append(epoch_zk_version)
        return _Writer(self.deleted, self.missing)


def test_fenced_writes_use_the_current_epoch_zk_version_and_ignore_a_missing_znode():
    ctx = ControllerContext()
    kzk = _KafkaZk(missing={"/gone"})
    fenced = FencedZkWrites(kzk, ctx)
    ctx.epoch_zk_version = 7
    fenced.delete_if_exists("/a")
    fenced.delete_if_exists("/gone")
    ctx.epoch_zk_version = 8
    fenced.writer().delete("/b")
    assert kzk.deleted == ["/a", "/b"] and kzk.versions == [7, 7, 8]
