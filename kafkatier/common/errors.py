"""Errors shared across layers that are not Kafka protocol errors (those are in ``protocol/errors.py``)."""


class UsageError(Exception):
    """A bad argument or input file: printed as one line, exit status 2 (raised by the CLI and by the cluster
    manager it drives)."""
