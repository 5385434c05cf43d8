"""kafkatier: a ZooKeeper-mode Kafka cluster simulator with real ZooKeeper and real broker processes."""

__version__ = "0.1.0"
