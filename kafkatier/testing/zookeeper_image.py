"""The ZooKeeper image, built here because no image can be pulled.

Recipe (``kafkatier zookeeper build-image``):

1. ``debootstrap --variant=minbase bookworm`` with ``openjdk-17-jre-headless``, from the Debian mirror apt uses
   on this machine (``$KAFKATIER_DEBIAN_MIRROR`` overrides it); downloaded packages are kept in
   ``~/.cache/kafkatier/debootstrap`` so a rebuild does not download them again;
2. documentation, locales and apt's lists removed;
3. the ZooKeeper jars bundled with pyspark (the embedded server's classpath, :func:`zookeeper_classpath`) copied
   to ``/opt/zookeeper/lib``;
4. ``docker import`` as ``kafkatier/zookeeper:<hash>``.

The tag is a hash of the inputs (suite, packages, recipe version, name and content of every jar), so an image is
rebuilt only when one of them changes; :func:`ensure_image` returns the cached one otherwise.  The container
runs ``QuorumPeerMain /zk/zoo.cfg``: the configuration, ``myid`` and the data live in a host directory mounted
at ``/zk`` (see :mod:`kafkatier.testing.zookeeper_container`).  Building needs root (debootstrap, chroot).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import attrs

from kafkatier.logsetup import get_logger, kv
from kafkatier.testing.docker_engine import docker_client
from kafkatier.cluster.embedded_zookeeper import zookeeper_classpath

log = get_logger("docker")

REPOSITORY = "kafkatier/zookeeper"
INPUTS_LABEL = "kafkatier.image.inputs"
RECIPE_VERSION = 1
SUITE = "bookworm"
PACKAGES = ("openjdk-17-jre-headless",)
JAVA_HOME = "/usr/lib/jvm/java-17-openjdk-amd64"
LIB_DIR = "/opt/zookeeper/lib"
CONFIG_DIR = "/zk"      # mount point of the server's host directory: zoo.cfg, log4j2.xml, data/
DEFAULT_MIRROR = "http://deb.debian.org/debian"
MIRROR_ENV = "KAFKATIER_DEBIAN_MIRROR"
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kafkatier"
_TRIMMED = ("usr/share/doc", "usr/share/man", "usr/share/locale", "usr/share/info", "var/lib/apt/lists",
            "var/cache/apt/archives")

SERVER_COMMAND = (
    f"{JAVA_HOME}/bin/java", "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={CONFIG_DIR}/log4j2.xml",
    "-cp", f"{LIB_DIR}/*", "org.apache.zookeeper.server.quorum.QuorumPeerMain", f"{CONFIG_DIR}/zoo.cfg",
)


class ImageBuildError(RuntimeError):
    """The image could not be built; the message says which step failed."""


@attrs.frozen
class ImageInputs:
    """Everything the image is made of; its hash names the image."""

    suite: str
    packages: tuple[str, ...]
    recipe_version: int
    jars: tuple[Path, ...]

    @classmethod
    def current(cls) -> "ImageInputs":
        jars = tuple(Path(p) for p in zookeeper_classpath().split(os.pathsep))
        return cls(suite=SUITE, packages=PACKAGES, recipe_version=RECIPE_VERSION, jars=jars)

    def digest(self) -> str:
        h = hashlib.sha256()
        h.update(json.dumps([self.suite, list(self.packages), self.recipe_version, list(SERVER_COMMAND)]).encode())
        for jar in sorted(self.jars, key=lambda p: p.name):
            h.update(jar.name.encode() + b"\0")
            with open(jar, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        return h.hexdigest()

    @property
    def tag(self) -> str:
        return f"{REPOSITORY}:{self.digest()[:16]}"


@attrs.frozen
class ImageBuild:
    """What :func:`ensure_image` did: the image's tag, whether it was built now, and how long it took."""

    tag: str
    built: bool
    seconds: float


def debian_mirror() -> str:
    """The mirror apt uses here (first ``URIs:`` of ``debian.sources`` or ``deb`` line), else deb.debian.org."""
    override = os.environ.get(MIRROR_ENV)
    if override:
        return override
    candidates = [Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")]
    for path in candidates:
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            words = line.split()
            if words[:1] == ["URIs:"] and len(words) > 1 and "security" not in words[1]:
                return words[1]
            if words[:1] == ["deb"] and len(words) > 2 and "security" not in line:
                return next(w for w in words[1:] if "://" in w)
    return DEFAULT_MIRROR


def image_exists(client, tag: str) -> bool:
    from docker.errors import ImageNotFound
    try:
        client.images.get(tag)
    except ImageNotFound:
        return False
    return True


def ensure_image(rebuild: bool = False, progress=print) -> ImageBuild:
    """The ZooKeeper image's tag, building it first when its inputs changed (or ``rebuild``)."""
    started = time.monotonic()
    client = docker_client()
    inputs = ImageInputs.current()
    tag = inputs.tag
    if not rebuild and image_exists(client, tag):
        return ImageBuild(tag=tag, built=False, seconds=time.monotonic() - started)
    build_image(client, inputs, progress)
    return ImageBuild(tag=tag, built=True, seconds=time.monotonic() - started)


def _run(step: str, argv: list[str], log_path: Path) -> None:
    with open(log_path, "ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        rc = subprocess.call(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    if rc != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
        raise ImageBuildError(f"{step} failed (exit {rc}); see {log_path}:\n{tail}")


def build_image(client, inputs: ImageInputs, progress=print) -> None:
    """Build ``inputs.tag`` from scratch (see the module docstring)."""
    if os.geteuid() != 0:
        raise ImageBuildError("building the ZooKeeper image needs root (debootstrap and chroot)")
    if shutil.which("debootstrap") is None:
        raise ImageBuildError("debootstrap is not installed (apt-get install debootstrap; scripts/docker.sh "
                              "does it)")
    deb_cache = CACHE_DIR / "debootstrap"
    deb_cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kafkatier-image-", dir="/var/tmp"))
    log_path = CACHE_DIR / "build-image.log"
    log_path.write_text(f"building {inputs.tag}\n")
    try:
        rootfs = work / "rootfs"
        mirror = debian_mirror()
        progress(f"debootstrap {inputs.suite} + {' '.join(inputs.packages)} from {mirror} (log: {log_path})")
        _run("debootstrap", ["debootstrap", "--variant=minbase", f"--include={','.join(inputs.packages)}",
                             f"--cache-dir={deb_cache}", inputs.suite, str(rootfs), mirror], log_path)
        for rel in _TRIMMED:
            target = rootfs / rel
            if target.is_dir():
                shutil.rmtree(target)
                target.mkdir()
        lib = rootfs / LIB_DIR.lstrip("/")
        lib.mkdir(parents=True)
        for jar in inputs.jars:
            shutil.copy2(jar, lib / jar.name)
        (rootfs / CONFIG_DIR.lstrip("/")).mkdir(exist_ok=True)
        progress(f"docker import {inputs.tag} ({len(inputs.jars)} ZooKeeper jars)")
        tarball = work / "rootfs.tar"
        _run("tar", ["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tarball), "."], log_path)
        changes = [
            f"ENV JAVA_HOME={JAVA_HOME}",
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            f"WORKDIR {CONFIG_DIR}",
            f"LABEL {INPUTS_LABEL}={inputs.digest()}",
            "CMD " + json.dumps(list(SERVER_COMMAND)),
        ]
        repository, _, version = inputs.tag.partition(":")
        client.api.import_image_from_file(str(tarball), repository=repository, tag=version, changes=changes)
        if not image_exists(client, inputs.tag):
            raise ImageBuildError(f"docker import did not create {inputs.tag}")
        _remove_older_images(client, inputs.tag)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log.info("image built %s", kv(tag=inputs.tag))


def _remove_older_images(client, keep: str) -> None:
    """Remove our images built from other inputs (unused ones only; a running test may still hold one)."""
    from docker.errors import APIError
    for image in client.images.list(name=REPOSITORY):
        if keep in image.tags:
            continue
        for tag in image.tags:
            try:
                client.images.remove(tag)
            except APIError as e:
                log.info("kept older image %s", kv(tag=tag, reason=str(e)[:120]))
