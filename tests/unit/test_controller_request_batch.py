"""The controller's request bodies are valid LeaderAndIsr v7 / UpdateMetadata v8 / StopReplica v5 messages."""
from __future__ import annotations

from kafkatier.common.structs import BrokerInfo, LeaderAndIsr, TopicPartition
from kafkatier.controller.context import ControllerContext, ReplicaAssignment
from kafkatier.controller.request_batch import ControllerBrokerRequestBatch
from kafkatier.controller.request_batch import typed_response
from kafkatier.protocol.control_messages import (LeaderAndIsrRequestData, LeaderAndIsrResponseData,
                                                 StopReplicaRequestData, StopReplicaResponseData,
                                                 UpdateMetadataRequestData)
from kafkatier.protocol.errors import Errors
from kafkatier.zk.codecs import ControlResponse
from kafkatier.zk.codecs import new_topic_id


def make_ctx():
    ctx = ControllerContext()
    ctx.epoch = 3
    for b in (1, 2, 3):
        ctx.live_brokers[b] = BrokerInfo(b, "127.0.0.1", 9090 + b, epoch=100 + b)
    ctx.topic_ids["t"] = new_topic_id()
    ctx.all_topics.add("t")
    for p in (0, 1):
        tp = TopicPartition("t", p)
        ctx.update_assignment(tp, ReplicaAssignment((1, 2, 3)))
        ctx.partition_leadership[tp] = LeaderAndIsr(1, 4, (1, 2, 3), 3, partition_epoch=7)
    return ctx


def collect(ctx, fill, **kw):
    sent = []
    batch = ControllerBrokerRequestBatch(1, ctx, lambda *a: sent.append(a) or True, **kw)
    batch.new_batch()
    fill(batch)
    batch.send_requests_to_brokers(ctx.epoch)
    return sent


def test_leader_and_isr_then_update_metadata_bodies_decode():
    ctx = make_ctx()
    sent = collect(ctx, lambda b: b.add_leader_and_isr([2], TopicPartition("t", 0), ctx.partition_leadership[TopicPartition("t", 0)], is_new=True))
    kinds = [(s[0], s[2], s[3]) for s in sent]
    assert kinds[0] == (2, "LeaderAndIsr", 7)
    assert {k[1] for k in kinds[1:]} == {"UpdateMetadata"}
    lai = LeaderAndIsrRequestData.from_json(7, sent[0][4])
    ps = lai.topic_states[0].partition_states[0]
    assert (lai.broker_epoch, lai.controller_epoch, ps.leader, ps.leader_epoch, ps.partition_epoch, ps.is_new) == \
        (102, 3, 1, 4, 7, True)
    for s in sent[1:]:
        um = UpdateMetadataRequestData.from_json(8, s[4])
        assert um.broker_epoch == 100 + s[0]
        assert [b.id for b in um.live_brokers] == [1, 2, 3]


def test_stop_replica_v5_disable_and_delete_entries():
    ctx = make_ctx()
    responses = []

    def fill(b):
        b.add_stop_replica([3], TopicPartition("t", 0), delete=False, disable_remote_partition=True)
        b.add_stop_replica([3], TopicPartition("t", 1), delete=True)
    sent = collect(ctx, fill, stop_replica_callback=lambda broker, entries, resp: responses.append((broker, entries,
                                                                                                   resp)))
    assert len(sent) == 1 and sent[0][2] == "StopReplica" and sent[0][3] == 5
    req = StopReplicaRequestData.from_json(5, sent[0][4])
    parts = {p.partition_index: p for p in req.topic_states[0].partition_states}
    assert (parts[0].disable_remote_partition, parts[0].delete_partition, parts[0].leader_epoch) == (True, False, -1)
    assert (parts[1].disable_remote_partition, parts[1].delete_partition, parts[1].leader_epoch) == (False, True, 4)
    sent[0][5](answer({"error_code": 0, "partition_errors": [
        {"topic_name": "t", "partition_index": 1, "error_code": int(Errors.KAFKA_STORAGE_ERROR)}]}))
    broker, entries, resp = responses[0]
    assert broker == 3 and set(entries) == {TopicPartition("t", 0), TopicPartition("t", 1)}
    assert isinstance(resp, StopReplicaResponseData) and resp.error_code == 0
    assert [(e.topic_name, e.partition_index, e.error_code) for e in resp.partition_errors] == [
        ("t", 1, Errors.KAFKA_STORAGE_ERROR)]


def answer(body: dict, error_code: int = 0) -> ControlResponse:
    return ControlResponse(api_key=5, api_version=5, error_code=error_code, body=body, broker_id=3, broker_epoch=1)


def test_an_answer_is_read_as_its_typed_response_and_a_malformed_one_as_an_error():
    ok = typed_response(StopReplicaResponseData, 5, answer({"error_code": 0, "partition_errors": []}))
    assert ok == StopReplicaResponseData(error_code=0)
    refused = typed_response(StopReplicaResponseData, 5, answer({"error_code": 11}, error_code=11))
    assert refused.error_code == 11 and refused.partition_errors == ()
    for body in ({"error_code": 0, "partition_errors": [{"topic": "t"}]}, {"eror_code": 0}):
        bad = typed_response(StopReplicaResponseData, 5, answer(body))
        assert bad.error_code == Errors.UNKNOWN_SERVER_ERROR and bad.partition_errors == ()
    lai = typed_response(LeaderAndIsrResponseData, 7, answer(
        {"error_code": 0, "topics": [{"topic_id": "00000000-0000-0000-0000-000000000001",
                                      "partition_errors": [{"partition_index": 0, "error_code": 0}]}]}))
    assert lai.topics[0].partition_errors[0].partition_index == 0


def test_stop_replica_entries_for_one_partition_are_merged():
    ctx = make_ctx()

    def fill(b):
        b.add_stop_replica([2], TopicPartition("t", 0), delete=False)
        b.add_stop_replica([2], TopicPartition("t", 0), delete=True)
    sent = collect(ctx, fill)
    req = StopReplicaRequestData.from_json(5, sent[0][4])
    assert [p.delete_partition for p in req.topic_states[0].partition_states] == [True]


def test_coalesced_rounds_send_one_request_of_each_kind_per_broker_with_the_final_state():
    ctx = make_ctx()
    sent = []
    batch = ControllerBrokerRequestBatch(1, ctx, lambda *a: sent.append(a) or True)
    tp = TopicPartition("t", 0)
    with batch.coalesced(lambda: ctx.epoch):
        for leader_epoch in (5, 6):  # two rounds, e.g. an election then an ISR shrink
            batch.new_batch()
            ctx.partition_leadership[tp] = LeaderAndIsr(2, leader_epoch, (2, 3), 3, partition_epoch=8)
            batch.add_leader_and_isr([2, 3], tp, ctx.partition_leadership[tp])
            batch.send_requests_to_brokers(ctx.epoch)
        assert sent == []
    kinds = sorted((s[0], s[2]) for s in sent)
    assert kinds == [(1, "UpdateMetadata"), (2, "LeaderAndIsr"), (2, "UpdateMetadata"), (3, "LeaderAndIsr"),
                     (3, "UpdateMetadata")]
    lai = LeaderAndIsrRequestData.from_json(7, next(s[4] for s in sent if s[0] == 2 and s[2] == "LeaderAndIsr"))
    assert lai.topic_states[0].partition_states[0].leader_epoch == 6


def test_a_coalesced_block_that_fails_sends_nothing():
    ctx = make_ctx()
    sent = []
    batch = ControllerBrokerRequestBatch(1, ctx, lambda *a: sent.append(a) or True)
    try:
        with batch.coalesced(lambda: ctx.epoch):
            batch.new_batch()
            batch.add_update_metadata([1, 2, 3], [TopicPartition("t", 0)])
            raise RuntimeError("failover failed")
    except RuntimeError:
        pass
    assert sent == []
    batch.new_batch()  # the batch is usable again
    batch.add_update_metadata([1], [])
    batch.send_requests_to_brokers(ctx.epoch)
    assert len(sent) == 1


def test_a_round_an_error_left_unsent_is_dropped_at_resignation():
    """An event that fails mid-round (a ZooKeeper session expiry during a state change) leaves entries unsent;
    the controller resigns and resets the batch, so its next failover starts a batch instead of raising
    IllegalBatchState (seen in CI: a broker re-elected right after could not fail over)."""
    ctx = make_ctx()
    sent = []
    batch = ControllerBrokerRequestBatch(1, ctx, lambda *a: sent.append(a) or True)
    batch.new_batch()
    batch.add_update_metadata([1, 2, 3], [TopicPartition("t", 0)])  # the round stops here with an error
    batch.reset()
    with batch.coalesced(lambda: ctx.epoch):
        batch.add_update_metadata([2], [])
    assert [a[0] for a in sent] == [2]


def test_a_partition_state_sent_to_several_brokers_is_built_and_written_once():
    ctx = make_ctx()
    tp = TopicPartition("t", 0)
    sent = collect(ctx, lambda b: b.add_leader_and_isr([1, 2, 3], tp, ctx.partition_leadership[tp]))
    lai = [s[4] for s in sent if s[2] == "LeaderAndIsr"]
    states = [body["topic_states"][0]["partition_states"][0] for body in lai]
    assert len(states) == 3 and all(s is states[0] for s in states)   # one written form, shared
    assert [s[4]["broker_epoch"] for s in sent if s[2] == "LeaderAndIsr"] == [101, 102, 103]
    um = [s[4] for s in sent if s[2] == "UpdateMetadata"]
    assert len(um) == 3 and all(u["topic_states"][0] is um[0]["topic_states"][0] for u in um)


def test_a_failover_round_queues_each_brokers_update_metadata_before_its_leader_and_isr():
    ctx = make_ctx()
    sent = []
    batch = ControllerBrokerRequestBatch(1, ctx, lambda *a: sent.append(a) or True)
    tp = TopicPartition("t", 0)
    with batch.coalesced(lambda: ctx.epoch, update_metadata_first=True):
        batch.new_batch()
        batch.add_leader_and_isr([2, 3], tp, ctx.partition_leadership[tp])
        batch.send_requests_to_brokers(ctx.epoch)
    per_broker = {b: [s[2] for s in sent if s[0] == b] for b in (1, 2, 3)}
    assert per_broker == {1: ["UpdateMetadata"], 2: ["UpdateMetadata", "LeaderAndIsr"],
                          3: ["UpdateMetadata", "LeaderAndIsr"]}
    um = UpdateMetadataRequestData.from_json(8, sent[0][4])
    assert [(p.partition_index, p.leader) for t in um.topic_states for p in t.partition_states] == [(0, 1)]


def test_a_failover_sends_the_elections_update_metadata_before_the_rest_of_its_round():
    """The elected leaders reach the brokers' metadata at once; the block's final round still carries every
    partition's final state, each broker's UpdateMetadata before its LeaderAndIsr."""
    ctx = make_ctx()
    sent = []
    batch = ControllerBrokerRequestBatch(1, ctx, lambda *a: sent.append(a) or True)
    elected, shrunk = TopicPartition("t", 0), TopicPartition("t", 1)
    with batch.coalesced(lambda: ctx.epoch, update_metadata_first=True):
        batch.new_batch()
        ctx.partition_leadership[elected] = LeaderAndIsr(2, 5, (2, 3), 3, partition_epoch=8)
        batch.add_leader_and_isr([2, 3], elected, ctx.partition_leadership[elected])
        batch.send_requests_to_brokers(ctx.epoch)
        assert batch.send_update_metadata_so_far(ctx.epoch) == {1, 2, 3}
        early = list(sent)
        batch.new_batch()
        ctx.partition_leadership[shrunk] = LeaderAndIsr(1, 5, (1, 2), 3, partition_epoch=8)
        batch.add_leader_and_isr([1, 2], shrunk, ctx.partition_leadership[shrunk])
        batch.send_requests_to_brokers(ctx.epoch)
    assert [(s[0], s[2]) for s in early] == [(1, "UpdateMetadata"), (2, "UpdateMetadata"), (3, "UpdateMetadata")]
    um = UpdateMetadataRequestData.from_json(8, early[0][4])
    assert [(p.partition_index, p.leader) for t in um.topic_states for p in t.partition_states] == [(0, 2)]
    final = sent[len(early):]
    assert [s[2] for s in final if s[0] == 2] == ["UpdateMetadata", "LeaderAndIsr"]
    um = UpdateMetadataRequestData.from_json(8, final[0][4])
    assert [(p.partition_index, p.leader) for t in um.topic_states for p in t.partition_states] == [(0, 2), (1, 1)]


def test_update_metadata_so_far_outside_a_coalesced_block_sends_nothing():
    ctx = make_ctx()
    sent = []
    batch = ControllerBrokerRequestBatch(1, ctx, lambda *a: sent.append(a) or True)
    batch.new_batch()
    batch.add_update_metadata([1, 2, 3], [TopicPartition("t", 0)])
    assert batch.send_update_metadata_so_far(ctx.epoch) == set()
    assert sent == []
    batch.send_requests_to_brokers(ctx.epoch)
    assert len(sent) == 3
