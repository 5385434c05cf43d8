"""kafka-topics' min-ISR filters, kafka-configs' entity shorthands (no cluster needed)."""
from __future__ import annotations

import pytest

from kafkatier.admin.client import PartitionInfo, TopicInfo
from kafkatier.cli import configs, get_offsets, topics
from kafkatier.cli.main import UsageError, build_parser, main


def _topic() -> TopicInfo:
    return TopicInfo("t", None, False, (
        PartitionInfo(0, 1, (1, 2, 3), (1, 2, 3)),
        PartitionInfo(1, 1, (1, 2, 3), (1, 2)),
        PartitionInfo(2, 1, (1, 2, 3), (1,)),
        PartitionInfo(3, -1, (1, 2, 3), ()),
    ))


def _partitions(lines):
    return [int(ln.split("Partition: ")[1].split()[0]) for ln in lines]


def test_min_isr_filters():
    t = _topic()
    assert _partitions(topics.describe_lines([t], {}, at_min_isr=True, min_isr={"t": 2})) == [1]
    assert _partitions(topics.describe_lines([t], {}, under_min_isr=True, min_isr={"t": 2})) == [2, 3]
    assert _partitions(topics.describe_lines([t], {}, unavailable=True)) == [3]
    line = topics.describe_lines([t], {}, at_min_isr=True, min_isr={"t": 2})[0]
    assert line.split() == ["Topic:", "t", "Partition:", "1", "Leader:", "1", "Replicas:", "1,2,3", "Isr:", "1,2"]


def test_min_isr_filters_need_describe(capsys):
    assert main(["topics", "--bootstrap-server", "127.0.0.1:1", "--list", "--at-min-isr-partitions"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv,etype,name,default", [
    (["--topic", "t1"], "topics", "t1", False),
    (["--broker", "1"], "brokers", "1", False),
    (["--broker-defaults"], "brokers", None, True),
    (["--entity-type", "topics", "--entity-name", "t2"], "topics", "t2", False),
])
def test_configs_shorthands(argv, etype, name, default):
    args = build_parser().parse_args(["configs", "--bootstrap-server", "127.0.0.1:1", "--describe", *argv])
    configs.check_args(args)
    assert (args.entity_type, args.entity_name, args.entity_default) == (etype, name, default)


@pytest.mark.parametrize("argv", [["--topic", "a", "--broker", "1"], ["--topic", "a", "--entity-type", "topics"], []])
def test_configs_bad_entity_one_line(argv, capsys):
    args = build_parser().parse_args(["configs", "--bootstrap-server", "127.0.0.1:1", "--describe", *argv])
    with pytest.raises(UsageError):
        configs.check_args(args)
    assert main(["configs", "--bootstrap-server", "127.0.0.1:1", "--describe", *argv]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_get_offsets_topic_partition_patterns():
    rules = get_offsets.parse_topic_partitions("t.*:1,u:2-4,:-1,v")
    allowed = {(t, p) for t in ("t1", "u", "v", "w") for p in range(6) if any(r.allows(t, p) for r in rules)}
    assert allowed == {("t1", 1), ("u", 2), ("u", 3), ("v", 0), ("v", 1), ("v", 2), ("v", 3), ("v", 4), ("v", 5),
                       ("t1", 0), ("u", 0), ("w", 0)}
    with pytest.raises(UsageError, match="Invalid rule specification: t:x"):
        get_offsets.parse_topic_partitions("t:x")
    assert get_offsets.parse_time("max-timestamp") == -3 and get_offsets.parse_time("1700000000000") == 1700000000000
    with pytest.raises(UsageError, match="Malformed time argument soon"):
        get_offsets.parse_time("soon")
