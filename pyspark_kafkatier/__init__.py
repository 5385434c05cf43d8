"""The ``kafkatier`` Spark data source, found by PySpark without registration.

PySpark 4 looks, once per Spark driver, for installed top-level modules named ``pyspark_<name>`` that expose a
``DefaultSource`` (a ``DataSource`` subclass) and registers each under its ``name()`` for every session and
thread (``pyspark/sql/worker/lookup_data_sources.py``).  This package is that hook for
:class:`kafkatier.spark.source.KafkatierDataSource`; it imports nothing else.
"""
from kafkatier.spark.source import KafkatierDataSource as DefaultSource

__all__ = ["DefaultSource"]
