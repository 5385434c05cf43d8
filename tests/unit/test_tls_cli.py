"""``kafkatier tls make-ca | make-cert`` (cli/tls.py): files a PEM keystore and truststore accept, one-line errors."""
from __future__ import annotations

from kafkatier.cli.main import main
from kafkatier.server.ssl_transport import SslConfig, client_context, server_context


def test_make_ca_and_cert_make_a_working_keystore(tmp_path, capsys):
    assert main(["tls", "make-ca", "--dir", str(tmp_path)]) == 0
    assert main(["tls", "make-cert", "--dir", str(tmp_path), "--name", "b1", "--subject", "CN=b1,O=acme",
                 "--key-password", "pw"]) == 0
    out = capsys.readouterr().out
    assert "principal: User:CN=b1,O=acme" in out
    server_context(SslConfig.from_props({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(tmp_path / "b1.pem"),
                                         "ssl.key.password": "pw"}))
    client_context(SslConfig.from_props({"ssl.truststore.type": "PEM",
                                         "ssl.truststore.location": str(tmp_path / "ca.pem")}))
    assert (tmp_path / "ca-key.pem").stat().st_mode & 0o077 == 0  # private keys are 0600


def test_make_cert_without_a_ca_is_one_line(tmp_path, capsys):
    assert main(["tls", "make-cert", "--dir", str(tmp_path), "--name", "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "make-ca" in err


def test_bad_subject_is_one_line(tmp_path, capsys):
    main(["tls", "make-ca", "--dir", str(tmp_path)])
    assert main(["tls", "make-cert", "--dir", str(tmp_path), "--name", "x", "--subject", "XX=1"]) == 2
    assert "bad DN component" in capsys.readouterr().err


def test_cluster_up_refuses_tls_with_links_before_starting_anything(tmp_path, capsys):
    for extra in (["--tls", "--links"], ["--zookeeper-tls", "--links"], ["--zookeeper-tls", "--zookeeper",
                                                                          "127.0.0.1:1"]):
        assert main(["cluster", "up", "--data-dir", str(tmp_path / "c"), "--brokers", "1", *extra]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, err
        assert "cannot be combined" in err or "starts the embedded ZooKeeper" in err, err
        assert not (tmp_path / "c" / "zookeeper").exists() and not (tmp_path / "c" / "tls").exists()
