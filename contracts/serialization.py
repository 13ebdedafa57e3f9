"""JSON bytes in and out of the log, with upcasting of older schema versions."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from contracts.errors import UnknownEventError, UpcastError
from contracts.events import EVENT_ADAPTER, Event
from contracts.upcasting import upcast


def encode_event(event: Event) -> bytes:
    """Serialise an event to compact UTF-8 JSON bytes (the log's value format)."""
    return EVENT_ADAPTER.dump_json(event)


def decode_event(data: bytes) -> Event:
    """Parse log bytes into an event, upcasting an older ``schema_version`` first.

    Raises:
        UnknownEventError: the bytes are not JSON, not an object, of an unknown
            ``type``, or fail validation; ``reason`` names the field and rule.
    """
    try:
        raw: Any = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UnknownEventError(f"not valid UTF-8 JSON: {exc}") from None
    except (RecursionError, ValueError, MemoryError) as exc:  # nesting too deep, huge integers
        raise UnknownEventError(f"JSON the reader refuses: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(raw, dict):
        raise UnknownEventError("an event must be a JSON object")
    try:
        raw = upcast(raw)
    except UpcastError as exc:
        raise UnknownEventError(str(exc)) from None
    except Exception as exc:  # an upcaster choking on malformed input is malformed input
        raise UnknownEventError(f"upcasting failed: {type(exc).__name__}: {str(exc)[:200]}") from None
    try:
        return EVENT_ADAPTER.validate_python(raw)
    except ValidationError as exc:
        raise UnknownEventError(describe_validation_error(exc)) from None
    except (RecursionError, ValueError, TypeError) as exc:
        raise UnknownEventError(f"event the reader refuses: {type(exc).__name__}: {str(exc)[:200]}") from None


def describe_validation_error(exc: ValidationError) -> str:
    """One line per problem, ``field.path: message``, without pydantic's URLs."""
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)
