"""The driver JVM's class archive of ``kafkatier spark`` commands: record once, map afterwards, settle what a
recording JVM left (kafkatier/spark/class_archive.py).  No JVM runs here: the files stand in for its output."""
from __future__ import annotations

import os
import struct

from kafkatier.spark import jobs
from kafkatier.spark.class_archive import DYNAMIC_ARCHIVE_MAGIC, ClassArchive, archive_key, is_complete


def _archive_bytes(complete: bool) -> bytes:
    head = struct.pack("=I", DYNAMIC_ARCHIVE_MAGIC) if complete else b"\0\0\0\0"
    return head + b"x" * 64


def test_first_run_records_then_the_complete_recording_is_mapped(tmp_path):
    archive = ClassArchive(str(tmp_path), "k1")
    first = archive.plan(recordings=[])
    assert first.archive is None and first.recording is not None
    assert f"-XX:ArchiveClassesAtExit={first.recording}" in first.java_options
    assert "-Xlog:disable" in first.java_options

    # While its JVM runs (its command line names the file), nobody else records or maps.
    jvm = [f"java\0-XX:ArchiveClassesAtExit={first.recording}\0org.apache.spark.deploy.SparkSubmit"]
    assert archive.plan(recordings=jvm).java_options == ""

    # The JVM exited after writing it: the next run renames it and maps it.
    with open(first.recording, "wb") as f:
        f.write(_archive_bytes(complete=True))
    later = archive.plan(recordings=[])
    assert later.recording is None and later.archive == archive.path
    assert f"-XX:SharedArchiveFile={archive.path}" in later.java_options and "-Xshare:auto" in later.java_options
    assert not os.path.exists(first.recording)


def test_a_recording_cut_short_is_removed_and_recorded_again(tmp_path):
    archive = ClassArchive(str(tmp_path), "k1")
    broken = tmp_path / "k1-dead.part"
    broken.write_bytes(_archive_bytes(complete=False))          # the header (magic) is written last
    plan = archive.plan(recordings=[])
    assert not broken.exists()
    assert plan.recording is not None and plan.archive is None


def test_a_new_key_replaces_the_old_archive(tmp_path):
    old = ClassArchive(str(tmp_path), "old")
    (tmp_path / "old.jsa").write_bytes(_archive_bytes(complete=True))
    assert old.plan(recordings=[]).archive == old.path
    new = ClassArchive(str(tmp_path), "new")
    (tmp_path / "new-1.part").write_bytes(_archive_bytes(complete=True))
    assert new.plan(recordings=[]).archive == new.path
    assert sorted(os.listdir(tmp_path)) == ["new.jsa"]
    assert is_complete(new.path)


def test_the_key_follows_the_jvm_options_and_the_jars(tmp_path):
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "a.jar").write_bytes(b"1")
    java = str(tmp_path / "java")
    open(java, "w").close()
    k = archive_key("-XX:TieredStopAtLevel=1", str(jars), java)
    assert archive_key("-XX:TieredStopAtLevel=1", str(jars), java) == k
    assert archive_key("-XX:+UseG1GC", str(jars), java) != k
    (jars / "b.jar").write_bytes(b"2")
    assert archive_key("-XX:TieredStopAtLevel=1", str(jars), java) != k


def test_session_settings_keep_the_callers_jvm_options():
    """The archive options are added only to the quick-start options: a caller's own driver JVM options win
    (spark_session checks the caller's conf before planning an archive)."""
    conf = jobs.session_conf("local[2]", {"spark.driver.extraJavaOptions": "-Dmine=1"})
    assert conf["spark.driver.extraJavaOptions"] == "-Dmine=1"
    assert jobs.session_conf("local[2]")["spark.driver.extraJavaOptions"] == jobs.LOCAL_DRIVER_JAVA_OPTIONS
