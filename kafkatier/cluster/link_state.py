"""``<data-dir>/links/links.json``: the link process's state (links, ports, faults), read and changed under
``links.json.lock`` and replaced atomically (``common/atomic_file.py``), so a killed writer leaves the old or the
new table, never a mix; and ``links/faults.jsonl``, one line per fault applied or healed."""
from __future__ import annotations

import contextlib
import fcntl
import json
import os

from kafkatier.cluster.link_faults import LinkTable
from kafkatier.common.atomic_file import atomic_write

LINKS_DIR = "links"
STATE_FILE = "links.json"
FAULT_LOG = "faults.jsonl"


class LinkStateFile:
    def __init__(self, data_dir: str):
        self.dir = os.path.join(os.path.abspath(data_dir), LINKS_DIR)
        self.path = os.path.join(self.dir, STATE_FILE)
        self.fault_log = os.path.join(self.dir, FAULT_LOG)

    def exists(self) -> bool:
        return os.path.exists(self.path)

    @contextlib.contextmanager
    def locked(self):
        os.makedirs(self.dir, exist_ok=True)
        with open(self.path + ".lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def read(self) -> LinkTable:
        with open(self.path) as f:
            return LinkTable.from_json(json.load(f))

    def write(self, table: LinkTable) -> None:
        os.makedirs(self.dir, exist_ok=True)
        atomic_write(self.path, (json.dumps(table.to_json(), indent=1) + "\n").encode())

    def record(self, entry: dict) -> None:
        with open(self.fault_log, "a") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")

    def records(self) -> list[dict]:
        try:
            with open(self.fault_log) as f:
                return [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []
