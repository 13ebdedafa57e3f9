"""Counts in the text the commands print: ``1 memory``, ``2 memories``."""

from __future__ import annotations


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """``n`` and the noun agreeing with it: ``counted(1, "memory", "memories")`` is
    ``1 memory``; ``plural`` defaults to ``singular`` + ``s``."""
    return f"{n} {singular if n == 1 else plural or singular + 's'}"
