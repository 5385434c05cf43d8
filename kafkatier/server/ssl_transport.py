"""TLS for the broker's listeners and its broker-to-broker client (Kafka's ``SslFactory``, ``DefaultSslEngineFactory``
and ``SslPrincipalMapper``, with Kafka's config names).

What a listener needs comes from :func:`listener_ssl_config`: each ``ssl.*`` name is read first as
``listener.name.<listener>.ssl.*`` (lower-case listener name), then as ``ssl.*``, as Kafka resolves listener-prefixed
configs.  Supported:

- keystores of ``ssl.keystore.type`` ``PEM`` (a file holding the private key and the certificate chain, or inline
  ``ssl.keystore.key`` + ``ssl.keystore.certificate.chain``) and ``PKCS12`` (decoded with ``cryptography``);
  ``ssl.key.password`` decrypts an encrypted PEM key.  ``JKS`` (Kafka's default type) is converted with the JDK's
  ``keytool`` (:mod:`kafkatier.common.keystores`);
- truststores of the same types (``ssl.truststore.location`` or inline ``ssl.truststore.certificates``); none set:
  the system's CAs, as a JVM falls back to its ``cacerts``;
- ``ssl.client.auth`` = ``none`` | ``requested`` | ``required``; ``ssl.enabled.protocols`` (TLSv1.2, TLSv1.3);
  ``ssl.cipher.suites`` (OpenSSL names);
- ``ssl.endpoint.identification.algorithm`` (``https``, Kafka's default since 2.0: the client checks the broker's
  host name against its certificate; empty turns the check off);
- ``ssl.principal.mapping.rules`` (``DEFAULT`` or ``RULE:pattern/replacement/[LU]``, comma separated).

Principal: ``User:<mapped DN>`` when the client presented a verified certificate, else ``User:ANONYMOUS``.  The DN
is written as Java's ``X500Principal.getName()`` does (RFC 2253: most specific RDN first, ``CN=c,OU=u,O=o,C=US``).

A bad file or a wrong password raises :class:`SslConfigError` with one line naming the config, so
the broker fails before it binds anything.
"""
from __future__ import annotations

import os
import re
import ssl
import tempfile
from typing import Any, Mapping

import attrs

from kafkatier.common.keystores import KeystoreError, read_file, store_to_pem
from kafkatier.server.config import ListenerConfigError

#: ``select`` says nothing about bytes OpenSSL already holds decrypted, and a non-blocking TLS socket signals "try
#: again" with these two besides the usual ones.
WOULD_BLOCK = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)

SSL, SASL_SSL, PLAINTEXT, SASL_PLAINTEXT = "SSL", "SASL_SSL", "PLAINTEXT", "SASL_PLAINTEXT"
SECURITY_PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
CLIENT_AUTH = ("none", "requested", "required")
ANONYMOUS = "User:ANONYMOUS"

_NAMES = ("keystore.type", "keystore.location", "keystore.password", "key.password", "keystore.key",
          "keystore.certificate.chain", "truststore.type", "truststore.location", "truststore.password",
          "truststore.certificates", "client.auth", "principal.mapping.rules", "endpoint.identification.algorithm",
          "enabled.protocols", "cipher.suites", "protocol")


class SslConfigError(ListenerConfigError):
    """A listener's or client's ``ssl.*`` settings cannot make a TLS context; the text names the config."""


def uses_tls(protocol: str) -> bool:
    return protocol.upper() in (SSL, SASL_SSL)


def uses_sasl(protocol: str) -> bool:
    return protocol.upper() in (SASL_PLAINTEXT, SASL_SSL)


@attrs.frozen
class SslConfig:
    """The ``ssl.*`` settings of one listener (or one client), by Kafka name without the ``ssl.`` prefix."""
    keystore_type: str = "JKS"
    keystore_location: str | None = None
    keystore_password: str | None = attrs.field(default=None, repr=False)
    key_password: str | None = attrs.field(default=None, repr=False)
    keystore_key: str | None = attrs.field(default=None, repr=False)
    keystore_certificate_chain: str | None = attrs.field(default=None, repr=False)
    truststore_type: str = "JKS"
    truststore_location: str | None = None
    truststore_password: str | None = attrs.field(default=None, repr=False)
    truststore_certificates: str | None = attrs.field(default=None, repr=False)
    client_auth: str = "none"
    principal_mapping_rules: str = "DEFAULT"
    endpoint_identification_algorithm: str = "https"
    enabled_protocols: str = "TLSv1.2,TLSv1.3"
    cipher_suites: str | None = None
    protocol: str = "TLSv1.3"

    @classmethod
    def from_props(cls, props: Mapping[str, Any], listener: str | None = None) -> "SslConfig":
        """From Kafka properties; ``listener.name.<listener>.ssl.*`` wins over ``ssl.*`` when ``listener`` is
        given."""
        values = {}
        for name in _NAMES:
            keys = [f"ssl.{name}"]
            if listener:
                keys.insert(0, f"listener.name.{listener.lower()}.ssl.{name}")
            for key in keys:
                if key in props and props[key] is not None and str(props[key]) != "":
                    values[name.replace(".", "_")] = str(props[key])
                    break
                if key in props and name == "endpoint.identification.algorithm":
                    values[name.replace(".", "_")] = ""  # an empty value turns host name checks off
                    break
        cfg = cls(**values)
        if cfg.client_auth.lower() not in CLIENT_AUTH:
            raise SslConfigError(f"Invalid value {cfg.client_auth} for configuration ssl.client.auth: "
                                 f"String must be one of: {', '.join(CLIENT_AUTH)}")
        SslPrincipalMapper.from_rules(cfg.principal_mapping_rules)  # refuse bad rules before anything starts
        return cfg

    @property
    def has_keystore(self) -> bool:
        return bool(self.keystore_location or self.keystore_key)


def listener_ssl_config(props: Mapping[str, Any], listener: str) -> SslConfig:
    return SslConfig.from_props(props, listener)


# --- contexts ---------------------------------------------------------------------------------------------------
def server_context(cfg: SslConfig) -> ssl.SSLContext:
    """A server-side context for a listener: its key and certificate, the CAs client certificates must chain to,
    and ``ssl.client.auth``."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _common(ctx, cfg)
    if not cfg.has_keystore:
        raise SslConfigError("an SSL listener needs a keystore: set ssl.keystore.location (or ssl.keystore.key "
                             "and ssl.keystore.certificate.chain)")
    _load_keystore(ctx, cfg)
    mode = cfg.client_auth.lower()
    if mode != "none":
        _load_truststore(ctx, cfg)
    ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}[mode]
    return ctx


def client_context(cfg: SslConfig) -> ssl.SSLContext:
    """A client-side context (the broker's own client, the CLI): the broker's certificate is always verified
    against the truststore; its host name too unless ``ssl.endpoint.identification.algorithm`` is empty."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _common(ctx, cfg)
    ctx.check_hostname = cfg.endpoint_identification_algorithm.lower() == "https"
    if cfg.endpoint_identification_algorithm and not ctx.check_hostname:
        raise SslConfigError(f"ssl.endpoint.identification.algorithm={cfg.endpoint_identification_algorithm}: only "
                             "https or empty are supported")
    _load_truststore(ctx, cfg)
    if cfg.has_keystore:
        _load_keystore(ctx, cfg)
    return ctx


def _common(ctx: ssl.SSLContext, cfg: SslConfig) -> None:
    versions = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
    wanted = [p.strip() for p in cfg.enabled_protocols.split(",") if p.strip()]
    bad = [p for p in wanted if p not in versions]
    if bad or not wanted:
        raise SslConfigError(f"ssl.enabled.protocols={cfg.enabled_protocols}: supported are TLSv1.2 and TLSv1.3")
    ctx.minimum_version = min(versions[p] for p in wanted)
    ctx.maximum_version = max(versions[p] for p in wanted)
    if cfg.cipher_suites:
        try:
            ctx.set_ciphers(":".join(c.strip() for c in cfg.cipher_suites.split(",") if c.strip()))
        except ssl.SSLError as e:
            raise SslConfigError(f"ssl.cipher.suites={cfg.cipher_suites}: {e.reason or e}") from None


def _read(path: str, config: str) -> bytes:
    try:
        return read_file(path, config)
    except KeystoreError as e:
        raise SslConfigError(str(e)) from None


def _load_keystore(ctx: ssl.SSLContext, cfg: SslConfig) -> None:
    kind = cfg.keystore_type.upper()
    if kind in ("PKCS12", "JKS"):
        if not cfg.keystore_location:
            raise SslConfigError(f"ssl.keystore.type={kind} needs ssl.keystore.location")
        try:
            pem = store_to_pem(cfg.keystore_location, kind, cfg.keystore_password, "ssl.keystore.location",
                               key_password=cfg.key_password)
        except KeystoreError as e:
            raise SslConfigError(str(e)) from None
        _load_pem_chain(ctx, pem, None, "ssl.keystore.location")
        return
    if kind != "PEM":
        raise SslConfigError(f"ssl.keystore.type={cfg.keystore_type}: supported are JKS, PKCS12 and PEM")
    if cfg.keystore_key or cfg.keystore_certificate_chain:
        if cfg.keystore_location:
            raise SslConfigError("set either ssl.keystore.location or ssl.keystore.key + "
                                 "ssl.keystore.certificate.chain, not both")
        if not (cfg.keystore_key and cfg.keystore_certificate_chain):
            raise SslConfigError("ssl.keystore.key and ssl.keystore.certificate.chain go together")
        pem = (cfg.keystore_key.strip() + "\n" + cfg.keystore_certificate_chain.strip() + "\n").encode()
        _load_pem_chain(ctx, pem, cfg.key_password, "ssl.keystore.key")
        return
    assert cfg.keystore_location is not None
    _load_pem_chain(ctx, _read(cfg.keystore_location, "ssl.keystore.location"), cfg.key_password,
                    "ssl.keystore.location")


def _load_pem_chain(ctx: ssl.SSLContext, pem: bytes, password: str | None, config: str) -> None:
    """``load_cert_chain`` reads files only: the PEM goes through a private temporary file, removed at once."""
    if b"PRIVATE KEY-----" not in pem or b"CERTIFICATE-----" not in pem:
        raise SslConfigError(f"{config}: a PEM keystore needs both a private key and a certificate chain")
    fd, path = tempfile.mkstemp(prefix="kafkatier-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        ctx.load_cert_chain(path, password=(password or "").encode() if password is not None else None)
    except ssl.SSLError as e:
        raise SslConfigError(f"{config}: cannot load the key and certificate: {e.reason or e}") from None
    except (TypeError, ValueError) as e:
        raise SslConfigError(f"{config}: cannot load the key (ssl.key.password?): {e}") from None
    finally:
        os.unlink(path)


def _load_truststore(ctx: ssl.SSLContext, cfg: SslConfig) -> None:
    kind = cfg.truststore_type.upper()
    if cfg.truststore_certificates:
        if kind != "PEM":
            raise SslConfigError("ssl.truststore.certificates needs ssl.truststore.type=PEM")
        _load_cas(ctx, cfg.truststore_certificates, "ssl.truststore.certificates")
        return
    if not cfg.truststore_location:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH if ctx.protocol == ssl.PROTOCOL_TLS_CLIENT
                               else ssl.Purpose.CLIENT_AUTH)
        return
    if kind not in ("PEM", "PKCS12", "JKS"):
        raise SslConfigError(f"ssl.truststore.type={cfg.truststore_type}: supported are JKS, PKCS12 and PEM")
    try:
        pem = store_to_pem(cfg.truststore_location, kind, cfg.truststore_password, "ssl.truststore.location",
                           need_key=False)
    except KeystoreError as e:
        raise SslConfigError(str(e)) from None
    _load_cas(ctx, pem.decode("ascii", "replace"), "ssl.truststore.location")


def _load_cas(ctx: ssl.SSLContext, pem: str, config: str) -> None:
    if "CERTIFICATE-----" not in pem:
        raise SslConfigError(f"{config}: no PEM certificate found")
    try:
        ctx.load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError) as e:
        raise SslConfigError(f"{config}: cannot load the certificates: {getattr(e, 'reason', None) or e}") from None


# --- principals -------------------------------------------------------------------------------------------------
class NoMatchingRule(ValueError):
    """No ``ssl.principal.mapping.rules`` rule matches a DN: the connection is refused, as Kafka does."""


@attrs.frozen
class _Rule:
    default: bool
    pattern: re.Pattern | None = None
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.default:
            return dn
        assert self.pattern is not None
        if not self.pattern.fullmatch(dn):
            return None
        out = self.pattern.sub(self.replacement, dn)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:,|\n|$)")


def _java_replacement(text: str) -> str:
    """Java's ``Matcher.replaceAll`` syntax (``$1``, ``\\$``) as Python's (``\\g<1>``, ``$``)."""
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            out.append(text[i + 1].replace("\\", "\\\\"))
            i += 2
        elif ch == "$" and i + 1 < len(text) and text[i + 1].isdigit():
            j = i + 1
            while j < len(text) and text[j].isdigit():
                j += 1
            out.append(f"\\g<{text[i + 1:j]}>")
            i = j
        else:
            out.append(ch)
            i += 1
    return "".join(out)


@attrs.frozen
class SslPrincipalMapper:
    """``ssl.principal.mapping.rules``: the first rule whose pattern matches the whole DN maps it."""
    rules: tuple[_Rule, ...]

    @classmethod
    def from_rules(cls, text: str | None) -> "SslPrincipalMapper":
        text = (text or "DEFAULT").strip() or "DEFAULT"
        rules, pos = [], 0
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise SslConfigError(f"Invalid rule: {text[pos:].strip()} in ssl.principal.mapping.rules")
            if m.group(1):
                rules.append(_Rule(True))
            else:
                try:
                    pattern = re.compile(m.group(2).replace("\\/", "/"))
                except re.error as e:
                    raise SslConfigError(f"Invalid rule pattern {m.group(2)!r} in ssl.principal.mapping.rules: "
                                         f"{e}") from None
                rules.append(_Rule(False, pattern, _java_replacement(m.group(3).replace("\\/", "/")),
                                   m.group(4) or ""))
            pos = m.end()
        return cls(tuple(rules))

    def name(self, dn: str) -> str:
        for rule in self.rules:
            mapped = rule.apply(dn)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(f"No rules apply to {dn}, rules {[r.pattern.pattern if r.pattern else 'DEFAULT' for r in self.rules]}")


_RDN_NAMES = {"commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
              "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
              "domainComponent": "DC", "userId": "UID"}


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def distinguished_name(peercert: Mapping[str, Any]) -> str:
    """The subject of ``SSLSocket.getpeercert()`` as RFC 2253 (Java's ``X500Principal.getName()``)."""
    rdns = []
    for rdn in reversed(peercert.get("subject", ())):
        rdns.append("+".join(f"{_RDN_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


@attrs.frozen
class SslPrincipalBuilder:
    """Kafka's ``DefaultKafkaPrincipalBuilder`` for SSL connections."""
    mapper: SslPrincipalMapper

    def principal(self, sock: ssl.SSLSocket) -> str:
        cert = sock.getpeercert()
        if not cert or not cert.get("subject"):
            return ANONYMOUS
        return "User:" + self.mapper.name(distinguished_name(cert))


@attrs.frozen
class ListenerTls:
    """What a TLS listener's ``SocketServer`` needs: its server context and how a connection's principal is found."""
    context: ssl.SSLContext
    builder: SslPrincipalBuilder

    @classmethod
    def from_props(cls, props: Mapping[str, Any], listener: str) -> "ListenerTls":
        try:
            cfg = listener_ssl_config(props, listener)
            context = server_context(cfg)
        except SslConfigError as e:
            raise SslConfigError(f"listener {listener}: {e}") from None
        return cls(context, SslPrincipalBuilder(SslPrincipalMapper.from_rules(cfg.principal_mapping_rules)))

    def principal(self, sock: ssl.SSLSocket) -> str:
        return self.builder.principal(sock)


__all__ = ["ListenerTls", "SslConfig", "SslConfigError", "SslPrincipalMapper", "SslPrincipalBuilder", "NoMatchingRule",
           "server_context", "client_context", "listener_ssl_config", "distinguished_name", "uses_tls", "uses_sasl",
           "WOULD_BLOCK", "ANONYMOUS", "SECURITY_PROTOCOLS"]
