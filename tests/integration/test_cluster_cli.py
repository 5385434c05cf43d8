"""``kafkatier cluster up/describe/start-broker/down`` as a user runs them, on the embedded ZooKeeper."""
from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from kafkatier.cluster.manager import pid_alive
from kafkatier.waiting import wait_for
from kafkatier.zk.client import start_client

pytestmark = pytest.mark.integration


def test_cluster_lifecycle_from_the_cli(kafkatier_cli, tmp_path):
    d = str(tmp_path / "c")
    r = kafkatier_cli.run("cluster", "up", "--brokers", "2", "--log-dirs-per-broker", "2", "--data-dir", d,
                          "--detach", timeout=120)
    assert r.returncode == 0, r.stderr
    state = json.load(open(os.path.join(d, "cluster.json")))
    try:
        assert set(state) >= {"zookeeper", "bootstrap_servers", "brokers", "zookeeper_pid"}
        assert state["zookeeper"].startswith("127.0.0.1:")
        assert [b["id"] for b in state["brokers"]] == [1, 2]
        assert state["bootstrap_servers"] == ",".join(f"127.0.0.1:{b['port']}" for b in state["brokers"])
        for b in state["brokers"]:
            assert set(b) >= {"id", "port", "pid", "log_dirs"} and len(b["log_dirs"]) == 2
            assert pid_alive(b["pid"])
        again = kafkatier_cli.run("cluster", "up", "--brokers", "1", "--data-dir", d, "--detach", timeout=60)
        assert again.returncode == 1 and f"kafkatier cluster down --data-dir {d}" in again.stderr
        assert "zookeeper stop" not in again.stderr and len(again.stderr.strip().splitlines()) == 1, again.stderr
        assert all(pid_alive(b["pid"]) for b in state["brokers"])  # the running cluster is untouched
        zk = start_client(state["zookeeper"])
        try:
            assert sorted(zk.get_children("/brokers/ids")) == ["1", "2"]
            assert zk.exists("/controller") is not None
            # zkCli reads our znodes
            out = kafkatier_cli.run("zookeeper", "shell", "--zookeeper", state["zookeeper"], "get", "/controller")
            assert '"brokerid"' in out.stdout
            # tiered storage is on by default: a tiered topic is accepted, its remote storage under the data dir
            assert state["remote_storage_dir"] == os.path.join(d, "remote-storage")
            r = kafkatier_cli.run("topics", "--data-dir", d, "--create", "--topic", "tiered", "--partitions", "1",
                                  "--replication-factor", "2", "--config", "remote.storage.enable=true")
            assert r.returncode == 0, r.stderr
            # restart a SIGKILLed broker with its old settings
            victim = state["brokers"][1]
            os.kill(victim["pid"], signal.SIGKILL)
            wait_for(lambda: not pid_alive(victim["pid"]), 10, message="broker to die")
            stale = zk.exists("/brokers/ids/2")  # lives until the killed process's session expires
            r = kafkatier_cli.run("cluster", "start-broker", "--id", "2", "--data-dir", d, timeout=60)
            assert r.returncode == 0, r.stderr
            assert "registered and serving" in r.stdout
            new_pid = json.load(open(os.path.join(d, "cluster.json")))["brokers"][1]["pid"]
            assert new_pid != victim["pid"] and pid_alive(new_pid)
            assert stale is None or zk.exists("/brokers/ids/2").czxid > stale.czxid   # returned once re-registered
            r = kafkatier_cli.run("cluster", "describe", "--data-dir", d)
            assert r.returncode == 0 and "Broker 1" in r.stdout and "Broker 2" in r.stdout
            # a broker that dies during start-up: exit 1 with the last error line of its log
            r = kafkatier_cli.run("cluster", "stop-broker", "--id", "2", "--data-dir", d, timeout=60)
            assert r.returncode == 0, r.stderr
            state_now = json.load(open(os.path.join(d, "cluster.json")))
            state_now["brokers"][1]["args"] += ["--override", "min.insync.replicas=two"]
            with open(os.path.join(d, "cluster.json"), "w") as f:
                json.dump(state_now, f)
            r = kafkatier_cli.run("cluster", "start-broker", "--id", "2", "--data-dir", d, timeout=60)
            assert r.returncode == 1
            assert r.stderr.strip().splitlines()[-1].startswith(
                "kafkatier cluster start-broker: broker 2 exited with status 1 during start-up: "
                "kafkatier.server.config.BrokerSettingError: Invalid value two for configuration min.insync.replicas")
            assert "Traceback" not in r.stderr
        finally:
            zk.stop()
            zk.close()
    finally:
        r = kafkatier_cli.run("cluster", "down", "--data-dir", d, timeout=60)
    assert r.returncode == 0, r.stderr
    final = json.load(open(os.path.join(d, "cluster.json")))
    assert all(not pid_alive(p) for p in [state["zookeeper_pid"], *[b["pid"] for b in state["brokers"]]])
    assert final["zookeeper_pid"] is None


def test_bad_cluster_file_is_one_line_exit_2(kafkatier_cli, tmp_path):
    (tmp_path / "cluster.json").write_text("{not json")
    r = kafkatier_cli.run("cluster", "down", "--data-dir", str(tmp_path))
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "cluster.json" in r.stderr
    r = kafkatier_cli.run("cluster", "down", "--data-dir", str(tmp_path / "missing"))
    assert r.returncode == 2 and "cluster.json not found" in r.stderr


def test_cluster_up_exits_1_with_the_error_line_of_a_broker_that_dies(kafkatier_cli, tmp_path):
    d = str(tmp_path / "c")
    r = kafkatier_cli.run("cluster", "up", "--brokers", "1", "--data-dir", d, "--detach",
                          "--override", "min.insync.replicas=two", timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].startswith(
        "kafkatier cluster up: broker 1 exited with status 1 during start-up: "
        "kafkatier.server.config.BrokerSettingError: Invalid value two for configuration min.insync.replicas")
    assert "Traceback" not in r.stderr
    state = json.load(open(os.path.join(d, "cluster.json")))
    assert state["zookeeper_pid"] is None or not pid_alive(state["zookeeper_pid"])   # cleaned up


SECRET = "s3cr3t-never-shown"
SASL_OVERRIDES = {
    "listener.security.protocol": "SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config":
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        f'password="{SECRET}" user_broker="{SECRET}";',
    "ssl.keystore.password": SECRET,   # PASSWORD type although unused here: hidden all the same
}


def test_broker_secrets_live_only_in_a_0600_properties_file(cluster_factory, kafkatier_cli):
    c = cluster_factory(brokers=1, log_dirs=1, overrides=SASL_OVERRIDES)   # ready: the brokers' login works
    b = c.manager.broker(1)
    properties = os.path.join(c.manager.data_dir, "broker-1", "server.properties")
    assert b["args"][b["args"].index("--config") + 1] == properties
    assert os.stat(properties).st_mode & 0o777 == 0o600
    assert SECRET in open(properties).read()
    assert SECRET not in open(c.manager.cluster_file).read()
    ps = subprocess.run(["ps", "-ef", "ww"], capture_output=True, text=True, check=True).stdout
    assert any(f"--config {properties}" in line for line in ps.splitlines())   # the broker, as anyone sees it
    assert SECRET not in ps
    r = kafkatier_cli.run("cluster", "describe", "--data-dir", c.manager.data_dir)
    assert r.returncode == 0, r.stderr
    assert "listener.name.sasl_plaintext.plain.sasl.jaas.config=[hidden]" in r.stdout
    assert "ssl.keystore.password=[hidden]" in r.stdout and "sasl.enabled.mechanisms=PLAIN" in r.stdout
    r = kafkatier_cli.run("cluster", "describe", "--data-dir", c.manager.data_dir, "--json")
    assert r.returncode == 0 and SECRET not in r.stdout + r.stderr
    log_text = open(os.path.join(c.manager.data_dir, "logs", "broker-1.log")).read()
    assert "listener.name.sasl_plaintext.plain.sasl.jaas.config=[hidden]" in log_text and SECRET not in log_text


def test_bad_broker_properties_file_is_one_line_without_its_content(kafkatier_cli, tmp_path):
    bad = tmp_path / "server.properties"
    bad.write_text(f"sasl.jaas.config=x\n{SECRET}\n")
    r = kafkatier_cli.run("broker", "start", "--id", "1", "--zookeeper", "127.0.0.1:1", "--log-dirs",
                          str(tmp_path / "d"), "--config", str(bad))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "line 2: expected key=value" in r.stderr and SECRET not in r.stderr
    r = kafkatier_cli.run("cluster", "up", "--data-dir", str(tmp_path / "c"), "--override", f"password{SECRET}")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and SECRET not in r.stderr, r.stderr
