"""A context budget: the best items whose text fits in ``max_tokens``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["within_budget"]

T = TypeVar("T")


def within_budget(
    items: Sequence[T],
    cost: Callable[[T], int],
    k: int,
    max_tokens: int | None,
    shrink: Callable[[T, int], T | None] | None = None,
) -> list[T]:
    """At most ``k`` of ``items`` (best first), in order: with ``max_tokens``, greedily
    each item whose ``cost`` (tokens) still fits in what is left, passing over one that
    does not (a shorter one further down may fit); without it, the first ``k``.
    ``shrink(item, left)``: a smaller form of an item that does not fit whole, which fits
    in ``left`` tokens (``None``: none), taken in its place (a summary with fewer of the
    sources grouped under it), so that a better item is not passed over for a worse one
    only because of what it carries."""
    if max_tokens is None:
        return list(items[:k])
    out: list[T] = []
    left = max_tokens
    for item in items:
        if len(out) == k:
            break
        tokens = cost(item)
        if tokens > left and shrink is not None:
            smaller = shrink(item, left)
            if smaller is not None:
                item, tokens = smaller, cost(smaller)
        if tokens <= left:
            out.append(item)
            left -= tokens
    return out
