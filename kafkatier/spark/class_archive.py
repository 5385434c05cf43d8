"""A dynamic AppCDS archive of the driver JVM's classes, for the local sessions of the ``kafkatier spark`` commands.

Most of a local session's start-up is the driver JVM finding, parsing and verifying Spark's classes in 280 jars.
HotSpot's class data sharing maps classes it archived before instead: the first command whose session has no
archive yet records one (``-XX:ArchiveClassesAtExit``, written when its JVM exits, after the command returned),
the next ones map it (``-XX:SharedArchiveFile``).  A bare local session started about three times faster with it
on a loaded machine (docs/spark.md has the numbers).

Where: ``$XDG_CACHE_HOME/kafkatier/spark-cds`` (default ``~/.cache``), one ``<key>.jsa`` of about 160 MB, the
key a hash of the ``java`` binary, the Spark jars and the JVM options (an archive only serves the JVM, class path
and options it was made with; the JVM itself refuses a mismatch).  Recording another key removes the old ones.

A recording JVM writes ``<key>-<token>.part``; its header, with the archive's magic number, is written last, so
a ``.part`` whose JVM is gone (no process has its name on its command line) and that starts with the magic is
complete and renamed to ``<key>.jsa``; one without the magic (its JVM was killed while writing) is removed.  While a recording runs, other commands
neither use nor record an archive.  The JVM's CDS messages are off (``-Xlog``): a mismatched or missing archive
only means a slower start.
"""
from __future__ import annotations

import glob
import hashlib
import os
import secrets
import shutil
import struct
import tempfile

import attrs

from kafkatier.logsetup import get_logger, kv

log = get_logger("spark.class-archive")

# HotSpot's CDS_DYNAMIC_ARCHIVE_MAGIC, the first 4 bytes (native order) of a complete dynamic archive.
DYNAMIC_ARCHIVE_MAGIC = 0xF00BABA8
# The JVM's unified logging off (CDS warnings would otherwise go to stdout), errors still to stderr.
QUIET = "-Xlog:disable -Xlog:all=error:stderr"


def default_directory() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "kafkatier", "spark-cds")


def archive_key(java_options: str, spark_jars: str, java: str | None = None) -> str:
    """A hash of what an archive depends on: the ``java`` binary (path, size, time), the jars (names, sizes)
    and the JVM options."""
    h = hashlib.sha256(java_options.encode())
    java = java or _java_binary()
    for path in ([java] if java else []) + sorted(glob.glob(os.path.join(spark_jars, "*.jar"))):
        try:
            st = os.stat(path)
        except OSError:
            continue
        h.update(f"{path}\0{st.st_size}\0{int(st.st_mtime)}\n".encode())
    return h.hexdigest()[:16]


def _java_binary() -> str | None:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.exists(java) else None


def is_complete(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return len(head) == 4 and struct.unpack("=I", head)[0] == DYNAMIC_ARCHIVE_MAGIC


def _recording_command_lines() -> list[str]:
    """The command lines of live processes recording an archive (Linux ``/proc``)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    line = f.read().decode(errors="replace")
            except OSError:
                continue
            if "-XX:ArchiveClassesAtExit=" in line:
                out.append(line)
    return out


def _stamp(path: str) -> str:
    """What ``<key>.ok`` holds: the archive's size and modification time (nanoseconds)."""
    st = os.stat(path)
    return f"{st.st_size} {st.st_mtime_ns}"


def _writable(directory: str) -> bool:
    """Whether a file can be created in ``directory`` (``os.access`` answers for root on a read-only mount)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=directory)
    except OSError:
        return False
    os.close(fd)
    _remove(probe)
    return True


def _remove(*paths: str) -> None:
    """Remove each of ``paths`` that can be removed (gone already, or not ours to remove: left)."""
    for p in paths:
        try:
            os.remove(p)
        except OSError:
            pass


@attrs.frozen
class ArchivePlan:
    """The JVM options of one session: map ``archive``, record to ``recording``, or neither (empty).  ``note``:
    why the session goes without an archive, or what was wrong with the one found (one log line), else None."""

    java_options: str
    archive: str | None = None
    recording: str | None = None
    note: str | None = None
    warning: bool = False    # the note names something wrong (a damaged archive, a directory not writable)


@attrs.frozen
class ClassArchive:
    directory: str
    key: str

    @property
    def path(self) -> str:
        return os.path.join(self.directory, f"{self.key}.jsa")

    @property
    def stamp_path(self) -> str:
        return os.path.join(self.directory, f"{self.key}.ok")

    @classmethod
    def for_session(cls, java_options: str, spark_jars: str, directory: str | None = None) -> ClassArchive | None:
        """The archive for a driver JVM started with ``java_options``; None where it cannot work (no ``/proc``
        to see recordings, no ``java`` found, a cache directory that cannot be made) or where
        ``KAFKATIER_SPARK_CLASS_ARCHIVE`` is ``0``/``false``/``off`` (the test suite sets it: a fresh clone's jars
        would record an archive of their own, a JVM writing ~160 MB after the first CLI test returned)."""
        if os.environ.get("KAFKATIER_SPARK_CLASS_ARCHIVE", "").strip().lower() in ("0", "false", "off", "no"):
            return None
        if not os.path.isdir("/proc") or _java_binary() is None:
            return None
        directory = directory or default_directory()
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            log.warning("no class archive: its directory cannot be made %s", kv(directory=directory, error=e))
            return None
        return cls(directory, archive_key(java_options, spark_jars))

    def plan(self, recordings: list[str] | None = None) -> ArchivePlan:
        """Finish recordings whose JVM is gone, then map the archive, or record one when nobody is."""
        recordings = _recording_command_lines() if recordings is None else recordings
        live = self._settle_parts(recordings)
        note, warning = None, False
        if os.path.exists(self.path):
            problem, warning = self._problem()
            if problem is None:
                return ArchivePlan(f"-XX:SharedArchiveFile={self.path} -Xshare:auto {QUIET}", archive=self.path)
            note = f"class archive {self.path} {problem}: removed"
            _remove(self.path, self.stamp_path)
        if live:
            return ArchivePlan("", note=_joined(note, "another command is recording the class archive: "
                                                      "running without it"), warning=warning)
        if not _writable(self.directory):
            return ArchivePlan("", note=_joined(note, f"class archive directory {self.directory} not writable: "
                                                      "running without the archive"), warning=True)
        part = os.path.join(self.directory, f"{self.key}-{secrets.token_hex(4)}.part")
        return ArchivePlan(f"-XX:ArchiveClassesAtExit={part} {QUIET}", recording=part, note=note, warning=warning)

    def _problem(self) -> tuple[str | None, bool]:
        """``(None, False)`` when the archive has the magic and the size and time its ``.ok`` recorded when it
        was renamed into place; else what is wrong, and whether that deserves a warning."""
        try:
            with open(self.stamp_path) as f:
                recorded = f.read().strip()
        except OSError:
            return "not recorded here (no .ok stamp: an older kafkatier's, or copied in)", False
        try:
            if is_complete(self.path) and recorded == _stamp(self.path):
                return None, False
        except OSError as e:
            return f"unreadable ({e})", True
        return "damaged (truncated or changed since it was recorded)", True

    def _settle_parts(self, recordings: list[str]) -> bool:
        """Rename a complete ``.part`` of this key to the archive (removing other keys' archives), remove
        broken ones; True when a JVM is still recording this key."""
        # A recording JVM creates its file only when it exits: its command line is what shows it.
        live = any(os.path.join(self.directory, self.key + "-") in line for line in recordings)
        for part in sorted(glob.glob(os.path.join(self.directory, "*.part"))):
            mine = os.path.basename(part).startswith(self.key + "-")
            if any(part in line for line in recordings):
                continue
            try:
                if mine and is_complete(part):
                    # The stamp first (rename keeps size and time): an archive never stands without it.
                    tmp = f"{self.stamp_path}.{secrets.token_hex(4)}.tmp"
                    with open(tmp, "w") as f:
                        f.write(_stamp(part))
                    os.replace(tmp, self.stamp_path)
                    os.replace(part, self.path)
                    self._remove_other_archives()
                else:       # a JVM killed while writing it, or another key's recording (superseded)
                    os.remove(part)
            except OSError:
                continue
        return live

    def _remove_other_archives(self) -> None:
        others = glob.glob(os.path.join(self.directory, "*.jsa")) + glob.glob(os.path.join(self.directory, "*.ok"))
        _remove(*(o for o in others if o not in (self.path, self.stamp_path)))


def _joined(*notes: str | None) -> str:
    return "; ".join(n for n in notes if n)
