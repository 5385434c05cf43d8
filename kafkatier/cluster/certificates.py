"""A test certificate authority and certificates for TLS listeners (``cluster up --tls``, ``kafkatier tls`` and
tests), made with ``cryptography``.

Everything is PEM, as Kafka's ``ssl.keystore.type=PEM`` takes it: ``ca.pem`` (the CA certificate: a truststore),
``ca-key.pem``, and per certificate ``<name>.pem`` holding the private key followed by the certificate chain (a PEM
keystore file) plus ``<name>.crt`` / ``<name>.key`` for clients that want them apart (kcat, confluent-kafka's
``ssl.certificate.location`` / ``ssl.key.location``).  Keys are EC P-256 (fast to make, small handshakes); a server
certificate names ``localhost`` and ``127.0.0.1`` unless told other names.  For tests only: the CA key is stored in
clear next to the certificates.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_DAYS = 365
DEFAULT_HOSTS = ("localhost", "127.0.0.1")


@attrs.frozen
class CertificateFiles:
    """Where one certificate's files are."""
    keystore: Path      #: key + certificate chain (PEM keystore)
    certificate: Path   #: certificate chain only
    key: Path           #: private key only
    subject: str        #: the DN, RFC 2253 (as Kafka's SSL principal shows it)


def _name(dn: str) -> x509.Name:
    oids = {"CN": NameOID.COMMON_NAME, "O": NameOID.ORGANIZATION_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
            "C": NameOID.COUNTRY_NAME, "L": NameOID.LOCALITY_NAME, "ST": NameOID.STATE_OR_PROVINCE_NAME}
    attrs_ = []
    for part in reversed([p.strip() for p in dn.split(",") if p.strip()]):  # RFC 2253 lists the most specific first
        key, _, value = part.partition("=")
        if key.upper() not in oids or not value:
            raise ValueError(f"bad DN component {part!r}: expected one of {', '.join(oids)}=value")
        attrs_.append(x509.NameAttribute(oids[key.upper()], value))
    return x509.Name(attrs_)


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _key_pem(key, password: str | None = None) -> bytes:
    enc = (serialization.BestAvailableEncryption(password.encode()) if password
           else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)


def make_ca(directory: str | os.PathLike, subject: str = "CN=kafkatier-test-ca", days: int = DEFAULT_DAYS) -> Path:
    """Write ``ca.pem`` and ``ca-key.pem`` in ``directory``; returns the path of ``ca.pem``."""
    d = Path(directory)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    name = _name(subject)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    _write(d / "ca-key.pem", _key_pem(key), private=True)
    _write(d / "ca.pem", cert.public_bytes(serialization.Encoding.PEM))
    return d / "ca.pem"


def make_cert(ca_dir: str | os.PathLike, name: str, subject: str | None = None, *,
              hosts: tuple[str, ...] | None = DEFAULT_HOSTS, days: int = DEFAULT_DAYS,
              expired: bool = False, key_password: str | None = None,
              out_dir: str | os.PathLike | None = None) -> CertificateFiles:
    """A certificate signed by the CA in ``ca_dir`` (usable for both server and client authentication).
    ``hosts``: DNS names / IP addresses for the subject alternative name (None: none).  ``expired``: valid
    yesterday only.  ``key_password``: encrypt the private key (Kafka's ``ssl.key.password``)."""
    ca = Path(ca_dir)
    out = Path(out_dir) if out_dir is not None else ca
    ca_key = serialization.load_pem_private_key((ca / "ca-key.pem").read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate((ca / "ca.pem").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = ((now - datetime.timedelta(days=2), now - datetime.timedelta(days=1)) if expired
                  else (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)))
    subj = _name(subject or f"CN={name}")
    builder = (x509.CertificateBuilder().subject_name(subj).issuer_name(ca_cert.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                     ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                              critical=False))
    if hosts:
        sans: list[x509.GeneralName] = []
        for h in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                sans.append(x509.DNSName(h))
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = _key_pem(key, key_password)
    files = CertificateFiles(out / f"{name}.pem", out / f"{name}.crt", out / f"{name}.key",
                             subj.rfc4514_string())
    _write(files.keystore, key_pem + cert_pem, private=True)
    _write(files.certificate, cert_pem)
    _write(files.key, key_pem, private=True)
    return files


__all__ = ["make_ca", "make_cert", "CertificateFiles"]
