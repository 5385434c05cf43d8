"""Spark's JVM looks up a Python data source in the calling thread's *active* session
(``SparkSession.getActiveSession`` in ``DataSource.lookupDataSource``), not in the session of the DataFrame being
written.  A Python thread (a thread pool writing several DataFrames at once) runs its calls on a JVM thread that
has no active session, so ``format("kafkatier")`` -- like any Python data source -- fails there with
``DATA_SOURCE_NOT_FOUND``.

:func:`install` wraps PySpark's ``DataFrameWriter.save`` / ``saveAsTable`` / ``insertInto`` and
``DataFrameReader.load`` so that each first makes its own session the thread's active one (what
``SparkSession.createDataFrame`` does already).  It runs when ``kafkatier.spark`` is imported in the driver;
idempotent; a no-op on Spark Connect, whose sessions have no JVM.

It also turns PySpark's simplified tracebacks off in that session unless the user set
``spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled`` themselves: the simplification drops the
exception's context, which is how the data source puts its error message on the first line Spark shows
(:mod:`kafkatier.spark.errors`).  Unsimplified tracebacks only show PySpark's own frames as well.
"""
from __future__ import annotations

import functools

_MARK = "_kafkatier_sets_active_session"
SIMPLIFIED_TRACEBACK = "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled"


def _activate(session) -> None:
    jvm = getattr(session, "_jvm", None)
    jsession = getattr(session, "_jsparkSession", None)
    if jvm is None or jsession is None:
        return
    from pyspark.sql import SparkSession

    SparkSession._get_j_spark_session_class(jvm).setActiveSession(jsession)
    conf = jsession.conf()
    if not conf.contains(SIMPLIFIED_TRACEBACK):
        conf.set(SIMPLIFIED_TRACEBACK, "false")


def _wrap(cls, name: str) -> None:
    original = getattr(cls, name, None)
    if original is None or getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def call(self, *args, **kwargs):
        _activate(getattr(self, "_spark", None))
        return original(self, *args, **kwargs)
    setattr(call, _MARK, True)
    setattr(cls, name, call)


def install() -> None:
    try:
        from pyspark.sql.readwriter import DataFrameReader, DataFrameWriter
    except ImportError:                     # pyspark without the classic (JVM) API
        return
    for name in ("save", "saveAsTable", "insertInto"):
        _wrap(DataFrameWriter, name)
    _wrap(DataFrameReader, "load")
