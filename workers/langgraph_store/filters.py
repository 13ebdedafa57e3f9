"""``search``'s ``filter`` on an item's value, as LangGraph's ``SearchOp`` documents it.

Each entry of the filter must hold for the item: a plain value is an exact match (an
object matches when each of its entries matches the value's, recursively; an array
when it has the same length and each element matches), an object of operators compares
the value's field: ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``. An ordering
operator compares two numbers (booleans are not numbers) or two strings; a field that
is missing or of another type does not match. An unknown operator is refused, and so
is a condition that is not JSON (an ``object()``, a NaN: ``workers.langgraph_store.values``),
which no value could match.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

from workers.langgraph_store import values
from workers.langgraph_store.errors import InvalidValueError

_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}
OPERATORS = ("$eq", "$ne", *_ORDER)


def check(spec: Mapping[str, Any] | None) -> None:
    """Refuse a filter with an unknown operator, or a condition that is not JSON,
    before anything is read.

    Raises:
        InvalidValueError: field ``filter.<path>``.
    """
    if spec is not None and not isinstance(spec, Mapping):
        raise InvalidValueError("filter", f"must be a mapping of field to condition, not {type(spec).__name__}")
    for key, wanted in (spec or {}).items():
        if not isinstance(key, str):
            raise InvalidValueError("filter", f"its keys must be field names (strings), not {key!r}")
        _check(wanted, f"filter.{key}")


def matches(value: Mapping[str, Any], spec: Mapping[str, Any] | None) -> bool:
    """Whether ``value`` meets every entry of ``spec`` (``None``: no filter)."""
    return all(_meets(value.get(key), wanted) for key, wanted in (spec or {}).items())


def _meets(found: Any, wanted: Any) -> bool:
    if isinstance(wanted, Mapping):
        if _is_operators(wanted):
            return all(_compare(found, op, operand) for op, operand in wanted.items())
        return isinstance(found, Mapping) and all(_meets(found.get(k), w) for k, w in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(found, list | tuple)
            and len(found) == len(wanted)
            and all(_meets(f, w) for f, w in zip(found, wanted, strict=True))
        )
    return bool(found == wanted) and _same_kind(found, wanted)


def _compare(found: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return _meets(found, operand)
    if op == "$ne":
        return not _meets(found, operand)
    if (_number(found) and _number(operand)) or (isinstance(found, str) and isinstance(operand, str)):
        return _ORDER[op](found, operand)
    return False


def _check(wanted: Any, where: str) -> None:
    if isinstance(wanted, Mapping) and _is_operators(wanted):
        for op, operand in wanted.items():
            if op not in OPERATORS:
                raise InvalidValueError(where, f"unknown operator {op!r}; one of {', '.join(OPERATORS)}")
            if op in _ORDER and not (_number(operand) or isinstance(operand, str)):
                raise InvalidValueError(f"{where}.{op}", f"compares a number or a string, not {operand!r}")
            _check(operand, f"{where}.{op}")
    elif isinstance(wanted, Mapping):
        for k, w in wanted.items():
            if not isinstance(k, str):
                raise InvalidValueError(where, f"has a key {k!r} that is not a string (JSON keys are strings)")
            _check(w, f"{where}.{k}")
    elif isinstance(wanted, list | tuple):
        for i, w in enumerate(wanted):
            _check(w, f"{where}[{i}]")
    else:
        values.check_json(wanted, where)


def _is_operators(wanted: Mapping[str, Any]) -> bool:
    return any(isinstance(k, str) and k.startswith("$") for k in wanted)


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _same_kind(a: Any, b: Any) -> bool:
    """``True == 1`` in Python, not in JSON: a boolean matches only a boolean."""
    return isinstance(a, bool) == isinstance(b, bool)
