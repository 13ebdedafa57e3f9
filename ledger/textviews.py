"""The forms of a text that screening reads (``ledger.detectors``), so that a secret or
personal data cannot hide behind an encoding:

- the text as given;
- its normalised form: each character replaced by its Unicode compatibility form (NFKC,
  Unicode Standard Annex #15: the fullwidth ``U+FF47`` reads ``g``) and format characters
  removed (general category ``Cf``: the zero-width space U+200B, the soft hyphen, the
  byte order mark, ...), which are invisible but split a token for a pattern. The
  mapping is made character by character, so that each character of the form knows the
  one it came from.

A form other than the text itself knows, for each of its characters, where in the text
it came from (``View.origin``, worked out only when asked), so a secret found in it can
be replaced in the text. Pure functions of the standard library; no I/O.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class View:
    """A form of a text: ``text``, and where each of its characters came from in the
    text (``sources``, worked out at the first ``origin``; the text itself has none)."""

    text: str
    make_sources: Callable[[], list[int]] | None = field(default=None, repr=False)
    _sources: list[int] | None = field(default=None, init=False, repr=False)

    @property
    def sources(self) -> list[int] | None:
        """For each character, the offset in the text it came from, and one more at the
        end; ``None`` for the text itself."""
        if self._sources is None and self.make_sources is not None:
            self._sources = self.make_sources()
        return self._sources

    def origin(self, start: int, end: int) -> tuple[int, int]:
        """The span of the text the characters ``start:end`` of this form came from."""
        sources = self.sources
        if sources is None:
            return start, end
        if end <= start:
            return sources[start], sources[start]
        covered = sources[start:end]
        return min(covered), max(covered) + 1


def views(text: str) -> list[View]:
    """The forms of ``text`` screening reads: the text itself, then its normalised form
    when normalising changes it (never for ASCII). Usually just ``[View(text)]``."""
    found = [View(text)]
    normal = normalised(found[-1])
    if normal is not None:
        found.append(normal)
    return found


def normalised(base: View) -> View | None:
    """The normalised form of ``base`` (its characters traced back through ``base`` to
    the text), or ``None`` when normalising changes nothing."""
    changes = _changes(base.text)
    if not changes:
        return None

    def sources() -> list[int]:
        below = base.sources
        out: list[int] = []
        for i, ch in enumerate(base.text):
            at = i if below is None else below[i]
            form = changes.get(ord(ch))
            out += [at] if form is None else [at] * len(form)
        out.append(len(base.text) if below is None else below[-1])
        return out

    return View(base.text.translate(changes), sources)


def _changes(text: str) -> dict[int, str]:
    """What normalisation does to the characters of ``text``, by code point: a format
    character (category ``Cf``) becomes nothing, another its NFKC form where that
    differs. ASCII is its own normal form."""
    out: dict[int, str] = {}
    if text.isascii():
        return out
    for ch in set(text):
        if ch.isascii():
            continue
        form = "" if unicodedata.category(ch) == "Cf" else unicodedata.normalize("NFKC", ch)
        if form != ch:
            out[ord(ch)] = form
    return out
