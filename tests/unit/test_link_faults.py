"""Link fault value types and shapes (``cluster/link_faults.py``): pure, no process."""
from __future__ import annotations

import pytest

from kafkatier.cluster.link_faults import (BACKWARD, BANDWIDTH, BLACKHOLE, FORWARD, LATENCY, PARTITION, Link,
                                           LinkFault, LinkFaultError, LinkTable, behaviour, one_way, parse_rate,
                                           shape_faults)


def table(brokers=(1, 2, 3, 4, 5), zk=1) -> LinkTable:
    links = []
    for a in brokers:
        links += [Link(f"broker:{a}", f"broker:{b}", f"127.0.0.1:{9000 + b}") for b in brokers if b != a]
        links += [Link(f"broker:{a}", f"zookeeper:{n}", f"127.0.0.1:{2180 + n}") for n in range(1, zk + 1)]
    return LinkTable(tuple(links))


def cut_pairs(plan) -> set[frozenset]:
    return {frozenset(name.split("->")) for name, _ in plan.faults}


def test_isolate_cuts_a_node_from_every_peer_and_zookeeper():
    plan = shape_faults(table(), "isolate", node=2)
    assert cut_pairs(plan) == {frozenset({"broker:2", f"broker:{b}"}) for b in (1, 3, 4, 5)} \
        | {frozenset({"broker:2", "zookeeper:1"})}
    assert len(plan.faults) == 9  # 4 peers both ways + ZooKeeper
    assert all(f.kind == PARTITION for _, f in plan.faults)


def test_isolate_zookeeper_only():
    plan = shape_faults(table(zk=3), "isolate-zookeeper", node=1, kind=BLACKHOLE)
    assert plan.link_names() == ["broker:1->zookeeper:1", "broker:1->zookeeper:2", "broker:1->zookeeper:3"]
    assert all(f.kind == BLACKHOLE for _, f in plan.faults)


def test_isolate_leader_from_followers_only():
    plan = shape_faults(table(), "isolate-leader", leader=3, followers=[1, 5])
    assert cut_pairs(plan) == {frozenset({"broker:3", "broker:1"}), frozenset({"broker:3", "broker:5"})}


def test_halves_keep_zookeeper_with_the_larger_half():
    plan = shape_faults(table(), "halves")
    pairs = cut_pairs(plan)
    assert frozenset({"broker:1", "broker:3"}) in pairs and frozenset({"broker:1", "zookeeper:1"}) in pairs
    assert frozenset({"broker:3", "zookeeper:1"}) not in pairs and frozenset({"broker:1", "broker:2"}) not in pairs


def test_random_halves_follow_the_seed():
    a = shape_faults(table(), "random-halves", seed=7)
    assert a == shape_faults(table(), "random-halves", seed=7)
    assert any(shape_faults(table(), "random-halves", seed=s).faults != a.faults for s in range(1, 6))


def test_bridge_node_reaches_both_sides():
    plan = shape_faults(table(), "bridge")  # [1, 2] | [3 (bridge), 4, 5]
    pairs = cut_pairs(plan)
    assert not any("broker:3" in p for p in pairs)
    assert frozenset({"broker:1", "broker:4"}) in pairs and frozenset({"broker:2", "zookeeper:1"}) in pairs


def test_one_way_drops_only_the_bytes_from_the_source():
    faults = dict(one_way(table(), {"broker:1"}, {"broker:2"}))
    assert faults == {"broker:1->broker:2": LinkFault(BLACKHOLE, FORWARD),
                      "broker:2->broker:1": LinkFault(BLACKHOLE, BACKWARD)}


@pytest.mark.parametrize("kwargs, message", [
    (dict(shape="isolate", node=9), "unknown broker 9"),
    (dict(shape="isolate"), "needs a broker"),
    (dict(shape="circle"), "unknown shape 'circle'"),
    (dict(shape="isolate-leader"), "needs a partition"),
])
def test_bad_shapes(kwargs, message):
    with pytest.raises(LinkFaultError, match=message):
        shape_faults(table(), **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(kind="jam"), "unknown link fault"),
    (dict(kind=PARTITION, direction=FORWARD), "cuts both directions"),
    (dict(kind=LATENCY, latency_ms=0), "latency needs"),
    (dict(kind=LATENCY, latency_ms=10, jitter_ms=20), "latency needs"),
    (dict(kind=BANDWIDTH), "bandwidth needs"),
    (dict(kind=BLACKHOLE, direction="sideways"), "unknown direction"),
])
def test_bad_faults(kwargs, message):
    with pytest.raises(LinkFaultError, match=message):
        LinkFault(**kwargs)


def test_a_fault_replaces_its_kind_and_behaviour_combines_kinds():
    link = Link("broker:1", "broker:2", "127.0.0.1:1")
    link = link.with_fault(LinkFault(LATENCY, latency_ms=10)).with_fault(LinkFault(LATENCY, FORWARD, latency_ms=30))
    link = link.with_fault(LinkFault(BANDWIDTH, BACKWARD, rate_bytes_per_s=1000))
    assert [f.describe() for f in link.faults] == ["latency 30±0ms forward", "bandwidth 1000B/s backward"]
    assert behaviour(link.faults, FORWARD).latency_ms == 30 and behaviour(link.faults, BACKWARD).latency_ms == 0
    assert behaviour(link.faults, BACKWARD).rate_bytes_per_s == 1000
    assert link.healed([LATENCY]).faults == (LinkFault(BANDWIDTH, BACKWARD, rate_bytes_per_s=1000),)
    assert link.healed().faults == ()
    assert Link.from_json(link.to_json()) == link


def test_a_brokers_zookeeper_connect_through_its_links_keeps_the_chroot():
    from kafkatier.cluster.link_faults import linked_zookeeper_connect, zookeeper_servers
    connect = "10.0.0.1:2181,10.0.0.2:2181,10.0.0.3:2181/cluster-ab"
    assert zookeeper_servers(connect) == (["10.0.0.1:2181", "10.0.0.2:2181", "10.0.0.3:2181"], "/cluster-ab")
    assert zookeeper_servers("127.0.0.1:2181") == (["127.0.0.1:2181"], "")
    t = LinkTable(tuple(Link("broker:2", f"zookeeper:{n}", f"10.0.0.{n}:2181", port=41000 + n) for n in (1, 2, 3)))
    assert linked_zookeeper_connect(t, 2, connect) == \
        "127.0.0.1:41001,127.0.0.1:41002,127.0.0.1:41003/cluster-ab"


@pytest.mark.parametrize("text, rate", [("1MB/s", 1_000_000), ("512KiB/s", 524288), ("250000", 250000),
                                        ("1.5 MiB/s", 1572864), ("2k", 2000)])
def test_parse_rate(text, rate):
    assert parse_rate(text) == rate


@pytest.mark.parametrize("text", ["fast", "0", "-1MB/s", "1xB/s"])
def test_parse_rate_rejects(text):
    with pytest.raises(LinkFaultError):
        parse_rate(text)


# --- the CLI's bad input: one line, exit 2 (no process runs: the table is read from the files) ----------------
@pytest.fixture
def cluster_dir(tmp_path):
    import json

    from kafkatier.cluster.link_state import LinkStateFile
    (tmp_path / "cluster.json").write_text(json.dumps({"zookeeper": "127.0.0.1:1", "bootstrap_servers": "x",
                                                       "brokers": [], "links": {"enabled": True}}))
    LinkStateFile(str(tmp_path)).write(table(brokers=(1, 2, 3)))
    return tmp_path


@pytest.mark.parametrize("argv, message", [
    (["partition", "--shape", "isolate", "--node", "9"], "unknown broker 9 (brokers: 1, 2, 3)"),
    (["partition", "--from", "1", "--to", "7"], "unknown broker 7"),
    (["partition", "--from", "1"], "give --shape, or --from and --to"),
    (["partition", "--shape", "isolate-leader", "--partition", "t"], "--partition expects TOPIC:N"),
    (["link-fault", "--from", "1", "--to", "2", "--bandwidth", "fast"], "bad rate 'fast'"),
    (["link-fault", "--from", "1", "--to", "2", "--latency-ms", "10", "--jitter-ms", "50"], "latency needs"),
    (["link-fault", "--from", "1", "--to", "moon", "--blackhole"], "unknown node 'moon'"),
    (["heal", "--link", "broker:1->broker:9"], "no link 'broker:1->broker:9'"),
    (["partition", "--shape", "square"], "invalid choice: 'square'"),
    (["partition", "--shape", "halves", "--node", "1"], "--node goes with --shape isolate"),
    (["partition", "--shape", "halves", "--one-way"], "exclusive"),
    (["partition", "--from", "1", "--to", "2", "--partition", "t:0"], "--partition goes with"),
    (["link-fault", "--from", "1", "--to", "2", "--blackhole", "--jitter-ms", "5"], "--jitter-ms goes with"),
    (["link-fault", "--from", "1", "--to", "2", "--partition", "--direction", "forward"], "cuts both directions"),
])
def test_cli_bad_input_is_one_line_and_exit_2(cluster_dir, capsys, argv, message):
    from kafkatier.cli.main import main
    try:
        rc = main(["cluster", *argv, "--data-dir", str(cluster_dir)])
    except SystemExit as e:  # argparse's own errors
        rc = e.code
    out, err = capsys.readouterr()
    assert rc == 2
    assert err.count("\n") == 1 and message in err, err


def test_cli_without_links(tmp_path, capsys):
    import json

    from kafkatier.cli.main import main
    (tmp_path / "cluster.json").write_text(json.dumps({"zookeeper": "z", "bootstrap_servers": "x", "brokers": []}))
    assert main(["cluster", "heal", "--data-dir", str(tmp_path)]) == 2
    assert "runs without links" in capsys.readouterr().err
