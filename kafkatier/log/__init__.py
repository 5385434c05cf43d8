"""The broker's local log storage in Kafka's on-disk formats (segments, indexes, checkpoints)."""
from kafkatier.log.log import Log
from kafkatier.log.log_config import LogConfig
from kafkatier.log.log_manager import LogManager
from kafkatier.log.record_batch import AppendInfo, BatchHeader
from kafkatier.log.segment import FetchDataInfo, LogOffsetMetadata, TimestampAndOffset

__all__ = ["Log", "LogConfig", "LogManager", "AppendInfo", "BatchHeader", "FetchDataInfo", "LogOffsetMetadata",
           "TimestampAndOffset"]
