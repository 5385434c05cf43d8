"""Kafka message-spec JSON files for the ZooKeeper-mode control-plane APIs that kafka-python does not ship.

Loaded by :mod:`kafkatier.protocol.control_requests` through ``importlib.resources``.
"""
