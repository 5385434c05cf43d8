"""The message first: how the data source's driver-side errors reach the user.

Spark reports an exception raised by a Python data source's ``reader()`` / ``writer()`` as
``[PYTHON_DATA_SOURCE_ERROR] Failed to initialize Python data source writer: <the worker's formatted
exception>`` (``pyspark.util.handle_worker_exception``: ``traceback.TracebackException.format()``), so the first
line the user sees would be ``Traceback (most recent call last):`` and the message would come 8-14 lines later.
``TracebackException`` prints an exception's context (``__context__``) before the exception itself, and a
context that was never raised has no traceback: it is printed as one ``<type>: <message>`` line.
:func:`message_first` gives the data source's error such a :class:`KafkatierError` context, whose type prints
as ``kafkatier`` (a ``__cause__`` would do the same, but PySpark's simplified tracebacks, on by default, drop
it)::

    [PYTHON_DATA_SOURCE_ERROR] Failed to initialize Python data source writer: kafkatier: unknown option ...

    During handling of the above exception, another exception occurred:

    Traceback (most recent call last):
      ...
    kafkatier.spark.options.DataSourceOptionError: unknown option ...
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator


class KafkatierError(Exception):
    """The one-line headline of a data source error (never raised by itself)."""


# Printed by ``traceback`` as ``<module>.<qualname>`` unless the module is ``builtins``: the line reads
# ``kafkatier: <message>``.
KafkatierError.__module__ = "builtins"
KafkatierError.__qualname__ = "kafkatier"


@contextlib.contextmanager
def message_first(*errors: type[BaseException]) -> Iterator[None]:
    """Re-raise ``errors`` with their message as the first line Spark shows."""
    try:
        yield
    except errors as e:
        text = str(e)
        e.__cause__ = None
        e.__context__ = KafkatierError(text.splitlines()[0] if text else type(e).__name__)
        e.__suppress_context__ = False
        raise
