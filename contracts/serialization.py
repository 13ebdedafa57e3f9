"""JSON bytes in and out of the log, with upcasting of older schema versions.

``encode_event`` and ``decode_event`` use the active ``EventCodec``: this code's event
models and upcasters (``DEFAULT_CODEC``). ``evolved`` swaps in a codec with newer models
of some types and their upcasters for the duration of a ``with`` block; it is the
extension point tests use to read a log written under an older contract with a newer
one, and it restores the previous codec on exit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Union, cast

from pydantic import Field, TypeAdapter, ValidationError

from contracts.errors import UnknownEventError, UpcastError
from contracts.events import EVENT_ADAPTER, EVENT_TYPES, Envelope, Event, model_versions
from contracts.upcasting import DEFAULT_REGISTRY, UPCASTERS, Upcaster, UpcasterRegistry


@dataclass(frozen=True)
class EventCodec:
    """Event models (one discriminated union) and the upcasters that lead to them.

    Attributes:
        adapter: validates and dumps the union of the event models.
        registry: per-type current versions and upcasters.
        models: the event model classes of the union.
    """

    adapter: TypeAdapter[Any]
    registry: UpcasterRegistry
    models: tuple[type[Envelope], ...]

    def encode(self, event: Event) -> bytes:
        """Compact UTF-8 JSON bytes of ``event`` (fields under their wire names)."""
        return self.adapter.dump_json(event, by_alias=True)

    def decode(self, data: bytes) -> Event:
        """Parse log bytes into an event, upcasting an older ``schema_version`` first.

        Raises:
            UnknownEventError: the bytes are not JSON, not an object, of an unknown
                ``type``, of a version this reader cannot reach (newer than its own, or
                a missing upcaster), or fail validation; ``reason`` names the field and
                rule, ``event_type`` the ``type`` the record claims, if any.
        """
        # the common case first, in pydantic's own JSON parser (a quarter cheaper than
        # json.loads then validation): an event already at its type's current version,
        # which upcasting leaves as it is; anything else takes the path below
        try:
            event = cast(Event, self.adapter.validate_json(data))
        except (ValidationError, ValueError, TypeError, RecursionError):
            pass
        else:
            if event.schema_version == self.registry.current(event.type):
                return event
        try:
            raw: Any = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UnknownEventError(f"not valid UTF-8 JSON: {exc}") from None
        except (RecursionError, ValueError, MemoryError) as exc:  # nesting too deep, huge integers
            raise UnknownEventError(f"JSON the reader refuses: {type(exc).__name__}: {str(exc)[:200]}") from None
        if not isinstance(raw, dict):
            raise UnknownEventError("an event must be a JSON object")
        claimed = raw.get("type")
        event_type = claimed if isinstance(claimed, str) else None
        try:
            raw = self.registry.upcast(raw)
        except UpcastError as exc:
            raise UnknownEventError(str(exc), event_type) from None
        except Exception as exc:  # an upcaster choking on malformed input is malformed input
            raise UnknownEventError(f"upcasting failed: {type(exc).__name__}: {str(exc)[:200]}", event_type) from None
        try:
            return cast(Event, self.adapter.validate_python(raw))
        except ValidationError as exc:
            raise UnknownEventError(describe_validation_error(exc), event_type) from None
        except (RecursionError, ValueError, TypeError) as exc:
            raise UnknownEventError(
                f"event the reader refuses: {type(exc).__name__}: {str(exc)[:200]}", event_type
            ) from None


DEFAULT_CODEC = EventCodec(EVENT_ADAPTER, DEFAULT_REGISTRY, EVENT_TYPES)
"""This code's contract: ``EVENT_TYPES``, ``SCHEMA_VERSIONS`` and ``UPCASTERS``."""

_active: EventCodec = DEFAULT_CODEC


def active_codec() -> EventCodec:
    """The codec ``encode_event`` and ``decode_event`` use now."""
    return _active


def encode_event(event: Event) -> bytes:
    """Serialise an event to compact UTF-8 JSON bytes (the log's value format)."""
    return _active.encode(event)


def decode_event(data: bytes) -> Event:
    """Parse log bytes into an event, upcasting an older ``schema_version`` first.

    Raises:
        UnknownEventError: the bytes are not JSON, not an object, of an unknown
            ``type``, of a version this reader cannot upcast, or fail validation;
            ``reason`` names the field and rule.
    """
    return _active.decode(data)


def build_codec(
    models: Sequence[type[Envelope]], upcasters: Mapping[tuple[str, int], Upcaster] | None = None
) -> EventCodec:
    """A codec whose union is ``EVENT_TYPES`` with ``models`` in place of the models of
    the same ``type`` (types not in ``EVENT_TYPES`` are added), and whose upcasters are
    ``UPCASTERS`` plus ``upcasters``. Each type's current version is its model's
    ``schema_version`` default. Missing steps are allowed here (reading such a type
    fails with a clear reason); ``registry.missing_steps()`` lists them.

    Raises:
        TypeError: a model replaces one it does not subclass (code written against the
            old model, e.g. a projection's ``isinstance`` checks, must keep working).
    """
    by_type = {str(m.model_fields["type"].default): m for m in EVENT_TYPES}
    for model in models:
        name = str(model.model_fields["type"].default)
        old = by_type.get(name)
        if old is not None and not issubclass(model, old):
            raise TypeError(f"models: {model.__name__} replaces {old.__name__} and must subclass it")
        by_type[name] = model
    union = tuple(by_type.values())
    adapter: TypeAdapter[Any] = TypeAdapter(cast(Any, Annotated[Union[union], Field(discriminator="type")]))  # noqa: UP007
    registry = UpcasterRegistry(model_versions(union), {**UPCASTERS, **(upcasters or {})})
    return EventCodec(adapter, registry, union)


@contextmanager
def evolved(
    models: Sequence[type[Envelope]], upcasters: Mapping[tuple[str, int], Upcaster] | None = None
) -> Iterator[EventCodec]:
    """Within the block, ``encode_event``/``decode_event`` use ``build_codec(models,
    upcasters)``; the previous codec is restored on exit, also on error.

    Process-wide and not thread-safe: meant for tests and one-off migration tools, not
    for a running service (which gets its models and upcasters from the code itself).
    Events encoded inside the block should be instances of the evolved models.
    """
    global _active
    previous = _active
    _active = build_codec(models, upcasters)
    try:
        yield _active
    finally:
        _active = previous


def validation_problems(exc: ValidationError) -> list[tuple[str, str]]:
    """``(field.path, message)`` of each problem pydantic found, without its URLs and its
    ``Value error, `` prefix; the path is empty for a rule of the whole model."""
    return [
        (".".join(str(p) for p in err["loc"]), str(err["msg"]).removeprefix("Value error, "))
        for err in exc.errors(include_url=False)
    ]


def describe_validation_error(exc: ValidationError) -> str:
    """One line per problem, ``field.path: message``, without pydantic's URLs."""
    return "; ".join(f"{loc}: {msg}" if loc else msg for loc, msg in validation_problems(exc))
