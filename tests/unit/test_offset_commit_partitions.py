"""The checks OffsetCommit and TxnOffsetCommit share (``server/group_apis.py``): no READ on the group denies
every partition, no READ on the topic is TOPIC_AUTHORIZATION_FAILED, a partition that does not exist
UNKNOWN_TOPIC_OR_PARTITION, the rest is committed; the answer lists every partition grouped by topic in request
order."""
from __future__ import annotations

from kafkatier.protocol.errors import Errors
from kafkatier.server.group_apis import committable_offsets, partitions_by_topic


class ReadOnly:
    def __init__(self, topics, group=True):
        self.topics, self.group = set(topics), group

    def authorize(self, ctx, operation, resource_type, name):
        assert (operation, resource_type) == ("Read", "Group")
        return self.group

    def filter_authorized(self, ctx, operation, resource_type, names):
        assert (operation, resource_type) == ("Read", "Topic")
        return {n for n in names if n in self.topics}


class Cache:
    def __init__(self, partitions):
        self.partitions = set(partitions)

    def get_partition(self, topic, partition):
        return object() if (topic, partition) in self.partitions else None


def test_denied_unknown_and_committable():
    offsets = {("a", 0): "a0", ("a", 9): "a9", ("secret", 0): "s0", ("b", 1): "b1"}
    known, errors = committable_offsets(ReadOnly({"a", "b"}), None, Cache({("a", 0), ("b", 1), ("secret", 0)}),
                                        "g", offsets)
    assert known == {("a", 0): "a0", ("b", 1): "b1"}
    assert errors == {("a", 9): int(Errors.UNKNOWN_TOPIC_OR_PARTITION),
                      ("secret", 0): int(Errors.TOPIC_AUTHORIZATION_FAILED)}


def test_a_denied_topic_that_does_not_exist_is_denied():
    _, errors = committable_offsets(ReadOnly(set()), None, Cache(set()), "g", {("x", 0): 1})
    assert errors == {("x", 0): int(Errors.TOPIC_AUTHORIZATION_FAILED)}


def test_no_read_on_the_group_denies_every_partition():
    known, errors = committable_offsets(ReadOnly({"a"}, group=False), None, Cache({("a", 0)}), "g",
                                        {("a", 0): 1, ("a", 1): 2})
    assert known == {} and errors == {("a", 0): int(Errors.GROUP_AUTHORIZATION_FAILED),
                                      ("a", 1): int(Errors.GROUP_AUTHORIZATION_FAILED)}


def test_the_answer_keeps_request_order_grouped_by_topic():
    order = [("b", 1), ("a", 0), ("b", 0)]
    codes = {("a", 0): 29}
    assert partitions_by_topic(order, lambda tp: codes.get(tp, 0)) == [
        {"name": "b", "partitions": [{"partition_index": 1, "error_code": 0}, {"partition_index": 0, "error_code": 0}]},
        {"name": "a", "partitions": [{"partition_index": 0, "error_code": 29}]}]
