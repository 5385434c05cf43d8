"""Spark batch jobs on kafkatier topics: a PySpark Python data source named ``kafkatier`` with the options
and columns of Spark's Kafka source and sink (``source``, ``options``, ``writer``, ``reader``), and ready-made
jobs for the command line (``jobs``), exactly-once writes ended by the driver (``transactions``).  PySpark finds the
data source through the ``pyspark_kafkatier`` package, no registration needed; importing this package also makes
``save()`` / ``load()`` set their session active for threads of their own (``active_session``).

    df.write.format("kafkatier").mode("append").option("kafka.bootstrap.servers", b).option("topic", t).save()
    spark.read.format("kafkatier").option("kafka.bootstrap.servers", b).option("subscribe", t).load()
"""
from kafkatier.spark import active_session
from kafkatier.spark.source import NAME, KafkatierDataSource, register

active_session.install()

__all__ = ["NAME", "KafkatierDataSource", "register"]
