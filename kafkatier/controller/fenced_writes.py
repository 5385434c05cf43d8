"""The controller's ZooKeeper writes, each fenced by the ``/controller_epoch`` zkVersion it was elected with.

A write that finds another epoch zkVersion raises ``ControllerMovedError`` (zk/fenced.py): the controller moved
and this one resigns.  Handed to the controller's managers through their constructors.
"""
from __future__ import annotations

from kafkatier.controller.context import ControllerContext
from kafkatier.zk.errors import NoNodeError
from kafkatier.zk.kafka_zk_client import KafkaZkClient


class FencedZkWrites:
    def __init__(self, kafka_zk: KafkaZkClient, context: ControllerContext):
        self.kafka_zk = kafka_zk
        self.ctx = context

    def writer(self):
        """A writer whose every operation checks the epoch zkVersion of the current election."""
        return self.kafka_zk.writer(self.ctx.epoch_zk_version)

    def delete_if_exists(self, path: str) -> None:
        """Delete ``path``, fenced; a znode already gone is no error."""
        try:
            self.writer().delete(path)
        except NoNodeError:
            pass
