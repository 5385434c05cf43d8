"""``kafkatier tls make-ca | make-cert``: a test certificate authority and certificates in PEM for TLS listeners
and clients (``kafkatier/cluster/certificates.py``; docs/security.md#tls)."""
from __future__ import annotations

import os


def register(subparsers) -> None:
    p = subparsers.add_parser("tls", help="make a test CA and certificates for SSL listeners and clients",
                              description="Make a test certificate authority and certificates (PEM) for SSL "
                                          "listeners (ssl.keystore.type=PEM) and clients.  For tests only: the CA "
                                          "key is kept in clear.")
    sub = p.add_subparsers(dest="tls_command", metavar="ACTION", required=True)
    ca = sub.add_parser("make-ca", help="write DIR/ca.pem (the truststore) and DIR/ca-key.pem")
    ca.add_argument("--dir", required=True)
    ca.add_argument("--subject", default="CN=kafkatier-test-ca", help="the CA's DN (RFC 2253, e.g. CN=ca,O=org)")
    ca.add_argument("--days", type=int, default=365)
    ca.set_defaults(func=_make_ca)
    cert = sub.add_parser("make-cert", help="write DIR/NAME.pem (key + chain: a PEM keystore), NAME.crt, NAME.key")
    cert.add_argument("--dir", required=True, help="the CA's directory (make-ca); the files are written there too")
    cert.add_argument("--name", required=True)
    cert.add_argument("--subject", default=None, help="the DN (default CN=NAME); a client's is its principal")
    cert.add_argument("--host", action="append", default=None, metavar="NAME|IP",
                      help="a subject alternative name (repeatable; default localhost and 127.0.0.1)")
    cert.add_argument("--days", type=int, default=365)
    cert.add_argument("--key-password", default=None, help="encrypt the key (the broker's ssl.key.password)")
    cert.set_defaults(func=_make_cert)


def _make_ca(args) -> int:
    from kafkatier.cli.main import UsageError
    from kafkatier.cluster.certificates import make_ca
    try:
        path = make_ca(args.dir, args.subject, days=args.days)
    except (ValueError, OSError) as e:
        raise UsageError(str(e)) from None
    print(f"CA certificate (truststore, ssl.truststore.type=PEM): {path}")
    return 0


def _make_cert(args) -> int:
    from kafkatier.cli.main import UsageError
    from kafkatier.cluster.certificates import DEFAULT_HOSTS, make_cert
    if not os.path.exists(os.path.join(args.dir, "ca-key.pem")):
        raise UsageError(f"no CA in {args.dir}: run kafkatier tls make-ca --dir {args.dir} first")
    try:
        files = make_cert(args.dir, args.name, args.subject, hosts=tuple(args.host or DEFAULT_HOSTS), days=args.days,
                          key_password=args.key_password)
    except (ValueError, OSError) as e:
        raise UsageError(str(e)) from None
    print(f"keystore (ssl.keystore.type=PEM): {files.keystore}")
    print(f"certificate: {files.certificate}")
    print(f"key: {files.key}")
    print(f"principal: User:{files.subject}")
    return 0
