"""An item's value as a memory's content: one JSON object, written compactly (UTF-8,
no ASCII escaping, keys in the order given), read back exactly.

A value is a mapping with string keys whose values are strings, finite numbers (an
integer of at most ``sys.get_int_max_str_digits()`` digits, 4300 by default: Python
neither writes nor reads a longer one as JSON), booleans, ``None``, lists (or tuples,
read back as lists) and such mappings again; anything else is refused naming its place
in the value (``value.prefs[2]``). Its
JSON text has a limit of its own, ``MAX_VALUE_BYTES`` by default (at most
``CONTENT_MAX_CHARS``, the ledger's limit on a memory's text): a memory is a fact to
recall, and recall ranks and embeds short texts best.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from typing import Any

from contracts.types import UNENCODABLE
from workers.langgraph_store.errors import InvalidValueError

MAX_VALUE_BYTES = 32_768
"""The default limit on a value's JSON text, bytes of UTF-8."""

CONTENT_MAX_CHARS = 65_536
"""The ledger's limit on a memory's text, characters (``contracts.types.Content``)."""

MAX_DEPTH = 32
"""How deeply objects and arrays may nest in a value."""


def content_of(value: Mapping[str, Any], max_bytes: int = MAX_VALUE_BYTES) -> str:
    """The memory text of ``value``: its compact JSON (DEL written as ``\\u007f``, which
    the ledger's text rule refuses raw).

    Raises:
        InvalidValueError: field ``value`` (or the place inside it): not a JSON object,
            not JSON, or over ``max_bytes`` bytes of UTF-8.
    """
    if not isinstance(value, Mapping):
        raise InvalidValueError("value", f"must be a JSON object (a mapping), not {type(value).__name__}")
    check_json(value, "value")
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_as_dict)
    text = text.replace("\x7f", "\\u007f")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidValueError("value", UNENCODABLE) from None
    if size > max_bytes:
        raise InvalidValueError("value", f"is {size} bytes of JSON; the store takes at most {max_bytes}")
    return text


def _as_dict(node: object) -> dict[str, Any]:
    """A mapping that is not a ``dict`` (``BaseStore.put`` takes any ``Mapping``: a
    ``MappingProxyType``, a mapping class of the caller's) as the object it reads as;
    ``check_json`` let nothing else through."""
    if isinstance(node, Mapping):
        return dict(node)
    raise TypeError(f"a value of type {type(node).__name__} is not JSON")  # unreachable after check_json


def value_of(content: str | None) -> dict[str, Any] | None:
    """The value a memory's text holds, or ``None`` when it holds no JSON object (a
    memory written another way)."""
    if content is None:
        return None
    try:
        found = json.loads(content)
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def check_json(node: object, where: str, depth: int = 0) -> None:
    """Refuse ``node`` unless it is JSON as a value holds it (see the module), naming
    the place of what is not: ``where`` is ``node``'s own (``value``, ``filter.a``).

    Raises:
        InvalidValueError: field ``where`` or a place inside it.
    """
    if depth > MAX_DEPTH:
        raise InvalidValueError(where, f"nests deeper than {MAX_DEPTH} levels")
    if isinstance(node, Mapping):
        for k, v in node.items():
            if not isinstance(k, str):
                raise InvalidValueError(where, f"has a key {k!r} that is not a string (JSON keys are strings)")
            check_json(v, f"{where}.{k}", depth + 1)
    elif isinstance(node, list | tuple):
        for i, v in enumerate(node):
            check_json(v, f"{where}[{i}]", depth + 1)
    elif isinstance(node, float) and not math.isfinite(node):
        raise InvalidValueError(where, f"{node!r} is not a JSON number")
    elif isinstance(node, int) and not isinstance(node, bool):
        _check_digits(node, where)
    elif node is not None and not isinstance(node, str | bool | float):
        raise InvalidValueError(where, f"a value of type {type(node).__name__} is not JSON")


def _check_digits(number: int, where: str) -> None:
    limit = sys.get_int_max_str_digits()
    if not limit or number.bit_length() <= 3 * limit:  # a digit takes 3.32 bits: fewer digits than the limit
        return
    try:
        str(number)
    except ValueError:
        raise InvalidValueError(
            where,
            f"an integer of more than {limit} digits: Python writes and reads at most {limit} as JSON"
            " (sys.get_int_max_str_digits)",
        ) from None
