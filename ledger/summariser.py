"""The summariser port, and the default extractive summariser (no model needed).

When a source of a summary is invalidated (superseded, redacted, revoked, expired,
erased) the ledger derives a new summary from the sources that remain, through this
port, and appends it as a new ``SummaryDerived`` event.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


class Summariser(Protocol):
    """Turns source texts (oldest first) into one summary text (non-empty)."""

    def summarise(self, texts: Sequence[str]) -> str: ...


class ExtractiveSummariser:
    """Lead-sentence extraction: the first sentence of each source, in source order,
    joined with spaces and cut at ``max_chars`` characters on a word boundary.

    The lead of a text is its classic extractive baseline (the "lead" baseline of news
    summarisation, e.g. Nenkova, "Automatic text summarization of newswire", AAAI 2005).
    """

    def __init__(self, max_chars: int = 1_000) -> None:
        if max_chars < 16:
            raise ValueError("max_chars: must be at least 16")
        self.max_chars = max_chars

    def summarise(self, texts: Sequence[str]) -> str:
        """Raises ``ValueError`` when every text is blank."""
        leads = [_SENTENCE_END.split(t.strip(), maxsplit=1)[0] for t in texts if t.strip()]
        if not leads:
            raise ValueError("texts: nothing to summarise")
        summary = " ".join(leads)
        if len(summary) <= self.max_chars:
            return summary
        cut = summary[: self.max_chars - 1].rsplit(" ", 1)[0]
        return cut + "…"
