"""The control queue drains past request znodes that are not control requests or whose body is wrong: each is
answered INVALID_REQUEST (or deleted when it names no API), logged once, and the next request is applied."""
from __future__ import annotations

import json


from kafkatier.protocol.errors import Errors
from kafkatier.server.control_request_handler import ControlRequestHandler
from kafkatier.zk import codecs, paths
from kafkatier.protocol.control_messages import UpdateMetadataResponseData
from fakes import FakeZk


class Apis:
    def __init__(self):
        self.updates = []

    def handle_update_metadata(self, body):
        self.updates.append(body)
        return UpdateMetadataResponseData(error_code=0)


def envelope(api_key, api_version, body):
    return json.dumps({"version": 1, "api_key": api_key, "api_version": api_version, "api_name": "X",
                       "controller_id": 1, "controller_epoch": 0, "broker_epoch": -1, "body": body}).encode()


def test_poisoned_queue_drains(caplog):
    zk, apis = FakeZk(), Apis()
    queue, answers = paths.control_requests(1), paths.control_responses(1)
    poison = [b"{bad", b"", b"[1]", b'{"api_key": 4}', ("[" * 50_000).encode(),
              envelope(4, 5, {"topic_states": "a string"}), envelope(5, 3, {"topic_states": [{"topic_name": 1}]}),
              envelope(6, 7, {"live_brokers": {"x": 1}}), envelope(99, 0, {})]
    for i, data in enumerate(poison):
        zk.nodes[f"{queue}/request_{i:010d}"] = data
    good = f"{queue}/request_{len(poison):010d}"
    zk.nodes[good] = envelope(6, 7, {"live_brokers": [], "topic_states": []})
    handler = ControlRequestHandler(zk, 1, lambda: 10, apis)
    handler._drain()
    assert len(apis.updates) == 1
    assert codecs.ControlResponse.decode(zk.nodes[answers + good[len(queue):]]).error_code == 0
    for i, data in enumerate(poison):
        name = f"request_{i:010d}"
        answer = zk.nodes.get(f"{answers}/{name}")
        if answer is None:  # names no API: deleted
            assert f"{queue}/{name}" not in zk.nodes
        else:
            assert codecs.ControlResponse.decode(answer).error_code == Errors.INVALID_REQUEST, name
    assert handler.metrics["malformed"] == len(poison)
    handler._drain()  # nothing is refused twice
    assert handler.metrics["malformed"] == len(poison) and len(apis.updates) == 1
