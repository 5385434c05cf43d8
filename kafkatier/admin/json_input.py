"""The JSON files Kafka's admin tools read (kafka-reassign-partitions, kafka-delete-records): one JSON object
with a ``version`` field, checked with Kafka's messages before any field is read."""
from __future__ import annotations

import json


def parse_versioned_object(text: str, error: type[Exception], version: int = 1) -> dict:
    """The object in ``text``; ``error`` (the tool's own exception) with Kafka's message when it is not JSON,
    not an object, or its ``version`` (default ``version``) is another."""
    try:
        js = json.loads(text)
    except ValueError:
        raise error("The input string is not a valid JSON") from None
    if not isinstance(js, dict):
        raise error("The input string is not a valid JSON object")
    found = js.get("version", version)
    if found != version or isinstance(found, bool):
        raise error(f"Not supported version field value {json.dumps(found)}")
    return js
