"""Test support for kafkatier users and for kafkatier's own suite.

- :mod:`kafkatier.testing.docker_engine`: reaching the Docker daemon, and our own clean-up by label (Ryuk off).
- :mod:`kafkatier.testing.zookeeper_image`: the ZooKeeper image built here (debootstrap + pyspark's jars).
- :mod:`kafkatier.testing.zookeeper_container`: one ZooKeeper server, or a 3-server ensemble, in containers,
  with the fault helpers (pause, kill, restart, stop and start from the data).
- :mod:`kafkatier.testing.clusters`: broker clusters against any ZooKeeper.
- :mod:`kafkatier.testing.plugin`: the pytest plugin (entry point ``pytest11``) exposing all of them as fixtures.
"""
