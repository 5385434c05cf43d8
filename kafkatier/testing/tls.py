"""Test CA and certificates for tests (the maker lives with ``cluster up --tls``: ``kafkatier/cluster/certificates.py``)."""
from kafkatier.cluster.certificates import CertificateFiles, make_ca, make_cert

__all__ = ["make_ca", "make_cert", "CertificateFiles"]
