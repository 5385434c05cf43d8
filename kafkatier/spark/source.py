"""``KafkatierDataSource``: the Python data source named ``kafkatier`` (Spark's ``KafkaSourceProvider``).

Spark pickles the data source, its reader and writer by reference to this module, so executors import them
from the installed ``kafkatier`` package: install the wheel on every machine of a cluster (it brings
confluent-kafka and pyarrow with it).  The name is not ``kafka``: Spark's own Kafka source wins that name.
PySpark finds it without registration through the top-level ``pyspark_kafkatier`` package, whose
``DefaultSource`` is this class.
"""
from __future__ import annotations

from pyspark.sql.datasource import DataSource

from kafkatier.spark.errors import message_first
from kafkatier.spark.options import check_option_names, include_headers

NAME = "kafkatier"


class KafkatierDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self):
        from kafkatier.spark.reader import source_schema

        with message_first(Exception):
            check_option_names(self.options)
            return source_schema(include_headers(self.options))

    def reader(self, schema):
        from kafkatier.spark.reader import KafkaBatchReader

        with message_first(Exception):
            return KafkaBatchReader.create(self.options)

    def writer(self, schema, overwrite: bool):
        from kafkatier.spark.writer import KafkaBatchWriter

        with message_first(Exception):
            return KafkaBatchWriter.create(self.options, schema, overwrite)


def register(spark) -> None:
    """Register the data source in ``spark`` (a ``SparkSession``) by hand.

    Not needed: PySpark finds the installed ``pyspark_kafkatier`` package on its own, for every session and
    thread of the driver.  Kept as a harmless alias for code written before (registering again replaces the
    same class)."""
    spark.dataSource.register(KafkatierDataSource)
