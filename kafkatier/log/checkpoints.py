"""Kafka's text checkpoint files.

Layout (``CheckpointFile``): a version line (``0``), an entry count line, then one entry per line. Offset
checkpoints (``recovery-point-offset-checkpoint``, ``replication-offset-checkpoint``,
``log-start-offset-checkpoint``, ``cleaner-offset-checkpoint``) hold ``<topic> <partition> <offset>``; the
``leader-epoch-checkpoint`` holds ``<epoch> <startOffset>``. Writes are atomic (temp, fsync, rename, fsync dir).

Reading a malformed file raises :class:`CheckpointReadError` with Kafka's messages. Like Kafka, this module
never skips bad lines: a half-read checkpoint could silently move a recovery point or a log start offset.
What a caller does with the error is its choice; the log manager logs a warning and falls back to the safe
value (recovery point 0, i.e. full recovery; log start offset = first segment's base offset).
"""
from __future__ import annotations

import os
import re
from typing import Callable, Generic, Iterable, Mapping, TypeVar

from kafkatier.common.atomic_file import atomic_write
from kafkatier.log.errors import CheckpointReadError

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"

CURRENT_VERSION = 0
_WS = re.compile(r"\s+")

T = TypeVar("T")


def _java_split(line: str) -> list[str]:
    """Split on whitespace the way Java's ``Pattern.split`` does (leading empty token kept, trailing dropped)."""
    parts = _WS.split(line)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def encode_entries(entries: Iterable[T], format_entry: Callable[[T], str], version: int = CURRENT_VERSION) -> bytes:
    """A checkpoint's bytes: version line, count line, one formatted entry per line."""
    entries = list(entries)
    lines = [str(version), str(len(entries))] + [format_entry(e) for e in entries]
    return ("\n".join(lines) + "\n").encode("utf-8")


def decode_entries(raw: bytes, parse_entry: Callable[[str], T | None], where: str,
                   version: int = CURRENT_VERSION) -> list[T]:
    """Inverse of :func:`encode_entries`; empty input reads as no entries.  Raises CheckpointReadError with
    Kafka's messages (``where`` names the file) -- never skips a bad line."""
    def malformed(line: str) -> CheckpointReadError:
        return CheckpointReadError(f"Malformed line in checkpoint file [{where}]: {line}")
    try:
        lines = raw.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise CheckpointReadError(f"Error while reading checkpoint file [{where}]: {e}") from None
    if not lines:
        return []
    try:
        found_version = int(lines[0])
    except ValueError:
        raise malformed(lines[0]) from None
    if found_version != version:
        raise CheckpointReadError(f"Unrecognised version:{found_version}, expected version: {version} "
                                  f"in checkpoint file at: {where}")
    if len(lines) < 2:
        return []
    try:
        expected = int(lines[1])
    except ValueError:
        raise malformed(lines[1]) from None
    entries: list[T] = []
    for line in lines[2:]:
        entry = parse_entry(line)
        if entry is None:
            raise malformed(line)
        entries.append(entry)
    if len(entries) != expected:
        raise CheckpointReadError(f"Expected [{expected}] entries in checkpoint file [{where}], "
                                  f"but found only [{len(entries)}]")
    return entries


class CheckpointFile(Generic[T]):
    """A versioned list of entries, one per line."""

    def __init__(self, path: str, format_entry: Callable[[T], str], parse_entry: Callable[[str], T | None],
                 version: int = CURRENT_VERSION, create: bool = True):
        self.path = path
        self.version = version
        self._format = format_entry
        self._parse = parse_entry
        if create and not os.path.exists(path):
            # Kafka creates a missing checkpoint file empty; an empty file reads as no entries.
            with open(path, "ab"):
                pass

    def write_entries(self, entries: Iterable[T], sync: bool = True) -> None:
        """Replace the file atomically; ``sync=False`` leaves durability to a later synced write."""
        atomic_write(self.path, encode_entries(entries, self._format, self.version), sync=sync)

    def read_entries(self) -> list[T]:
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return []
        return decode_entries(raw, self._parse, self.path, self.version)


def _parse_offset_line(line: str) -> tuple[tuple[str, int], int] | None:
    parts = _java_split(line)
    if len(parts) != 3 or not parts[0]:
        return None
    try:
        return (parts[0], int(parts[1])), int(parts[2])
    except ValueError:
        return None


def _format_offset_entry(entry: tuple[tuple[str, int], int]) -> str:
    (topic, partition), offset = entry
    return f"{topic} {partition} {offset}"


class OffsetCheckpointFile:
    """A per-log-dir ``topic partition offset`` checkpoint."""

    def __init__(self, path: str, create: bool = True):
        self._file: CheckpointFile[tuple[tuple[str, int], int]] = CheckpointFile(
            path, _format_offset_entry, _parse_offset_line, create=create)

    @property
    def path(self) -> str:
        return self._file.path

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Atomically replace the file; entries are sorted by topic and partition."""
        self._file.write_entries(sorted(offsets.items()))

    def read(self) -> dict[tuple[str, int], int]:
        """Return ``{(topic, partition): offset}``; raise CheckpointReadError if the file is malformed."""
        return dict(self._file.read_entries())
