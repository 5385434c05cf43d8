"""The Kafka-style client commands (topics, configs, produce, consume): option and input-file parsing, output
formats, error names and bounded retries.  Nothing here talks to a broker; describe results are built by hand.
"""
from __future__ import annotations

import collections
import io
import socket
import time
import uuid

import pytest
from kafka.errors import NotControllerError, UnknownTopicOrPartitionError, for_code
from kafka.future import Future

from kafkatier.admin import bootstrap
from kafkatier.admin.bootstrap import BootstrapConfigError, HostPort, NoReachableBrokerError
from kafkatier.admin.client import (AdminClient, AdminError, ConfigEntry, ConfigSynonym, NewTopicSpec,
                                    PartitionInfo, RetryPolicy, TopicInfo, format_error, kafka_uuid,
                                    to_admin_error)
from kafkatier.cli import configs, consume, produce, topics
from kafkatier.cli.main import UsageError, main
from kafkatier.zk.codecs import BrokerRegistration
from kafkatier.cluster.embedded_zookeeper import free_port


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    return free_port("127.0.0.1")


# ---------------------------------------------------------------------------------------------- --add-config

@pytest.mark.parametrize("text, expected", [
    ("k1=v1", {"k1": "v1"}),
    ("k1=v1,k2=[a,b,c],k3=v3", {"k1": "v1", "k2": "a,b,c", "k3": "v3"}),
    ("cleanup.policy=[compact,delete]", {"cleanup.policy": "compact,delete"}),
    (" k1 = v1 ,k2= v2", {"k1": "v1", "k2": "v2"}),
    ("k1=v1,", {"k1": "v1"}),                                  # Java's split drops the trailing empty item
    ("k=[a=b,c]", {"k": "a=b,c"}),                             # '=' inside brackets belongs to the value
    ("k=", {"k": ""}),
    ("remote.log.copy.disable=true,local.retention.ms=-2,local.retention.bytes=-2",
     {"remote.log.copy.disable": "true", "local.retention.ms": "-2", "local.retention.bytes": "-2"}),
])
def test_add_config_splits_on_commas_outside_brackets(text, expected):
    assert configs.parse_add_config(text) == expected


@pytest.mark.parametrize("text", ["k1", "k1=v1,k2", "a=b=c", "", ",", "k1=v1,,k2=v2"])
def test_add_config_without_key_equals_value_is_refused(text):
    with pytest.raises(UsageError, match='must be in the format "key=val"'):
        configs.parse_add_config(text)


def test_add_config_key_with_illegal_character_is_refused():
    with pytest.raises(UsageError, match="Invalid character found for config key: bad key"):
        configs.parse_add_config("bad key=1")


def test_bad_add_config_exits_2_with_one_line_before_connecting(capsys):
    rc, out, err = run_cli(capsys, "configs", "--bootstrap-server", f"127.0.0.1:{closed_port()}",
                           "--entity-type", "topics", "--entity-name", "t", "--alter", "--add-config", "a=b=c")
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and "must be in the format" in err


def test_delete_config_list():
    assert configs.parse_delete_config(" a, b ,,a") == ["a", "b"]
    with pytest.raises(UsageError):
        configs.parse_delete_config(" , ")


@pytest.mark.parametrize("argv, message", [
    (["--alter", "--entity-name", "t"], "At least one of --add-config"),
    (["--alter", "--entity-name", "t", "--add-config", "a=1", "--add-config-file", "f"], "Only one of"),
    (["--alter", "--add-config", "a=1"], "--entity-name must be specified"),
    (["--describe", "--add-config", "a=1"], "--add-config can only be used with --alter"),
    (["--alter", "--entity-name", "t", "--all", "--add-config", "a=1"], "--all can only be used"),
    (["--alter", "--entity-name", "t", "--add-config", "a=1", "--delete-config", "a"], "both added and deleted"),
])
def test_configs_option_combinations(capsys, argv, message):
    rc, _out, err = run_cli(capsys, "configs", "--bootstrap-server", f"127.0.0.1:{closed_port()}",
                            "--entity-type", "topics", *argv)
    assert rc == 2 and message in err and err.count("\n") == 1


def test_configs_broker_loggers_are_describe_only(capsys):
    rc, _out, err = run_cli(capsys, "configs", "--bootstrap-server", "127.0.0.1:9092", "--entity-type",
                            "broker-loggers", "--entity-name", "1", "--alter", "--add-config", "a=1")
    assert rc == 2 and "--alter supports --entity-type topics or brokers or users or clients only" in err


def test_configs_alter_users_and_clients_refuse_unknown_keys(capsys):
    rc, _out, err = run_cli(capsys, "configs", "--bootstrap-server", "127.0.0.1:9092", "--entity-type", "clients",
                            "--entity-name", "1", "--alter", "--add-config", "a=1")
    assert rc == 2 and "Invalid configuration key a" in err and len(err.splitlines()) == 1
    rc, _out, err = run_cli(capsys, "configs", "--bootstrap-server", "127.0.0.1:9092", "--entity-type", "users",
                            "--entity-name", "u", "--alter", "--add-config", "a=1")
    assert rc == 2 and "Invalid configuration key a" in err
    rc, out, err = run_cli(capsys, "configs", "--bootstrap-server", "127.0.0.1:9092", "--entity-type", "users",
                           "--entity-name", "u", "--alter", "--add-config", "SCRAM-SHA-256=[password=]")
    assert rc == 2 and len(err.splitlines()) == 1 and "password is required" in err


def test_configs_broker_name_must_be_an_id(capsys):
    rc, _out, err = run_cli(capsys, "configs", "--bootstrap-server", "127.0.0.1:9092", "--entity-type", "brokers",
                            "--entity-name", "one", "--describe")
    assert rc == 2 and "must be a valid integer broker id" in err


# ------------------------------------------------------------------------------------------ properties files

def test_properties_file_syntax(tmp_path):
    f = tmp_path / "c.properties"
    f.write_text("# comment\n! also a comment\n\n  a=1\nb : two words  \nc=x\\\n   y\nd=tab\\there\ne=\\u0041\n"
                 "f==starts with equals\nurl=http://h:1/p\n")
    assert bootstrap.load_properties(f) == {"a": "1", "b": "two words", "c": "xy", "d": "tab\there", "e": "A",
                                            "f": "=starts with equals", "url": "http://h:1/p"}


@pytest.mark.parametrize("content, message", [
    (b"a=1\njust-a-key\n", "line 2: expected key=value"),
    (b"=1\n", "line 1: empty key"),
    (b"a=\\u00zz\n", "malformed \\uXXXX"),
    (b"a=\xff\xfe\n", "not UTF-8"),
])
def test_malformed_properties_file_names_the_line(tmp_path, content, message):
    f = tmp_path / "bad.properties"
    f.write_bytes(content)
    with pytest.raises(BootstrapConfigError, match=message.replace("\\", "\\\\")):
        bootstrap.load_properties(f)


def test_add_config_file_good_and_malformed(tmp_path, capsys):
    good = tmp_path / "good.properties"
    good.write_text("retention.ms=1000\ncleanup.policy=compact,delete\n")
    assert configs.load_add_config_file(str(good)) == {"retention.ms": "1000", "cleanup.policy": "compact,delete"}
    bad = tmp_path / "bad.properties"
    bad.write_text("retention.ms\n")
    rc, out, err = run_cli(capsys, "configs", "--bootstrap-server", f"127.0.0.1:{closed_port()}",
                           "--entity-type", "topics", "--entity-name", "t", "--alter", "--add-config-file", str(bad))
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and "bad.properties line 1: expected key=value" in err


@pytest.mark.parametrize("content, message", [
    ("request.timeout.ms=soon\n", "request.timeout.ms: expected an integer"),
    ("security.protocol=TLS\n", "security.protocol: expected one of"),
    ("no separator here\n", "line 1: expected key=value"),
])
def test_malformed_command_config_exits_2_with_one_line(tmp_path, capsys, content, message):
    f = tmp_path / "client.properties"
    f.write_text(content)
    rc, out, err = run_cli(capsys, "topics", "--bootstrap-server", f"127.0.0.1:{closed_port()}",
                           "--command-config", str(f), "--list")
    assert rc == 2 and out == "" and err.count("\n") == 1 and message in err


def test_missing_command_config_file_exits_2(tmp_path, capsys):
    rc, _out, err = run_cli(capsys, "topics", "--bootstrap-server", "127.0.0.1:9092",
                            "--command-config", str(tmp_path / "nope"), "--list")
    assert rc == 2 and "cannot read command config file" in err


def test_command_config_maps_to_kafka_python_kwargs():
    settings = bootstrap.client_kwargs_from_properties({
        "security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            'username="alice" password="s3cr\\"et";',
        "client.id": "ops", "request.timeout.ms": "5000", "send.buffer.bytes": "-1",
        "ssl.truststore.location": "/ca.pem", "ssl.truststore.type": "PEM",
        "ssl.keystore.location": "/ks.jks", "ssl.endpoint.identification.algorithm": "",
        "linger.ms": "5"})
    assert settings.kwargs == {
        "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
        "sasl_plain_password": 's3cr"et', "client_id": "ops", "request_timeout_ms": 5000,
        "send_buffer_bytes": None, "ssl_cafile": "/ca.pem", "ssl_check_hostname": False}
    assert "linger.ms" in settings.ignored
    assert any(k.startswith("ssl.keystore.location") for k in settings.ignored)


def test_jaas_config_for_other_modules_is_ignored_and_garbage_refused():
    settings = bootstrap.client_kwargs_from_properties(
        {"sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;"})
    assert settings.kwargs == {} and settings.ignored == ("sasl.jaas.config",)
    with pytest.raises(BootstrapConfigError, match="sasl.jaas.config"):
        bootstrap.client_kwargs_from_properties({"sasl.jaas.config": "nonsense"})


# ------------------------------------------------------------------------------------------ bootstrap servers

def test_bootstrap_server_list_parsing():
    assert bootstrap.parse_bootstrap_servers("a:1, b:2,a:1,[::1]:9092") == (
        HostPort("a", 1), HostPort("b", 2), HostPort("::1", 9092))
    assert str(HostPort("::1", 9092)) == "[::1]:9092"
    for bad in ("", "host", "host:0", "host:70000", "host:port", ","):
        with pytest.raises(BootstrapConfigError):
            bootstrap.parse_bootstrap_servers(bad)


def test_no_connection_option_exits_2(capsys):
    rc, out, err = run_cli(capsys, "topics", "--list")
    assert rc == 2 and out == ""
    assert err == "kafkatier topics: one of --bootstrap-server, --zookeeper or --data-dir is required\n"


def test_cluster_file(tmp_path):
    (tmp_path / "cluster.json").write_text('{"zookeeper": "127.0.0.1:2181", "bootstrap_servers": "127.0.0.1:1,'
                                           '127.0.0.1:2"}')
    assert bootstrap.servers_from_cluster_file(tmp_path) == (HostPort("127.0.0.1", 1), HostPort("127.0.0.1", 2))
    with pytest.raises(BootstrapConfigError, match="not found: no local cluster"):
        bootstrap.servers_from_cluster_file(tmp_path / "missing")
    (tmp_path / "cluster.json").write_text('{"zookeeper": ')
    with pytest.raises(BootstrapConfigError, match="cannot read"):
        bootstrap.servers_from_cluster_file(tmp_path)
    (tmp_path / "cluster.json").write_text('{"zookeeper": "z"}')
    with pytest.raises(BootstrapConfigError, match="no \"bootstrap_servers\""):
        bootstrap.servers_from_cluster_file(tmp_path)


def test_unreachable_brokers_are_one_line_and_exit_1(capsys):
    port = closed_port()
    with pytest.raises(NoReachableBrokerError, match=f"no broker reachable at 127.0.0.1:{port}"):
        bootstrap.resolve_bootstrap_servers(f"127.0.0.1:{port}")
    rc, out, err = run_cli(capsys, "topics", "--bootstrap-server", f"127.0.0.1:{port}", "--list")
    assert rc == 1 and out == ""
    assert err == f"Error while executing topic command : no broker reachable at 127.0.0.1:{port} " \
                  "(Connection refused)\n"


def test_reachable_servers_come_first():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        up = f"127.0.0.1:{listener.getsockname()[1]}"
        down = f"127.0.0.1:{closed_port()}"
        assert bootstrap.resolve_bootstrap_servers(f"{down},{up}") == [up, down]


def test_zookeeper_registrations_to_endpoints():
    v5 = BrokerRegistration.create(2, ["INTERNAL://10.0.0.2:9093", "EXTERNAL://127.0.0.1:19092"],
                                   {"INTERNAL": "SSL", "EXTERNAL": "PLAINTEXT"}, timestamp_ms=1)
    v4 = BrokerRegistration.decode(
        b'{"version":4,"host":"127.0.0.1","port":19091,"jmx_port":-1,"timestamp":"1",'
        b'"endpoints":["PLAINTEXT://127.0.0.1:19091"],"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"}}',
        broker_id=1, path="/brokers/ids/1")
    assert bootstrap.endpoints_for_protocol([v5, v4]) == (HostPort("127.0.0.1", 19091),
                                                          HostPort("127.0.0.1", 19092))
    assert bootstrap.endpoints_for_protocol([v5, v4], "SSL") == (HostPort("10.0.0.2", 9093),)


# ------------------------------------------------------------------------------------------------ topics

def test_replica_assignment():
    assert topics.parse_replica_assignment("1:2:3,2:3:1") == {0: (1, 2, 3), 1: (2, 3, 1)}
    assert topics.parse_replica_assignment(" 1 : 2 ") == {0: (1, 2)}
    with pytest.raises(UsageError, match="may not contain duplicate entries: 1"):
        topics.parse_replica_assignment("1:2,1:1")
    with pytest.raises(UsageError, match="Partition 1 has different replication factor: 2"):
        topics.parse_replica_assignment("1:2,2")
    with pytest.raises(UsageError, match="not an integer"):
        topics.parse_replica_assignment("1:x")
    with pytest.raises(UsageError, match="not an integer"):
        topics.parse_replica_assignment("1:2,")


@pytest.mark.parametrize("argv, message", [
    (["--create", "--topic", "t", "--replica-assignment", "1:1"], "duplicate entries"),
    (["--create", "--topic", "t", "--replica-assignment", "1:2", "--partitions", "2"], "cannot be used with"),
    (["--create"], 'Missing required argument "[topic]"'),
    (["--create", "--topic", "t", "--partitions", "0"], "The partitions must be greater than 0"),
    (["--create", "--topic", "t", "--replication-factor", "0"], "between 1 and 32767"),
    (["--create", "--topic", "bad/name"], "contains a character other than"),
    (["--create", "--topic", ".."], 'cannot be "." or ".."'),
    (["--create", "--topic", "t" * 250], "can't be longer than 249"),
    (["--create", "--topic", "t", "--config", "a=b=c"], "Invalid topic config"),
    (["--list", "--partitions", "2"], "--partitions can only be used with --create"),
    (["--describe", "--if-not-exists"], "--if-not-exists can only be used with --create"),
    (["--create", "--topic", "t", "--if-exists"], "--if-exists can only be used"),
    (["--list", "--topic", "a["], "is an invalid regex"),
    (["--delete"], 'Missing required argument "[topic]"'),
])
def test_topics_bad_arguments_exit_2(capsys, argv, message):
    rc, out, err = run_cli(capsys, "topics", "--bootstrap-server", f"127.0.0.1:{closed_port()}", *argv)
    assert rc == 2 and out == "" and err.count("\n") == 1 and message in err


def test_topic_configs_and_filter():
    assert topics.parse_topic_configs(["retention.ms=1", "cleanup.policy = compact"]) == {
        "retention.ms": "1", "cleanup.policy": "compact"}
    pattern = topics.topic_filter("foo.*,bar")
    assert topics.select_topics(["foo", "foo1", "bar", "bar1", "xfoo"], pattern) == ["bar", "foo", "foo1"]
    assert topics.select_topics(["b", "a"], None) == ["a", "b"]


def _topic(name="t", partitions=None, topic_id="AAECAwQFBgcICQoLDA0ODw"):
    parts = partitions or (PartitionInfo(0, 1, (1, 2, 3), (1, 2, 3)), PartitionInfo(1, 2, (2, 3, 1), (2, 3)))
    return TopicInfo(name=name, topic_id=topic_id, internal=False, partitions=tuple(parts))


def test_describe_output_matches_kafka_topics():
    entries = [ConfigEntry("retention.ms", "1000", "DYNAMIC_TOPIC_CONFIG"),
               ConfigEntry("segment.bytes", "1073741824", "DEFAULT_CONFIG"),
               ConfigEntry("min.insync.replicas", "2", "STATIC_BROKER_CONFIG")]
    lines = topics.describe_lines([_topic()], {"t": entries})
    assert lines == [
        "Topic: t\tTopicId: AAECAwQFBgcICQoLDA0ODw\tPartitionCount: 2\tReplicationFactor: 3\t"
        "Configs: retention.ms=1000,min.insync.replicas=2",
        "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3",
        "\tTopic: t\tPartition: 1\tLeader: 2\tReplicas: 2,3,1\tIsr: 2,3",
    ]


def test_describe_without_topic_id_leader_or_configs():
    t = _topic(partitions=[PartitionInfo(0, -1, (1,), (), offline_replicas=(1,))], topic_id=None)
    assert topics.describe_lines([t], {}) == [
        "Topic: t\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: ",
        "\tTopic: t\tPartition: 0\tLeader: none\tReplicas: 1\tIsr: \tOffline: 1"]


def test_describe_partition_filters_print_only_matching_partitions():
    t = _topic(partitions=[PartitionInfo(0, 1, (1, 2), (1, 2)), PartitionInfo(1, 1, (1, 2), (1,)),
                           PartitionInfo(2, -1, (1, 2), ())])
    assert topics.describe_lines([t], {}, under_replicated=True) == [
        "\tTopic: t\tPartition: 1\tLeader: 1\tReplicas: 1,2\tIsr: 1",
        "\tTopic: t\tPartition: 2\tLeader: none\tReplicas: 1,2\tIsr: "]
    assert topics.describe_lines([t], {}, unavailable=True) == [
        "\tTopic: t\tPartition: 2\tLeader: none\tReplicas: 1,2\tIsr: "]


def test_topic_ids_print_in_kafkas_base64():
    assert kafka_uuid(uuid.UUID(bytes=bytes(range(16)))) == "AAECAwQFBgcICQoLDA0ODw"
    assert kafka_uuid(str(uuid.UUID(bytes=bytes(range(16))))) == "AAECAwQFBgcICQoLDA0ODw"
    assert kafka_uuid(uuid.UUID(int=0)) is None and kafka_uuid(None) is None


# ------------------------------------------------------------------------------------------------ configs

def test_config_entry_line():
    entry = ConfigEntry("cleanup.policy", "compact,delete", "DYNAMIC_TOPIC_CONFIG", synonyms=(
        ConfigSynonym("cleanup.policy", "compact,delete", "DYNAMIC_TOPIC_CONFIG"),
        ConfigSynonym("log.cleanup.policy", "delete", "DEFAULT_CONFIG")))
    assert configs.format_config_entry(entry) == (
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy="
        "compact,delete, DEFAULT_CONFIG:log.cleanup.policy=delete}")
    secret = ConfigEntry("ssl.key.password", None, "DYNAMIC_BROKER_CONFIG", sensitive=True)
    assert configs.format_config_entry(secret) == "  ssl.key.password=null sensitive=true synonyms={}"


def test_config_describe_filters_and_headers():
    entries = [ConfigEntry("z.dyn", "1", "DYNAMIC_TOPIC_CONFIG"), ConfigEntry("a.default", "2", "DEFAULT_CONFIG"),
               ConfigEntry("b.dyn", "3", "DYNAMIC_TOPIC_CONFIG")]
    assert configs.describe_lines("topics", "t", entries, describe_all=False) == [
        "Dynamic configs for topic t are:",
        "  b.dyn=3 sensitive=false synonyms={}", "  z.dyn=1 sensitive=false synonyms={}"]
    assert configs.describe_lines("topics", "t", entries, describe_all=True)[0] == "All configs for topic t are:"
    assert len(configs.describe_lines("topics", "t", entries, describe_all=True)) == 4
    broker = [ConfigEntry("log.retention.ms", "1", "DYNAMIC_BROKER_CONFIG"),
              ConfigEntry("num.io.threads", "8", "DYNAMIC_DEFAULT_BROKER_CONFIG"),
              ConfigEntry("broker.id", "1", "STATIC_BROKER_CONFIG")]
    assert configs.describe_lines("brokers", "1", broker, False) == [
        "Dynamic configs for broker 1 are:", "  log.retention.ms=1 sensitive=false synonyms={}"]
    assert configs.describe_lines("brokers", "", broker, False) == [
        "Default configs for brokers in the cluster are:", "  num.io.threads=8 sensitive=false synonyms={}"]


def test_config_command_args_echo():
    args = collections.namedtuple("A", "bootstrap_server zookeeper data_dir command_config entity_type "
                                       "entity_name entity_default describe alter all add_config "
                                       "add_config_file delete_config")(
        "b:1", None, None, None, "topics", "t", False, False, True, False, "k=[a,b]", None, None)
    assert configs.command_args(args) == ("--bootstrap-server b:1 --entity-type topics --entity-name t --alter "
                                          "--add-config k=[a,b]")


# ------------------------------------------------------------------------------------------- error names

def test_project_error_code_950_has_its_name():
    err = AdminError.from_code(950)
    assert err.name == "TIERED_STORAGE_DISABLEMENT_IN_PROGRESS" and err.message and not err.retriable
    wire = for_code(950)("topic t is being disabled")          # what kafka-python raises for an unknown code
    assert str(to_admin_error(wire)) == "TIERED_STORAGE_DISABLEMENT_IN_PROGRESS: topic t is being disabled"


def test_kafka_errors_map_to_name_and_message():
    err = AdminError.from_code(40, "Unknown topic config name: x")
    assert str(err) == "INVALID_CONFIG: Unknown topic config name: x"
    err = to_admin_error(NotControllerError("moved"))
    assert (err.name, err.code, err.retriable) == ("NOT_CONTROLLER", 41, True)
    assert format_error(UnknownTopicOrPartitionError()).startswith("UNKNOWN_TOPIC_OR_PARTITION: ")
    assert format_error(RuntimeError("Failed to find active controller id!")).startswith("NOT_CONTROLLER")
    assert format_error(NoReachableBrokerError("no broker reachable at h:1")) == "no broker reachable at h:1"
    assert to_admin_error(ValueError("bug")) is None


# --------------------------------------------------------------------------------------- bounded retries

class FakeKafkaAdmin:
    """Stands in for kafka-python's KafkaAdminClient: answers create_topics from a script of error codes."""

    def __init__(self, script, **_config):
        self.script = list(script)   # per call: {topic: error code}
        self.calls: list[list[str]] = []

    def create_topics(self, new_topics, **_kwargs):
        self.calls.append(sorted(new_topics))
        codes = self.script.pop(0) if self.script else {}
        return {"topics": [{"name": n, "error_code": codes.get(n, 0), "error_message": None} for n in new_topics]}

    def close(self):
        pass


def _admin(script, attempts=4):
    fake = FakeKafkaAdmin(script)
    client = AdminClient(["127.0.0.1:1"], admin_factory=lambda **kw: fake,
                         retry=RetryPolicy(attempts=attempts, deadline_s=10, initial_delay_s=0, max_delay_s=0))
    return client, fake


def test_create_retries_only_topics_with_retriable_errors():
    client, fake = _admin([{"a": 41, "b": 36}, {"a": 5}, {}])
    results = client.create_topics([NewTopicSpec("a", 1, 1), NewTopicSpec("b", 1, 1)])
    assert results["a"] is None
    assert results["b"].name == "TOPIC_ALREADY_EXISTS"
    assert fake.calls == [["a", "b"], ["a"], ["a"]]


def test_retries_are_bounded():
    client, fake = _admin([{"a": 41}] * 10, attempts=3)
    start = time.monotonic()
    results = client.create_topics([NewTopicSpec("a", 1, 1)])
    assert results["a"].name == "NOT_CONTROLLER"
    assert len(fake.calls) == 3 and time.monotonic() - start < 5


# ------------------------------------------------------------------------------------------ produce/consume

def test_stdin_lines_with_keys():
    data = io.BytesIO(b"k1\tv1\r\nno-separator\nk2\tv\t2\n\nlast")
    recs = list(produce.read_lines(data, parse_key=True, separator=b"\t"))
    assert [(r.key, r.value) for r in recs if r.error is None] == [(b"k1", b"v1"), (b"k2", b"v\t2")]
    assert [r.error for r in recs if r.error] == ["line 2: no key separator '\\t' found",
                                                  "line 4: no key separator '\\t' found",
                                                  "line 5: no key separator '\\t' found"]
    plain = list(produce.read_lines(io.BytesIO(b"a\n\nb"), parse_key=False, separator=b"\t"))
    assert [r.value for r in plain] == [b"a", b"", b"b"]


def test_generated_payloads_are_numbered_and_sized():
    src = produce.PayloadSource(8)
    assert len(src.value(0)) == len(src.value(123456789)) == 8
    assert src.value(42).startswith(b"42") and src.value(42)[2:].isupper()
    assert produce.PayloadSource(2).value(12345) == b"12"


def test_every_future_is_accounted_for():
    tracker = produce.SendTracker()
    ok, bad, pending = Future(), Future(), Future()
    for f in (ok, bad, pending):
        tracker.track(f, 10)
    ok.success(object())
    bad.failure(for_code(19)("Messages are rejected since there are fewer in-sync replicas than required."))
    tracker.skip("line 3: no key separator")
    assert tracker.settle() == 3                 # the failed send, the skipped line, the unresolved send
    assert tracker.acked == 1 and tracker.bytes_acked == 10
    assert tracker.first_error.startswith("NOT_ENOUGH_REPLICAS: ")


def test_summary_line():
    assert produce.summary_line(1000, 2.0, 1000 * 1024 * 1024 // 500, 3.14159, 12.0, 0) == (
        "1000 records sent, 500.0 records/sec (1.00 MB/sec), 3.14 ms avg latency, 12.00 ms max latency, "
        "0 failed sends.")


@pytest.mark.parametrize("argv, message", [
    (["--num-records", "0"], "--num-records must be at least 1"),
    (["--record-size", "10"], "--record-size needs --num-records"),
    (["--num-records", "5", "--parse-key"], "cannot be used with --num-records"),
    (["--linger-ms", "-1"], "--linger-ms must not be negative"),
])
def test_produce_bad_arguments_exit_2(capsys, argv, message):
    rc, _out, err = run_cli(capsys, "produce", "--bootstrap-server", "127.0.0.1:9092", "--topic", "t", *argv)
    assert rc == 2 and message in err


Record = collections.namedtuple("Record", "topic partition offset timestamp timestamp_type key value")


def test_consumed_record_formats():
    r = Record("t", 2, 17, 1700000000000, 0, b"k", b"v")
    assert consume.format_record(r) == b"v"
    assert consume.format_record(r, print_key=True) == b"k\tv"
    assert consume.format_record(r, print_key=True, print_offset=True, print_partition=True,
                                 print_timestamp=True) == b"CreateTime:1700000000000\tPartition:2\tOffset:17\tk\tv"
    assert consume.format_record(r._replace(key=None, value=None), print_key=True, separator=b"|") == b"null|null"


@pytest.mark.parametrize("argv, message", [
    (["--offset", "5"], "The partition is required when offset is specified."),
    (["--group", "g", "--partition", "0"], "Options group and partition cannot be specified together."),
    (["--partition", "0", "--offset", "-3"], "--offset must be a non-negative number"),
    (["--max-messages", "0"], "--max-messages must be at least 1"),
])
def test_consume_bad_arguments_exit_2(capsys, argv, message):
    rc, _out, err = run_cli(capsys, "consume", "--bootstrap-server", "127.0.0.1:9092", "--topic", "t", *argv)
    assert rc == 2 and message in err


def test_offset_option():
    assert consume.parse_offset("42") == 42
    assert consume.parse_offset(" Earliest ") == "earliest"
    assert consume.parse_offset(None) is None


def test_argparse_errors_are_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["topics", "--bootstrap-server", "127.0.0.1:9092"])
    _out, err = capsys.readouterr()
    assert e.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "one of the arguments --create --list --describe --delete --alter is required" in err


def test_delete_records_bad_address_is_bad_input(capsys, tmp_path):
    offsets = tmp_path / "o.json"
    offsets.write_text('{"partitions": [{"topic": "t", "partition": 0, "offset": 1}], "version": 1}')
    rc, _out, err = run_cli(capsys, "delete-records", "--bootstrap-server", "no-port-here",
                            "--offset-json-file", str(offsets))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "invalid broker address" in err
