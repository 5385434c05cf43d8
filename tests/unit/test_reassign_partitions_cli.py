"""kafkatier reassign-partitions without a cluster (issue 14 item 5): Kafka's file formats and messages, the
options each action accepts, --generate's placement and --throttle's throttled-replica lists.  Against broker
processes: tests/e2e/test_reassign_partitions_e2e.py and tests/e2e/test_jbod_e2e.py."""
from __future__ import annotations

import json
import random

import pytest

from kafkatier.admin import reassignment as plan
from kafkatier.admin.reassignment import (OngoingReassignment, PartitionMove, ReassignmentJsonError, Replica)
from kafkatier.admin.replica_assignment import BrokerMetadata
from kafkatier.cli import reassign_partitions as cli
from kafkatier.cli.main import UsageError, build_parser, main
from kafkatier.common.structs import TopicPartition as TP


def test_reassignment_json_with_and_without_log_dirs():
    entries = plan.parse_reassignment_json(
        '{"partitions":[{"topic":"foo","partition":1,"replicas":[1,2,3],"log_dirs":["/d1","any","any"]},'
        '{"topic":"foo","partition":0,"replicas":[3]}]}')
    assert [(e.tp, e.replicas, e.log_dirs) for e in entries] == [
        (TP("foo", 1), (1, 2, 3), ("/d1", "any", "any")), (TP("foo", 0), (3,), ("any",))]
    assert plan.log_dir_moves(entries) == {Replica(1, "foo", 1): "/d1"}


@pytest.mark.parametrize("text, message", [
    ("{nope", "The input string is not a valid JSON"),
    ('{"version":2,"partitions":[{"topic":"a","partition":0,"replicas":[1]}]}', "Not supported version field value 2"),
    ('{"partitions":[]}', "Partition reassignment list cannot be empty"),
    ('{"version":1}', "Partition reassignment list cannot be empty"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[]}]}', "Partition replica list cannot be empty"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[1,2],"log_dirs":["any"]}]}',
     "Size of replicas list List(1, 2) is different from size of log dirs list List(any) for partition a-0"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[1]},{"topic":"a","partition":0,"replicas":[2]}]}',
     "Partition reassignment contains duplicate topic partitions: a-0"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[1,1,2,2]}]}',
     "Partition replica lists may not contain duplicate entries: a-0 contains multiple entries for 1,2"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[1],"log_dirs":["rel/dir"]}]}',
     "Log directory 'rel/dir' of partition a-0 must be \"any\" or an absolute path"),
    ('{"partitions":[{"partition":0,"replicas":[1]}]}', "No such field exists: `topic` (partitions[0])"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":["x"]}]}',
     "Expected `array` of int value for `replicas` (partitions[0])"),
])
def test_reassignment_json_errors_carry_kafkas_messages(text, message):
    with pytest.raises(ReassignmentJsonError) as e:
        plan.parse_reassignment_json(text)
    assert str(e.value) == message


def test_topics_to_move_and_broker_list():
    assert plan.parse_topics_to_move_json('{"topics":[{"topic":"foo"},{"topic":"bar"}],"version":1}') == ["foo", "bar"]
    with pytest.raises(ReassignmentJsonError, match=r"List of topics to reassign contains duplicate entries: \[foo\]"):
        plan.parse_topics_to_move_json('{"topics":[{"topic":"foo"},{"topic":"foo"}]}')
    with pytest.raises(ReassignmentJsonError, match="Not supported version field value 3"):
        plan.parse_topics_to_move_json('{"topics":[{"topic":"foo"}],"version":3}')
    assert plan.parse_broker_list("5,6") == [5, 6]
    with pytest.raises(ReassignmentJsonError, match=r"Broker list contains duplicate entries: \[5\]"):
        plan.parse_broker_list("5,6,5")
    with pytest.raises(ReassignmentJsonError, match="comma-separated"):
        plan.parse_broker_list("5;6")


def test_format_is_kafkas_one_line_json_sorted_with_log_dirs():
    text = plan.format_reassignment_json({TP("b", 0): [2, 1], TP("a", 1): [1], TP("a", 0): [3]},
                                         {Replica(1, "b", 0): "/d2"})
    assert text == ('{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[3],"log_dirs":["any"]},'
                    '{"topic":"a","partition":1,"replicas":[1],"log_dirs":["any"]},'
                    '{"topic":"b","partition":0,"replicas":[2,1],"log_dirs":["any","/d2"]}]}')
    assert [e.replicas for e in plan.parse_reassignment_json(text)] == [(3,), (1,), (2, 1)]


def test_generate_places_each_topic_on_the_listed_brokers_keeping_its_shape():
    current = {TP("foo", 0): [1, 2], TP("foo", 1): [2, 3], TP("foo", 2): [3, 1], TP("bar", 0): [1]}
    proposed = plan.calculate_assignment(current, [BrokerMetadata(5), BrokerMetadata(6)], rng=random.Random(1))
    assert sorted(proposed) == sorted(current)
    assert all(len(proposed[tp]) == len(current[tp]) and set(proposed[tp]) <= {5, 6} for tp in current)
    leaders = [proposed[TP("foo", p)][0] for p in range(3)]
    assert set(leaders) == {5, 6}                      # leaders spread round-robin


def test_throttles_name_sources_for_leaders_and_new_replicas_for_followers():
    current = {TP("foo", 0): [1, 2, 3], TP("foo", 1): [2, 3, 4]}
    proposed = {TP("foo", 0): [4, 2, 3], TP("foo", 1): [2, 3, 4]}
    ongoing = {TP("bar", 0): OngoingReassignment((1, 2, 5), adding_replicas=(5,), removing_replicas=(1,))}
    moves = plan.proposed_move_map(ongoing, proposed, current)
    assert moves["foo"][0] == PartitionMove(frozenset({1, 2, 3}), frozenset({4}))
    assert moves["foo"][1] == PartitionMove(frozenset({2, 3, 4}), frozenset())
    assert moves["bar"][0] == PartitionMove(frozenset({1, 2}), frozenset({5}))
    assert plan.leader_throttles(moves) == {"foo": "0:1,0:2,0:3,1:2,1:3,1:4", "bar": "0:1,0:2"}
    assert plan.follower_throttles(moves) == {"foo": "0:4", "bar": "0:5"}
    assert plan.reassigning_brokers(moves) == [1, 2, 3, 4, 5]
    # Resubmitting a running reassignment (--additional) keeps its sources.
    again = plan.proposed_move_map(ongoing, {TP("bar", 0): [2, 5]}, {TP("bar", 0): [1, 2, 5]})
    assert again["bar"][0] == PartitionMove(frozenset({1, 2}), frozenset({5}))


def parse(*argv: str):
    return build_parser().parse_args(["reassign-partitions", "--bootstrap-server", "b:9092", *argv])


def test_each_action_takes_kafkas_options_only():
    args = parse("--verify", "--reassignment-json-file", "f", "--throttle", "5")
    with pytest.raises(UsageError, match=r'Option "\[throttle\]" can\'t be used with action "\[verify\]"'):
        cli.check_options(args)
    with pytest.raises(UsageError, match=r'Missing required argument "\[broker-list\]"'):
        cli.check_options(parse("--generate", "--topics-to-move-json-file", "f"))
    with pytest.raises(UsageError, match=r'Option "\[reassignment-json-file\]" can\'t be used with action "\[list\]"'):
        cli.check_options(parse("--list", "--reassignment-json-file", "f"))
    args = parse("--execute", "--reassignment-json-file", "f", "--additional")
    assert cli.check_options(args) == "execute"
    assert (args.throttle, args.replica_alter_log_dirs_throttle, args.timeout) == (-1, -1, 10000)


def test_bad_files_exit_2_with_one_line_before_connecting(tmp_path, capsys):
    f = tmp_path / "bad.json"
    f.write_text('{"partitions":[{"topic":"a","partition":0,"replicas":[1,1]}]}')
    rc = main(["reassign-partitions", "--bootstrap-server", "127.0.0.1:1", "--execute",
               "--reassignment-json-file", str(f)])
    err = capsys.readouterr().err
    assert rc == 2 and err.strip().splitlines() == [
        "kafkatier reassign-partitions: Partition replica lists may not contain duplicate entries: a-0 contains "
        "multiple entries for 1"]
    f.write_text(json.dumps({"topics": [{"topic": "t"}]}))
    rc = main(["reassign-partitions", "--bootstrap-server", "127.0.0.1:1", "--generate",
               "--topics-to-move-json-file", str(f), "--broker-list", "1,1"])
    assert rc == 2 and "Broker list contains duplicate entries: [1]" in capsys.readouterr().err
    rc = main(["reassign-partitions", "--bootstrap-server", "127.0.0.1:1", "--verify",
               "--reassignment-json-file", str(tmp_path / "missing.json")])
    assert rc == 2 and "cannot read" in capsys.readouterr().err


def test_list_text_is_kafkas():
    assert cli.list_text({}) == "No partition reassignments found."
    assert cli.list_text({TP("t", 1): OngoingReassignment((1, 2, 3), (3,), (1,)),
                          TP("t", 0): OngoingReassignment((2, 1))}) == (
        "Current partition reassignments:\nt-0: replicas: 2,1.\nt-1: replicas: 1,2,3. adding: 3. removing: 1.")


def test_log_dir_move_lines():
    r = Replica(0, "t", 0)
    info = cli.ReplicaLogDirs
    assert cli.verify_line(r, "/d2", None) == (
        "Partition t-0 cannot be found in any live log directory on broker 0.", True)
    assert cli.verify_line(r, "/d2", info(None, None))[0].endswith("There is likely an offline log directory "
                                                                    "on the broker.")
    assert cli.verify_line(r, "/d2", info("/d2", None)) == ("Reassignment of replica t-0-0 completed successfully.",
                                                            True)
    assert cli.verify_line(r, "/d2", info("/d1", None)) == (
        "Partition t-0 on broker 0 is not being moved from log dir /d1 to /d2.", True)
    assert cli.verify_line(r, "/d2", info("/d1", "/d2")) == ("Reassignment of replica t-0-0 is still in progress.",
                                                             False)
    assert cli.verify_line(r, "/d2", info("/d1", "/d3")) == (
        "Partition t-0 on broker 0 is being moved to log dir /d3 instead of /d2.", False)


class FakeAdmin:
    """The admin calls the command makes, recorded; answers scripted per test."""

    def __init__(self, replicas: dict[TP, list[int]], ongoing=None, brokers=(1, 2, 3), dir_answers=(),
                 reassign_errors=None):
        self.replicas, self.ongoing, self.brokers = replicas, dict(ongoing or {}), list(brokers)
        self.dir_answers = list(dir_answers)      # one {(t, p, b): code} per AlterReplicaLogDirs call
        self.reassign_errors = reassign_errors or {}
        self.calls: list[tuple] = []

    def list_partition_reassignments(self, partitions=None):
        self.calls.append(("list", partitions))
        return {tp: r for tp, r in self.ongoing.items() if partitions is None or tp in partitions}

    def alter_partition_reassignments(self, targets):
        self.calls.append(("alter", dict(targets)))
        return {tp: self.reassign_errors.get(tp) for tp in targets}

    def broker_ids(self):
        return self.brokers

    def describe_topics(self, names):
        from kafkatier.admin.client import PartitionInfo, TopicInfo
        return [TopicInfo(n, None, False, tuple(PartitionInfo(tp.partition, rs[0], tuple(rs), tuple(rs))
                                                 for tp, rs in sorted(self.replicas.items()) if tp.topic == n))
                for n in names]

    def alter_configs(self, entity_type, name, set_configs=None, delete_configs=()):
        self.calls.append(("configs", entity_type, name, dict(set_configs or {}), tuple(delete_configs)))

    def alter_replica_log_dirs(self, moves):
        self.calls.append(("dirs", dict(moves)))
        answer = self.dir_answers.pop(0) if self.dir_answers else {}
        return {k: answer.get(k, 0) for k in moves}


def execute_args(**kw):
    args = parse("--execute", "--reassignment-json-file", "f")
    cli.check_options(args)
    for k, v in kw.items():
        setattr(args, k, v)
    return args


def entries(text: str):
    return plan.parse_reassignment_json(text)


def test_execute_sends_log_dirs_then_the_reassignment_then_retries_new_replicas(capsys):
    admin = FakeAdmin({TP("t", 0): [1, 2]}, dir_answers=[{("t", 0, 3): 9, ("t", 0, 1): 0}, {("t", 0, 3): 0}])
    rc = cli.execute(admin, entries('{"partitions":[{"topic":"t","partition":0,"replicas":[3,1],'
                                    '"log_dirs":["/b3/d2","/b1/d2"]}]}'), execute_args(throttle=1000))
    out = capsys.readouterr().out
    assert rc == 0
    kinds = [c[0] for c in admin.calls]
    assert kinds == ["list", "configs", "configs", "configs", "configs", "dirs", "alter", "dirs"]
    assert admin.calls[1] == ("configs", "topics", "t", {"leader.replication.throttled.replicas": "0:1,0:2",
                                                         "follower.replication.throttled.replicas": "0:3"}, ())
    assert [c[2] for c in admin.calls[2:5]] == ["1", "2", "3"]
    assert admin.calls[6] == ("alter", {TP("t", 0): [3, 1]})
    assert admin.calls[7] == ("dirs", {("t", 0, 3): "/b3/d2"})          # only the replica not created yet
    assert "Successfully started partition reassignment for t-0" in out
    assert "Successfully started log directory move(s) for: t-0-1,t-0-3" in out


def test_execute_refusals_and_failures():
    one = entries('{"partitions":[{"topic":"t","partition":0,"replicas":[2]}]}')
    running = {TP("u", 0): OngoingReassignment((1, 2), (2,), (1,))}
    with pytest.raises(cli.CommandFailed, match="Cannot execute because there is an existing partition assignment"):
        cli.execute(FakeAdmin({TP("t", 0): [1]}, ongoing=running), one, execute_args())
    admin = FakeAdmin({TP("t", 0): [1]}, ongoing=running)
    assert cli.execute(admin, one, execute_args(additional=True)) == 0       # --additional goes on
    with pytest.raises(UsageError, match="Unknown broker id 7"):
        cli.execute(FakeAdmin({TP("t", 0): [1]}), entries('{"partitions":[{"topic":"t","partition":0,"replicas":[7]}]}'),
                    execute_args())
    with pytest.raises(cli.CommandFailed, match="UNKNOWN_TOPIC_OR_PARTITION: Unable to find partition: t-5"):
        cli.execute(FakeAdmin({TP("t", 0): [1]}), entries('{"partitions":[{"topic":"t","partition":5,"replicas":[1]}]}'),
                    execute_args())
    failing = FakeAdmin({TP("t", 0): [1]}, reassign_errors={TP("t", 0): "INVALID_REPLICA_ASSIGNMENT: no"})
    with pytest.raises(cli.CommandFailed) as e:
        cli.execute(failing, one, execute_args())
    assert str(e.value) == "Error reassigning partition(s):\nt-0: INVALID_REPLICA_ASSIGNMENT: no"
    never = FakeAdmin({TP("t", 0): [1]}, dir_answers=[{("t", 0, 2): 9}] * 3)
    with pytest.raises(cli.CommandFailed, match="Timed out before log directory move.s. could be started for: t-0-2"):
        cli.execute(never, entries('{"partitions":[{"topic":"t","partition":0,"replicas":[2],"log_dirs":["/d"]}]}'),
                    execute_args(timeout=0))
    broken = FakeAdmin({TP("t", 0): [1]}, dir_answers=[{("t", 0, 1): 57}])
    with pytest.raises(cli.CommandFailed, match="Failed to alter dir for t-0-1: LOG_DIR_NOT_FOUND"):
        cli.execute(broken, entries('{"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/x"]}]}'),
                    execute_args())


def test_verify_reads_metadata_again_while_brokers_have_not_learned_a_finished_reassignment(monkeypatch):
    """The controller drops a finished partition from its list before every broker has its UpdateMetadata: the
    old replica set seen then is read again instead of being reported as a reassignment that never happened."""
    class LaggingAdmin(FakeAdmin):
        def describe_topics(self, names):
            self.calls.append(("describe", tuple(names)))
            if sum(c[0] == "describe" for c in self.calls) == 3:
                self.replicas[TP("t", 0)] = [3, 2]
            return super().describe_topics(names)

    target = entries('{"partitions":[{"topic":"t","partition":0,"replicas":[3,2]}]}')
    admin = LaggingAdmin({TP("t", 0): [3, 2, 1]})
    assert cli.partition_states(admin, target) == (["Reassignment of partition t-0 is completed."], False)
    monkeypatch.setattr(cli, "METADATA_SETTLE_S", 0.2)
    stuck = FakeAdmin({TP("t", 0): [1]})
    assert cli.partition_states(stuck, target) == (
        ["There is no active reassignment of partition t-0, but replica set is 1 rather than 3,2."], False)
