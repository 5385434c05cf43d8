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


def _recorded(archive: ClassArchive) -> None:
    """A recording of ``archive`` as its JVM leaves it, settled by the next plan."""
    with open(os.path.join(archive.directory, f"{archive.key}-1.part"), "wb") as f:
        f.write(_archive_bytes(complete=True))
    assert archive.plan(recordings=[]).archive == archive.path


def test_a_new_key_replaces_the_old_archive(tmp_path):
    old = ClassArchive(str(tmp_path), "old")
    _recorded(old)
    new = ClassArchive(str(tmp_path), "new")
    (tmp_path / "new-1.part").write_bytes(_archive_bytes(complete=True))
    assert new.plan(recordings=[]).archive == new.path
    assert sorted(os.listdir(tmp_path)) == ["new.jsa", "new.ok"]
    assert is_complete(new.path)


def test_a_truncated_archive_is_removed_and_recorded_again(tmp_path):
    """HotSpot 17 maps a truncated dynamic archive and dies with SIGBUS: the archive's size is checked first."""
    archive = ClassArchive(str(tmp_path), "k1")
    _recorded(archive)
    with open(archive.path, "r+b") as f:
        f.truncate(40)                       # the magic is still there
    plan = archive.plan(recordings=[])
    assert plan.archive is None and plan.recording is not None
    assert "damaged" in plan.note and archive.path in plan.note and plan.warning
    assert not os.path.exists(archive.path) and not os.path.exists(archive.stamp_path)


def test_garbled_bytes_of_the_same_size_are_not_mapped(tmp_path):
    """Garbled contents made the JVM die with SIGSEGV: an archive changed after it was recorded is not mapped."""
    archive = ClassArchive(str(tmp_path), "k1")
    _recorded(archive)
    st = os.stat(archive.path)
    with open(archive.path, "r+b") as f:
        f.seek(8)
        f.write(b"\xff" * 16)
    os.utime(archive.path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    plan = archive.plan(recordings=[])
    assert plan.archive is None and "damaged" in plan.note


def test_an_archive_without_its_stamp_is_not_mapped(tmp_path):
    """An archive copied in (or left by a kafkatier that wrote no stamp) is recorded again, said once."""
    archive = ClassArchive(str(tmp_path), "k1")
    (tmp_path / "k1.jsa").write_bytes(_archive_bytes(complete=True))
    plan = archive.plan(recordings=[])
    assert plan.archive is None and plan.recording is not None and "no .ok stamp" in plan.note
    assert not plan.warning        # the first run after an upgrade: nothing for the user to fix


def test_a_read_only_cache_directory_runs_without_recording(tmp_path, monkeypatch):
    """The recording JVM would fail to create its file as it exits ("Unable to use shared archive", exit 1),
    and every command would record again: nothing is recorded where nothing can be written."""
    from kafkatier.spark import class_archive
    archive = ClassArchive(str(tmp_path), "k1")

    def refuse(*_args, **_kwargs):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(class_archive.tempfile, "mkstemp", refuse)
    plan = archive.plan(recordings=[])
    assert plan.java_options == "" and plan.recording is None
    assert "not writable" in plan.note and plan.warning


def test_a_read_only_directory_still_maps_its_archive(tmp_path, monkeypatch):
    from kafkatier.spark import class_archive
    archive = ClassArchive(str(tmp_path), "k1")
    _recorded(archive)
    monkeypatch.setattr(class_archive.tempfile, "mkstemp", lambda **_k: (_ for _ in ()).throw(OSError(30, "ro")))
    assert archive.plan(recordings=[]).archive == archive.path


def test_two_runs_at_once_the_second_says_why_it_runs_without(tmp_path):
    archive = ClassArchive(str(tmp_path), "k1")
    first = archive.plan(recordings=[])
    jvm = [f"java\0-XX:ArchiveClassesAtExit={first.recording}\0org.apache.spark.deploy.SparkSubmit"]
    second = archive.plan(recordings=jvm)
    assert second.java_options == "" and "another command is recording" in second.note and not second.warning


def test_a_failing_plan_never_fails_the_session(tmp_path, monkeypatch, caplog):
    """Whatever the cache does, the session starts without the archive and one line says why."""
    from kafkatier.spark import class_archive

    def broken(self, recordings=None):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(class_archive.ClassArchive, "plan", broken)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("KAFKATIER_SPARK_CLASS_ARCHIVE", raising=False)
    with caplog.at_level("WARNING", logger="kafkatier.spark.jobs"):
        assert jobs._class_archive_plan(str(tmp_path)) is None
    assert [r.levelname for r in caplog.records if "class archive" in r.getMessage()] == ["WARNING"]


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


def test_a_damaged_archive_is_one_warning_line_of_the_session(tmp_path, monkeypatch, caplog):
    archive = ClassArchive(str(tmp_path), "k1")
    _recorded(archive)
    with open(archive.path, "ab") as f:
        f.write(b"more")
    monkeypatch.setattr(ClassArchive, "for_session", classmethod(lambda cls, *a, **k: archive))
    monkeypatch.setattr("kafkatier.spark.class_archive._recording_command_lines", lambda: [])
    with caplog.at_level("INFO", logger="kafkatier.spark"):
        plan = jobs._class_archive_plan(str(tmp_path))
    assert plan.recording is not None and plan.archive is None
    lines = [r for r in caplog.records if "class archive" in r.getMessage()]
    assert [r.levelname for r in lines] == ["WARNING"] and "damaged" in lines[0].getMessage()
