"""Keystores and truststores in Kafka's three types -- ``PEM``, ``PKCS12`` and ``JKS`` (Kafka's default) -- turned
into PEM, which is what Python's ``ssl`` (and kazoo) load.

- ``PKCS12`` is decoded in-process with ``cryptography``.
- ``JKS`` has no maintained Python reader (pyjks had its last release in 2020 and pulls in pure-Python crypto), so
  it is converted with the JDK's own ``keytool`` (``keytool -importkeystore -deststoretype PKCS12``) -- the JDK is
  already required for ZooKeeper.  The PKCS12 copy is written into a private temporary directory (mode 0700, the
  file 0600), read, and removed before the function returns; nothing of the key stays on disk.

Errors are :class:`KeystoreError` whose text names the config (``what``) and never holds a password.
"""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile

PEM, PKCS12, JKS = "PEM", "PKCS12", "JKS"
KEYTOOL_TIMEOUT_S = 30.0


class KeystoreError(ValueError):
    """A store that cannot be read: the text names the config and says why, in one line."""


def read_file(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise KeystoreError(f"{what}={path}: {e.strerror or e}") from None


def pkcs12_to_pem(data: bytes, password: str | None, what: str, need_key: bool = True) -> bytes:
    """The key (PKCS#8, unencrypted, when ``need_key``) and the certificates of a PKCS12 store, as PEM."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12
    try:
        store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError as e:
        raise KeystoreError(f"{what}: cannot read the PKCS12 store (wrong password?): {e}") from None
    out = b""
    if store.key is not None and need_key:
        out += store.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())
    certs = [store.cert.certificate] if store.cert is not None else []
    certs += [c.certificate for c in store.additional_certs]
    for c in certs:
        out += c.public_bytes(serialization.Encoding.PEM)
    return out


def keytool() -> str:
    """The JDK's ``keytool`` (``$JAVA_HOME/bin/keytool``, else on PATH)."""
    java_home = os.environ.get("JAVA_HOME")
    candidates = ([os.path.join(java_home, "bin", "keytool")] if java_home else []) + ["keytool"]
    for c in candidates:
        found = shutil.which(c)
        if found:
            return found
    raise KeystoreError("JKS stores are read with the JDK's keytool, which was not found (install "
                        "openjdk-17-jre-headless, or convert the store to PKCS12 or PEM)")


def jks_to_pem(path: str, store_password: str | None, key_password: str | None, what: str,
               need_key: bool = True) -> bytes:
    """The entries of the JKS store at ``path`` as PEM (see the module docstring for how)."""
    read_file(path, what)  # a missing file is the same one line as for the other types
    if not store_password:
        raise KeystoreError(f"{what}={path}: a JKS store needs its password "
                            f"({what.rsplit('.', 1)[0]}.password)")
    one_off = secrets.token_urlsafe(18)
    tmp = tempfile.mkdtemp(prefix="kafkatier-jks-")  # mode 0700
    dest = os.path.join(tmp, "store.p12")
    cmd = [keytool(), "-importkeystore", "-noprompt", "-srckeystore", path, "-srcstoretype", "JKS",
           "-destkeystore", dest, "-deststoretype", "PKCS12", "-srcstorepass:env", "KT_SRC",
           "-deststorepass:env", "KT_DEST"]
    env = {**os.environ, "KT_SRC": store_password, "KT_DEST": one_off}
    if key_password:
        cmd += ["-srckeypass:env", "KT_KEY", "-destkeypass:env", "KT_DEST"]
        env["KT_KEY"] = key_password
    old_umask = os.umask(0o077)
    try:
        try:
            done = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=KEYTOOL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise KeystoreError(f"{what}={path}: keytool did not finish in {KEYTOOL_TIMEOUT_S:g}s") from None
        if done.returncode != 0 or not os.path.exists(dest):
            reason = next((ln.strip() for ln in (done.stdout + done.stderr).splitlines()
                           if ln.strip().startswith("keytool error")), "keytool failed")
            reason = reason.replace("keytool error: ", "").replace("java.io.IOException: ", "")
            raise KeystoreError(f"{what}={path}: cannot read the JKS store: {reason}")
        with open(dest, "rb") as f:
            data = f.read()
    finally:
        os.umask(old_umask)
        shutil.rmtree(tmp, ignore_errors=True)
    return pkcs12_to_pem(data, one_off, what, need_key=need_key)


def store_to_pem(path: str, kind: str, password: str | None, what: str, *, key_password: str | None = None,
                 need_key: bool = True) -> bytes:
    """The store at ``path`` of type ``kind`` (PEM, PKCS12, JKS) as PEM bytes.  ``what`` is the config naming the
    location (``ssl.keystore.location``), for messages."""
    kind = (kind or "").upper()
    if kind == PEM:
        return read_file(path, what)
    if kind == PKCS12:
        return pkcs12_to_pem(read_file(path, what), password, what, need_key=need_key)
    if kind == JKS:
        return jks_to_pem(path, password, key_password, what, need_key=need_key)
    raise KeystoreError(f"{what.rsplit('.', 1)[0]}.type={kind}: supported are PEM, PKCS12 and JKS")
