"""Remote storage managers: the plugin interface (Kafka's ``RemoteStorageManager``) and the default
file-based implementation with Kafka's ``LocalTieredStorage`` layout
(docs/kip-950-tiered-storage.md#remote-storage-layout).

Layout, under ``<dir>/kafka-tiered-storage``::

    <topic>-<partition>-<topicId>/<startOffset, 20 digits>-<segmentId>.log
                                                                  .index
                                                                  .timeindex
                                                                  .txnindex          (only if the segment has one)
                                                                  .snapshot          (producer state)
                                                                  .leader_epoch_checkpoint

The directory is shared by every broker of a cluster.  A copy writes each file as ``<name>.tmp``, fsyncs and
renames it; on any error every file of the set written so far is removed and the error re-raised, so a failed
copy leaves nothing behind.  Readers only ever open segments whose metadata reached COPY_SEGMENT_FINISHED.

Configs (passed without their ``rsm.config.`` prefix): ``dir``, ``delete.on.close`` (false), ``delete.enable``
(true; false makes segment deletion a no-op), ``broker.id`` (required), and **Project** ``copy.delay.ms`` (0):
a pause after the ``.log`` file is written, so tests can observe (and interrupt) a copy in progress, and
``delete.delay.ms`` (0): a pause before a segment's files are deleted, so tests can observe deletions still
running (KIP-950 re-enable while old segments are being deleted).
"""
from __future__ import annotations

import abc
import enum
import os
import re
import shutil
import threading
from typing import Any, Mapping

import attrs

from kafkatier.common.atomic_file import fsync_dir
from kafkatier.common.files import delete_if_exists
from kafkatier.common.structs import TopicIdPartition
from kafkatier.log.remote.remote_log_segment_metadata import RemoteLogSegmentMetadata
from kafkatier.logsetup import get_logger, kv

log = get_logger("remote.storage")

ROOT_DIR_NAME = "kafka-tiered-storage"
LEGAL_TOPIC_CHARS = r"[a-zA-Z0-9._-]"
PARTITION_DIR_RE = re.compile(rf"({LEGAL_TOPIC_CHARS}+)-(\d+)-([a-zA-Z0-9_-]{{22}})")
FILE_STEM_RE = re.compile(r"(\d{20})-([a-zA-Z0-9_-]{22})")


class RemoteStorageError(Exception):
    """Kafka's ``RemoteStorageException``."""


class RemoteResourceNotFoundError(RemoteStorageError):
    """Kafka's ``RemoteResourceNotFoundException``: the requested remote file does not exist."""


class IndexType(enum.Enum):
    """Kafka's ``RemoteStorageManager.IndexType`` with the LocalTieredStorage file suffix of each."""

    OFFSET = ".index"
    TIMESTAMP = ".timeindex"
    PRODUCER_SNAPSHOT = ".snapshot"
    TRANSACTION = ".txnindex"
    LEADER_EPOCH = ".leader_epoch_checkpoint"


LOG_SUFFIX = ".log"
ALL_SUFFIXES = (LOG_SUFFIX,) + tuple(t.value for t in IndexType)


@attrs.frozen
class LogSegmentData:
    """What a copy uploads (Kafka's ``LogSegmentData``): paths of the local files and the leader epoch
    checkpoint content for the segment.  ``transaction_index`` is optional; a missing producer snapshot is
    uploaded as an empty file."""

    log_segment: str
    offset_index: str
    time_index: str
    transaction_index: str | None
    producer_snapshot_index: str | None
    leader_epoch_index: bytes


class RemoteStorageManager(abc.ABC):
    """The storage plugin: copies, reads and deletes segment file sets.  Implementations must be thread-safe."""

    def configure(self, configs: Mapping[str, Any]) -> None:  # noqa: B027 - optional hook
        """Receive the ``rsm.config.*`` properties (prefix removed) plus ``broker.id``."""

    @abc.abstractmethod
    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        """Upload a segment; returns optional custom metadata.  On failure nothing of the set may remain."""

    @abc.abstractmethod
    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> bytes:
        """Bytes ``[start_position, end_position]`` (end inclusive, None = to the end) of the segment's log."""

    @abc.abstractmethod
    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """The whole content of one index file of the segment."""

    @abc.abstractmethod
    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete every file of the segment; deleting what is already gone succeeds."""

    def delete_partition(self, topic_id_partition: TopicIdPartition) -> None:  # noqa: B027 - optional hook
        """Remove what is left of a partition (its directory); called after all its segments were deleted."""

    def close(self) -> None:  # noqa: B027 - optional hook
        pass


def _bool(configs: Mapping[str, Any], name: str, default: bool) -> bool:
    v = configs.get(name)
    return default if v is None else str(v).strip().lower() == "true"


class LocalTieredStorage(RemoteStorageManager):
    """Kafka's test storage manager: a directory tree, usually shared by all brokers of a local cluster."""

    def __init__(self, storage_dir: str | None = None, broker_id: int | None = None):
        self._root: str | None = None
        self.broker_id = broker_id
        self.delete_on_close = False
        self.delete_enable = True
        self.copy_delay_s = 0.0
        self.delete_delay_s = 0.0
        self._closed = threading.Event()
        if storage_dir is not None:
            self.configure({"dir": storage_dir, "broker.id": broker_id if broker_id is not None else -1})

    def configure(self, configs: Mapping[str, Any]) -> None:
        if configs.get("broker.id") is None:
            raise RemoteStorageError("Broker ID is required to configure the LocalTieredStorage manager.")
        self.broker_id = int(configs["broker.id"])
        base = configs.get("dir")
        if not base:
            raise RemoteStorageError("LocalTieredStorage needs a storage directory (rsm.config.dir or "
                                     "--remote-storage-dir)")
        self._root = os.path.join(os.path.abspath(str(base)), ROOT_DIR_NAME)
        os.makedirs(self._root, exist_ok=True)
        self.delete_on_close = _bool(configs, "delete.on.close", False)
        self.delete_enable = _bool(configs, "delete.enable", True)
        self.copy_delay_s = max(0, int(configs.get("copy.delay.ms", 0) or 0)) / 1000.0
        self.delete_delay_s = max(0, int(configs.get("delete.delay.ms", 0) or 0)) / 1000.0
        log.info(kv(event="local_tiered_storage_configured", root=self._root, broker=self.broker_id,
                    delete_enable=self.delete_enable))

    # --- naming -----------------------------------------------------------------------------------------------
    @property
    def root(self) -> str:
        if self._root is None:
            raise RemoteStorageError("LocalTieredStorage is not configured")
        return self._root

    @staticmethod
    def partition_dir_name(tip: TopicIdPartition) -> str:
        return f"{tip.topic}-{tip.partition}-{tip.topic_id}"

    def partition_dir(self, tip: TopicIdPartition) -> str:
        return os.path.join(self.root, self.partition_dir_name(tip))

    @staticmethod
    def file_stem(metadata: RemoteLogSegmentMetadata) -> str:
        return f"{metadata.start_offset:020d}-{metadata.segment_id}"

    def path_of(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        return os.path.join(self.partition_dir(metadata.topic_id_partition), self.file_stem(metadata) + suffix)

    # --- copy -------------------------------------------------------------------------------------------------
    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        pdir = self.partition_dir(metadata.topic_id_partition)
        written: list[str] = []
        try:
            os.makedirs(pdir, exist_ok=True)
            sources: list[tuple[str, str | bytes | None]] = [
                (LOG_SUFFIX, data.log_segment),
                (IndexType.OFFSET.value, data.offset_index),
                (IndexType.TIMESTAMP.value, data.time_index),
                (IndexType.TRANSACTION.value, data.transaction_index),
                (IndexType.PRODUCER_SNAPSHOT.value, data.producer_snapshot_index or b""),
                (IndexType.LEADER_EPOCH.value, data.leader_epoch_index),
            ]
            for suffix, source in sources:
                if source is None:
                    continue  # the transaction index is the only optional file
                target = self.path_of(metadata, suffix)
                self._write_file(target, source, written)
                if suffix == LOG_SUFFIX and self.copy_delay_s > 0:
                    if self._closed.wait(self.copy_delay_s):
                        raise RemoteStorageError("LocalTieredStorage closed during a copy")
            fsync_dir(pdir)
        except BaseException as e:
            for path in written:
                delete_if_exists(path)
                delete_if_exists(path + ".tmp")
            log.warning(kv(event="copy_failed_partial_data_removed", segment=metadata.segment_id,
                           files=len(written), error=repr(e)))
            if isinstance(e, RemoteStorageError) or not isinstance(e, Exception):
                raise
            raise RemoteStorageError(f"Failed to copy remote log segment {metadata.remote_log_segment_id}: "
                                     f"{e}") from e
        return None

    @staticmethod
    def _write_file(target: str, source: str | bytes, written: list[str]) -> None:
        tmp = target + ".tmp"
        written.append(target)
        if isinstance(source, (bytes, bytearray)):
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view = memoryview(source)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
        else:
            with open(source, "rb") as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst, 1024 * 1024)
                dst.flush()
                os.fsync(dst.fileno())
        os.replace(tmp, target)

    # --- reads ------------------------------------------------------------------------------------------------
    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> bytes:
        if start_position < 0:
            raise RemoteStorageError("Start position must be positive")
        if end_position is not None and end_position < start_position:
            raise RemoteStorageError("End position cannot be less than startPosition")
        path = self.path_of(metadata, LOG_SUFFIX)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if end_position is not None and end_position >= size:
                    raise RemoteStorageError("End position cannot be greater than segment size")
                f.seek(start_position)
                n = (size if end_position is None else end_position + 1) - start_position
                return f.read(max(0, n))
        except FileNotFoundError:
            raise RemoteResourceNotFoundError(f"Remote log segment file not found: {path}") from None
        except OSError as e:
            raise RemoteStorageError(f"Internal error in local remote storage: {e}") from e

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        path = self.path_of(metadata, index_type.value)
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise RemoteResourceNotFoundError(f"Remote index file not found: {path}") from None
        except OSError as e:
            raise RemoteStorageError(f"Internal error in local remote storage: {e}") from e

    # --- delete -----------------------------------------------------------------------------------------------
    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        if not self.delete_enable:
            log.info(kv(event="segment_delete_disabled", segment=metadata.segment_id))
            return
        if self.delete_delay_s > 0 and self._closed.wait(self.delete_delay_s):
            raise RemoteStorageError("LocalTieredStorage closed during a delete")
        try:
            for suffix in ALL_SUFFIXES:
                path = self.path_of(metadata, suffix)
                delete_if_exists(path)
                delete_if_exists(path + ".tmp")
        except OSError as e:
            raise RemoteStorageError(f"Failed to delete remote log segment with id:"
                                     f"{metadata.remote_log_segment_id}") from e

    def delete_partition(self, topic_id_partition: TopicIdPartition) -> None:
        if not self.delete_enable:
            return
        pdir = self.partition_dir(topic_id_partition)
        if self.segment_stems(topic_id_partition):
            log.warning(kv(event="partition_dir_kept", dir=pdir, reason="segments left"))
            return
        shutil.rmtree(pdir, ignore_errors=True)

    def segment_stems(self, topic_id_partition: TopicIdPartition) -> list[str]:
        """``<start>-<segmentId>`` of every file set present for the partition (sorted); [] if none."""
        try:
            names = os.listdir(self.partition_dir(topic_id_partition))
        except FileNotFoundError:
            return []
        stems = set()
        for n in names:
            for suffix in ALL_SUFFIXES:
                if n.endswith(suffix) and FILE_STEM_RE.fullmatch(n[: -len(suffix)]):
                    stems.add(n[: -len(suffix)])
        return sorted(stems)

    def close(self) -> None:
        self._closed.set()
        if self.delete_on_close and self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
