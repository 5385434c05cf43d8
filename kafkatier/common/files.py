"""Small file-system helpers shared by the log layers (Kafka's ``Utils.delete`` / ``Files.deleteIfExists``)."""
from __future__ import annotations

import os


def delete_if_exists(path: str) -> None:
    """Remove the file at ``path``; a file that is already gone is not an error."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
