"""Upcasters: functions that lift a raw event dict from one schema version to the next.

Schema versions are per event type: ``MemoryWritten`` can reach version 3 while
``MemoryConfirmed`` stays at 1. The current version of a type is the default of its
model's ``schema_version`` field (``contracts.events.SCHEMA_VERSIONS``). An upcaster
registered for ``(type, v)`` takes a dict at version ``v`` and returns it at ``v + 1``;
``upcast`` chains them, version by version, until the type's current version.

Version 2 of ``MemoryWritten``, ``SummaryDerived`` and ``MemoryRedacted`` records what
screening decided (``memory.screening``, ``screening``): a version-1 event was written
before screening existed, and reads with ``None`` there. Version 2 of
``MemoryReinstated`` adds the reason ``rival_erased`` and the ``rival`` it names: a
version-1 event is a ``replacement_erased`` one with no rival. To evolve a type:

1. change its model and raise its ``schema_version`` default to ``v + 1``;
2. add ``UPCASTERS[(type, v)] = step`` here, ``step`` turning a version-``v`` dict into a
   version-``v + 1`` one (it may mutate and return its argument; ``upcast`` sets
   ``schema_version`` itself).

``UpcasterRegistry`` is the same thing as an object, so that tests and migration tools
can read the log with an evolved contract (``contracts.serialization.evolved``) without
touching the module-level tables.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contracts.errors import UpcastError
from contracts.events import SCHEMA_VERSIONS

RawEvent = dict[str, Any]
Upcaster = Callable[[RawEvent], RawEvent]
"""Turns a raw event dict at version v into one at version v + 1."""


def _unscreened_body(raw: RawEvent) -> RawEvent:
    """v1 -> v2 of ``MemoryWritten`` and ``SummaryDerived``: the body was not screened."""
    body = raw.get("memory")
    if isinstance(body, dict):
        body.setdefault("screening", None)
    return raw


def _unscreened_redaction(raw: RawEvent) -> RawEvent:
    """v1 -> v2 of ``MemoryRedacted``: the new text was not screened."""
    raw.setdefault("screening", None)
    return raw


def _no_rival(raw: RawEvent) -> RawEvent:
    """v1 -> v2 of ``MemoryReinstated``: version 1 knew only the reason
    ``replacement_erased`` (its default), which names no ``rival``."""
    raw.setdefault("reason", "replacement_erased")
    raw.setdefault("rival", None)
    return raw


UPCASTERS: dict[tuple[str, int], Upcaster] = {
    ("MemoryWritten", 1): _unscreened_body,
    ("SummaryDerived", 1): _unscreened_body,
    ("MemoryRedacted", 1): _unscreened_redaction,
    ("MemoryReinstated", 1): _no_rival,
}
"""The upcasters of this code: ``(event type, from version) -> step``."""


@dataclass(frozen=True)
class UpcasterRegistry:
    """Per-type current versions and the steps between versions.

    Attributes:
        versions: event type -> the version this reader validates (its current one).
        steps: ``(event type, v)`` -> the upcaster from ``v`` to ``v + 1``.
    """

    versions: Mapping[str, int]
    steps: Mapping[tuple[str, int], Upcaster] = field(default_factory=dict)

    def current(self, event_type: str) -> int | None:
        """The current version of ``event_type``, or ``None`` for a type this reader does not know."""
        return self.versions.get(event_type)

    def missing_steps(self) -> list[tuple[str, int]]:
        """The ``(type, v)`` steps a chain from version 1 to the current one lacks (empty when complete)."""
        return [(t, v) for t, cur in sorted(self.versions.items()) for v in range(1, cur) if (t, v) not in self.steps]

    def upcast(self, raw: RawEvent) -> RawEvent:
        """Return ``raw`` lifted to its type's current version (``raw`` may be mutated).

        A dict without ``schema_version`` is at version 1. A type this reader does not
        know is returned unchanged, so that validation reports the unknown ``type``.

        Raises:
            UpcastError: ``schema_version`` is not a positive integer, is newer than this
                reader's version of the type, or a step of the chain is missing; the
                message names the type and the versions.
        """
        version = raw.get("schema_version", 1)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise UpcastError(f"schema_version: must be a positive integer, got {version!r}")
        event_type = raw.get("type")
        if not isinstance(event_type, str):
            return raw
        current = self.current(event_type)
        if current is None:
            return raw
        if version > current:
            raise UpcastError(
                f"schema_version: {event_type} v{version} is newer than this reader's v{current}"
                " (deploy a reader that knows it)"
            )
        raw["schema_version"] = version
        while version < current:
            step = self.steps.get((event_type, version))
            if step is None:
                raise UpcastError(
                    f"schema_version: no upcaster for {event_type} v{version} -> v{version + 1}"
                    f" (this reader is at v{current})"
                )
            raw = step(raw)
            if not isinstance(raw, dict):
                raise UpcastError(f"schema_version: the upcaster for {event_type} v{version} returned no object")
            version += 1
            raw["schema_version"] = version
        return raw


DEFAULT_REGISTRY = UpcasterRegistry(SCHEMA_VERSIONS, UPCASTERS)
"""This code's registry: the models' versions and ``UPCASTERS`` (shared, not copied)."""


def upcast(raw: RawEvent) -> RawEvent:
    """``DEFAULT_REGISTRY.upcast(raw)``: ``raw`` lifted to its type's current version.

    Raises:
        UpcastError: the version is not a positive integer, is newer than this code
            knows, or a step is missing.
    """
    return DEFAULT_REGISTRY.upcast(raw)
