"""Upcasters: functions that lift a raw event dict from one schema version to the next.

An upcaster for (type, v) takes a dict at version v and returns it at version v + 1.
``upcast`` chains them until the current ``SCHEMA_VERSION``. There are none yet: every
event type is at version 1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contracts.errors import UpcastError
from contracts.events import SCHEMA_VERSION

RawEvent = dict[str, Any]
UPCASTERS: dict[tuple[str, int], Callable[[RawEvent], RawEvent]] = {}


def upcast(raw: RawEvent) -> RawEvent:
    """Return ``raw`` lifted to the current schema version.

    Raises:
        UpcastError: the version is newer than this code knows, or a step is missing.
    """
    version = raw.get("schema_version", 1)
    if not isinstance(version, int) or version < 1:
        raise UpcastError(f"schema_version: must be a positive integer, got {version!r}")
    if version > SCHEMA_VERSION:
        raise UpcastError(f"schema_version: {version} is newer than this reader's {SCHEMA_VERSION}")
    event_type = str(raw.get("type"))
    while version < SCHEMA_VERSION:
        step = UPCASTERS.get((event_type, version))
        if step is None:
            raise UpcastError(f"schema_version: no upcaster for {event_type} v{version}")
        raw = step(raw)
        version += 1
        raw["schema_version"] = version
    return raw
