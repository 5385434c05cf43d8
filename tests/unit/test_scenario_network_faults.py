"""Link faults as scenario steps and nemesis entries (``scenario/network_faults.py``): parsing, bad input naming
the field, the seed's draws, and the timeline's spans.  No cluster."""
from __future__ import annotations

import pytest

from kafkatier.scenario.network_faults import LinkActionSpec, fault_of, link_spans
from kafkatier.scenario.schedule import derive
from kafkatier.scenario.spec import ScenarioSpecError, from_dict

BASE = {"name": "n", "cluster": {"brokers": 3, "links": True}, "topics": [{"name": "t"}]}


def step(**kw) -> dict:
    return {**BASE, "schedule": [{"at": 1, **kw}]}


def test_link_steps_load_with_their_fields():
    spec = from_dict({**BASE, "schedule": [
        {"at": 1, "action": "partition", "shape": "isolate", "target": "leader:t/0", "duration_s": 3},
        {"at": 2, "action": "partition", "from": [1], "to": "zookeeper", "one_way": True},
        {"at": 3, "action": "link_fault", "from": "brokers", "to": "brokers", "latency_ms": 100, "jitter_ms": 20},
        {"at": 4, "action": "link_fault", "from": 1, "to": 2, "bandwidth": "1MB/s", "direction": "backward"},
        {"at": 5, "action": "heal_links"}]})
    a = [s.link for s in spec.schedule]
    assert a[0] == LinkActionSpec(shape="isolate")
    assert a[1] == LinkActionSpec(sources=("1",), destinations=("zookeeper",), one_way=True)
    assert fault_of(a[2]).describe() == "latency 100±20ms"
    assert fault_of(a[3]).describe() == "bandwidth 1000000B/s backward"
    assert spec.cluster.links and a[4] == LinkActionSpec()
    assert "shape=isolate" in derive(spec, 1).describe()


@pytest.mark.parametrize("doc, message", [
    ({**BASE, "cluster": {"brokers": 3}, "schedule": [{"at": 1, "action": "heal_links"}]}, "needs [cluster] links"),
    (step(action="partition"), "gives `shape`, or `from` and `to`"),
    (step(action="partition", shape="isolate"), "schedule[0].target: required for shape 'isolate'"),
    (step(action="partition", shape="isolate-leader"), "schedule[0].topic: required"),
    (step(action="partition", shape="circle"), "schedule[0].shape"),
    (step(action="partition", **{"from": 1}), "`from` and `to` go together"),
    (step(action="partition", shape="halves", one_way=True), "one_way: only with `from` and `to`"),
    (step(action="link_fault", **{"from": 1, "to": 2}), "one of latency_ms, bandwidth, blackhole"),
    (step(action="link_fault", latency_ms=10, jitter_ms=30, **{"from": 1, "to": 2}), "latency needs"),
    (step(action="link_fault", bandwidth="fast", **{"from": 1, "to": 2}), "bad rate 'fast'"),
    (step(action="link_fault", bandwidth=1000, jitter_ms=3, **{"from": 1, "to": 2}), "jitter_ms: only with latency_ms"),
    (step(action="kill", target=1, latency_ms=5), "schedule[0].latency_ms: only for the link actions"),
    ({**BASE, "cluster": {"brokers": 3}, "nemesis": {"menu": ["partition-halves"]}}, "needs [cluster] links"),
])
def test_a_bad_link_step_names_the_field(doc, message):
    with pytest.raises(ScenarioSpecError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        from_dict(doc)


def test_nemesis_draws_link_faults_with_durations():
    spec = from_dict({**BASE, "duration_s": 60, "nemesis": {
        "menu": ["partition-isolate", "partition-halves", "link-latency", "link-bandwidth", "blackhole-isolate"]}})
    steps = derive(spec, 5).steps
    assert steps and all(s.action.link is not None and 1.0 <= s.duration_s <= 4.0 for s in steps)
    assert {s.action.action for s in steps} == {"partition", "link_fault"}
    assert derive(spec, 5) == derive(spec, 5)


def test_timeline_spans_pair_faults_with_their_heals():
    def e(t, f, **kw):
        return {"time": t * 1e9, "process": "nemesis", "f": f, **kw}
    entries = [e(1, "link-fault", fault=1, kind="partition", value=[1, 2], cut_from={"broker:1": ["broker:2"]}),
               e(2, "link-fault", fault=2, kind="latency", value=[3]),
               e(3, "link-heal", fault=1, value=[1, 2]),
               e(5, "link-fault", fault=3, kind="blackhole", value=[2]),
               e(6, "link-heal", fault=None, value=[])]
    spans = [(s["t0"], s["t1"], s["kind"]) for s in link_spans(entries, 10.0)]
    assert spans == [(1, 3, "partition"), (2, 6, "latency"), (5, 6, "blackhole")]


def test_client_groups_imply_links_and_workloads_name_them():
    spec = from_dict({"name": "g", "cluster": {"brokers": 3, "client_groups": ["producers"]},
                      "topics": [{"name": "t"}],
                      "workloads": [{"type": "producer", "topic": "t", "client_group": "producers"}],
                      "schedule": [{"at": 1, "action": "partition", "from": "client:producers", "to": "brokers"}]})
    assert spec.cluster.links and spec.cluster.client_groups == ("producers",)
    assert spec.workloads[0].client_group == "producers"
    with pytest.raises(ScenarioSpecError, match=r"workloads\[0\].client_group: 'consumers' is not in"):
        from_dict({**BASE, "workloads": [{"type": "consumer", "topic": "t", "client_group": "consumers"}]})
    with pytest.raises(ScenarioSpecError, match="cluster.client_groups"):
        from_dict({**BASE, "cluster": {"client_groups": ["Bad Name"]}})
