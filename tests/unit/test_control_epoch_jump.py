"""A control request whose controller epoch jumps past ``/controller_epoch`` is logged and refused; it does not
make the real controller look stale (issue #16)."""
from __future__ import annotations

from kafkatier.protocol.api_keys import ApiKeys
from kafkatier.protocol.errors import Errors
from kafkatier.server.control_request_handler import ControlRequestHandler
from kafkatier.zk import codecs
from kafkatier.protocol.control_messages import UpdateMetadataResponseData
from fakes import FakeZk


class Apis:
    def __init__(self):
        self.updates = 0

    def handle_update_metadata(self, body):
        self.updates += 1
        return UpdateMetadataResponseData(error_code=0)


def request(epoch: int) -> codecs.ControlRequest:
    return codecs.ControlRequest(api_key=ApiKeys.UPDATE_METADATA, api_version=7, api_name="UpdateMetadata", controller_id=1,
                                 controller_epoch=epoch, broker_epoch=-1, body={"live_brokers": [],
                                                                                "topic_states": []})


def test_absurd_epoch_refused_real_one_accepted(caplog):
    zk, apis = FakeZk({"/controller_epoch": b"3"}), Apis()
    handler = ControlRequestHandler(zk, 1, lambda: 10, apis)
    assert handler.handle(request(3)).error_code == 0
    forged = handler.handle(request(2_000_000_000))
    assert forged.error_code == Errors.STALE_CONTROLLER_EPOCH and "ahead of /controller_epoch" in caplog.text
    assert handler.controller_epoch == 3 and handler.metrics["unproven_controller_epoch"] == 1
    zk.set("/controller_epoch", b"4")  # a real new controller: the znode moved first
    assert handler.handle(request(4)).error_code == 0 and apis.updates == 2
