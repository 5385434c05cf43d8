"""``KafkatierDataSource``: the Python data source named ``kafkatier`` (Spark's ``KafkaSourceProvider``).

Spark pickles the data source, its reader and writer by reference to this module, so executors import them
from the installed ``kafkatier`` package: install the wheel on every machine of a cluster (it brings
confluent-kafka and pyarrow with it).  The name is not ``kafka``: Spark's own Kafka source wins that name.
"""
from __future__ import annotations

from pyspark.sql.datasource import DataSource

from kafkatier.spark.options import include_headers

NAME = "kafkatier"


class KafkatierDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self):
        from kafkatier.spark.reader import source_schema

        return source_schema(include_headers(self.options))

    def reader(self, schema):
        from kafkatier.spark.reader import KafkaBatchReader

        return KafkaBatchReader.create(self.options)

    def writer(self, schema, overwrite: bool):
        from kafkatier.spark.writer import KafkaBatchWriter

        return KafkaBatchWriter.create(self.options, schema, overwrite)


def register(spark) -> None:
    """Make ``format("kafkatier")`` available in ``spark`` (a ``SparkSession``)."""
    spark.dataSource.register(KafkatierDataSource)
