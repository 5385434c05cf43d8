"""The embedded ZooKeeper, the client factory against it, and the ``kafkatier zookeeper`` commands."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess

import pytest

from kafkatier.zk import paths
from kafkatier.zk.client import ZooKeeperUnavailableError, ensure_persistent_paths, start_client
from kafkatier.cluster.embedded_zookeeper import (
    EmbeddedZooKeeper, JavaNotFoundError, ZooKeeperAlreadyRunningError, ZooKeeperJarsNotFoundError,
    four_letter_word, free_port, pid_alive,
)
from kafkatier.waiting import poll_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def test_server_serves_keeps_data_and_port_across_restart_and_stops(tmp_path):
    server = EmbeddedZooKeeper(tmp_path / "zk")
    with server:
        assert four_letter_word("127.0.0.1", server.port, "ruok") == "imok"
        assert "Mode: standalone" in four_letter_word("127.0.0.1", server.port, "srvr")
        client = start_client(server.connect_string, connect_timeout=10)
        client.create("/x", b"hello")
        assert client.get("/x")[0] == b"hello"
        client.stop()
        client.close()
        pid, port, connect = server.pid, server.port, server.connect_string
        assert server.pid_path.read_text().strip() == str(pid)
        print(f"embedded ZooKeeper start to serving: {server.last_start_seconds:.2f}s")

        assert server.stop() is not None
        assert not pid_alive(pid)
        assert not port_open(port)
        assert not server.pid_path.exists()

        server.start()  # same data dir: znodes and connect string survive
        assert server.connect_string == connect
        client = start_client(server.connect_string, connect_timeout=10)
        assert client.get("/x")[0] == b"hello"
        client.stop()
        client.close()
    assert not pid_alive(server.pid)
    assert "binding to port" in server.log_path.read_text()


def test_second_server_on_same_data_dir_is_refused(zookeeper):
    with pytest.raises(ZooKeeperAlreadyRunningError, match="already running"):
        EmbeddedZooKeeper(zookeeper.data_dir).start()
    assert zookeeper.is_running()


@pytest.mark.parametrize("session_timeout", [4.0, 6.0])
def test_short_session_timeouts_are_granted(zookeeper, session_timeout):
    client = start_client(zookeeper.connect_string, timeout=session_timeout)
    try:
        sid = f"sid=0x{client._session_id:x}"
        line = next(ln for ln in four_letter_word("127.0.0.1", zookeeper.port, "cons").splitlines() if sid in ln)
        assert re.search(r"\bto=(\d+)", line).group(1) == str(int(session_timeout * 1000))
    finally:
        client.stop()
        client.close()


def test_zk_fixture_is_chrooted(zk_root, _zk_session_client):
    connect, client = zk_root
    client.create("/x", b"v")
    chroot = connect.split("/", 1)[1]
    assert _zk_session_client.get(f"/{chroot}/x")[0] == b"v"


def test_ensure_persistent_paths_is_idempotent(zk):
    zk.create(paths.BROKER_IDS, makepath=True)  # one already there
    ensure_persistent_paths(zk, paths.PERSISTENT_PATHS)
    ensure_persistent_paths(zk, paths.PERSISTENT_PATHS)
    for p in paths.PERSISTENT_PATHS:
        assert zk.exists(p) is not None, p


def test_start_client_names_the_unreachable_server():
    hosts = f"127.0.0.1:{free_port()}"
    with pytest.raises(ZooKeeperUnavailableError, match=re.escape(hosts)):
        start_client(hosts, connect_timeout=0.5)


def test_missing_java_is_a_clear_error(tmp_path, monkeypatch, kafkatier_cli):
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    monkeypatch.setenv("PATH", str(empty_bin))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    server = EmbeddedZooKeeper(tmp_path / "zk")
    with pytest.raises(JavaNotFoundError, match="Java 17\\+ is required.*openjdk-17-jre-headless"):
        server.start()
    assert not server.pid_path.exists()

    env = {k: v for k, v in kafkatier_cli.env.items() if k != "JAVA_HOME"}
    env["PATH"] = str(empty_bin)
    result = subprocess.run([*kafkatier_cli.argv, "zookeeper", "start", "--port", "0",
                             "--data-dir", str(tmp_path / "cli"), "--detach"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "Java 17+ is required" in result.stderr and "Traceback" not in result.stderr


def test_missing_jars_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKATIER_ZOOKEEPER_JARS", str(tmp_path))
    with pytest.raises(ZooKeeperJarsNotFoundError, match=r"zookeeper-3\.\*\.jar"):
        EmbeddedZooKeeper(tmp_path / "zk").start()


def test_cli_start_detach_then_stop(tmp_path, kafkatier_cli):
    data_dir = tmp_path / "zk"
    started = kafkatier_cli.run("zookeeper", "start", "--port", "0", "--data-dir", str(data_dir), "--detach")
    assert started.returncode == 0, started.stderr
    connect = started.stdout.strip()
    host, port = connect.split(":")
    assert host == "127.0.0.1"
    pid = int((data_dir / "zookeeper.pid").read_text())
    try:
        assert four_letter_word(host, int(port), "ruok") == "imok"  # outlived the CLI process

        again = kafkatier_cli.run("zookeeper", "start", "--port", "0", "--data-dir", str(data_dir), "--detach")
        assert again.returncode == 1 and "already running" in again.stderr

        stopped = kafkatier_cli.run("zookeeper", "stop", "--data-dir", str(data_dir))
        assert stopped.returncode == 0, stopped.stderr
        assert not pid_alive(pid)
        assert not port_open(int(port))
        assert not (data_dir / "zookeeper.pid").exists()
        assert (data_dir / "zookeeper.log").stat().st_size > 0

        nothing = kafkatier_cli.run("zookeeper", "stop", "--data-dir", str(data_dir))
        assert nothing.returncode == 1 and "No zookeeper server to stop" in nothing.stderr
    finally:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_cli_foreground_stops_cleanly_on_signal(tmp_path, kafkatier_cli, sig):
    data_dir = tmp_path / "zk"
    proc = kafkatier_cli.popen("zookeeper", "start", "--port", "0", "--data-dir", str(data_dir),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        connect = proc.stdout.readline().strip()  # printed once serving
        assert connect.startswith("127.0.0.1:"), proc.stderr.read() if proc.poll() is not None else connect
        java_pid = int((data_dir / "zookeeper.pid").read_text())
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == 0
        assert poll_until(lambda: not pid_alive(java_pid), 5)
        assert not (data_dir / "zookeeper.pid").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_shell_reads_a_znode(zk_root, kafkatier_cli):
    connect, client = zk_root
    client.create("/x", b"shell-sees-this")
    result = kafkatier_cli.run("zookeeper", "shell", "--zookeeper", connect, "get", "/x")
    assert result.returncode == 0, result.stderr
    assert "shell-sees-this" in result.stdout.splitlines()

    missing = kafkatier_cli.run("zookeeper", "shell", "--zookeeper", connect, "get", "/nope")
    assert missing.returncode != 0
    assert "Node does not exist: /nope" in missing.stderr


def test_cli_shell_rejects_a_bad_address(kafkatier_cli):
    result = kafkatier_cli.run("zookeeper", "shell", "--zookeeper", "no-port", "ls", "/")
    assert result.returncode == 2
    assert "host:port" in result.stderr
