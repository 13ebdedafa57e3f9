"""Words in the text the commands print: counts (``1 memory``, ``2 memories``), and stored
text shown on one line."""

from __future__ import annotations

from ledger.textviews import is_undrawn


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """``n`` and the noun agreeing with it: ``counted(1, "memory", "memories")`` is
    ``1 memory``; ``plural`` defaults to ``singular`` + ``s``."""
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


_ESCAPED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(text: str) -> str:
    """``text`` on one terminal line: line breaks, other control characters and
    invisible characters (Unicode categories Cc, Cf, Zl, Zp: bidi overrides, zero-width
    spaces; and every other Default_Ignorable_Code_Point, ``ledger.textviews.is_undrawn``:
    U+034F, the Hangul fillers; but the variation selectors, which choose how the
    character before them is drawn, as an emoji's U+FE0F) are shown escaped (``\\n``, ``\\u202e``), so a memory's text
    cannot draw lines that look like other items or their provenance."""
    out = []
    for ch in text:
        if ch in _ESCAPED:
            out.append(_ESCAPED[ch])
        elif is_undrawn(ch) and not _selector(ch):
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def _selector(ch: str) -> bool:
    """Whether ``ch`` is a variation selector (U+FE00..U+FE0F, U+E0100..U+E01EF)."""
    return 0xFE00 <= ord(ch) <= 0xFE0F or 0xE0100 <= ord(ch) <= 0xE01EF
