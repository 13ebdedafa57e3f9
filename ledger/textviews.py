"""The forms of a text that screening reads (``ledger.detectors``), so that a secret or
personal data cannot hide behind an encoding:

- the text as given;
- its unescaped form: every double-quoted string holding a backslash escape (JSON's, as
  in a LangGraph value, where ``db_password=\\"hunter2xyz\\"`` hides the quotes a
  keyword detector looks for and ``iban:\\nDE89...`` glues an ``n`` to an IBAN) with its
  escapes decoded as JSON decodes them (RFC 8259, section 7), and a string that decodes
  to text holding such strings again (JSON inside a JSON string) decoded in turn. It
  applies to object keys and values alike, and to such strings inside any text;
- its normalised form (of the unescaped form, when there is one): each character
  replaced by its Unicode compatibility form (NFKC, Unicode Standard Annex #15: the
  fullwidth ``U+FF47`` reads ``g``), every decimal digit of another script read as its
  ASCII digit (the Arabic-Indic ``U+0664`` reads ``4``: NFKC keeps it), the invisible
  characters and the combining marks (``_REMOVED_CATEGORIES``) removed and the blank ones
  read as a space (``_changes``). The mapping is made character by character, so that
  each character of the form knows the one it came from.

The invisible characters are those a renderer draws as nothing but that split a token for
a pattern: every Default_Ignorable_Code_Point (the property of DerivedCoreProperties.txt
of the Unicode Character Database, Unicode 14.0.0, the version of ``unicodedata`` in
Python 3.11, which has no such property: ``_IGNORABLE``), which holds the zero-width
space U+200B and joiners, the soft hyphen, the bidirectional controls, the byte order
mark, the variation selectors U+FE00..U+FE0F and U+E0100..U+E01EF, the combining
grapheme joiner U+034F, the Hangul fillers U+115F, U+1160, U+3164 and U+FFA0, the
Mongolian free variation selectors and vowel separator, the tags U+E0000..U+E007F and
the code points reserved as ignorable; and every other format character (general
category ``Cf``: the Arabic number signs, the interlinear annotation marks, ...). The
blank characters are the space separators (general category ``Zs``), which NFKC reads
as U+0020 but for the Ogham space mark U+1680, and the characters drawn as an empty
cell that Unicode does not count as space (``_BLANKS``: the braille pattern blank
U+2800, the musical null notehead U+1D159). The other White_Space characters (line and
paragraph separators, NEL) are already whitespace to a pattern's ``\\s``.

A form other than the text itself knows, for each of its characters, where in the text
it came from (``View.origin``, worked out only when asked), so a secret found in it can
be replaced in the text. Pure functions of the standard library; no I/O.
"""

from __future__ import annotations

import bisect
import json
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field

_QUOTED = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
"""A double-quoted string, backslash escapes included (what it holds is checked by
decoding it as a JSON string)."""


_IGNORABLE = (
    (0x00AD, 0x00AD),  # SOFT HYPHEN
    (0x034F, 0x034F),  # COMBINING GRAPHEME JOINER
    (0x061C, 0x061C),  # ARABIC LETTER MARK
    (0x115F, 0x1160),  # HANGUL CHOSEONG FILLER..HANGUL JUNGSEONG FILLER
    (0x17B4, 0x17B5),  # KHMER VOWEL INHERENT AQ..KHMER VOWEL INHERENT AA
    (0x180B, 0x180F),  # MONGOLIAN FREE VARIATION SELECTORS ONE..THREE, VOWEL SEPARATOR, FVS FOUR
    (0x200B, 0x200F),  # ZERO WIDTH SPACE..RIGHT-TO-LEFT MARK
    (0x202A, 0x202E),  # LEFT-TO-RIGHT EMBEDDING..RIGHT-TO-LEFT OVERRIDE
    (0x2060, 0x206F),  # WORD JOINER..NOMINAL DIGIT SHAPES (U+2065 reserved)
    (0x3164, 0x3164),  # HANGUL FILLER
    (0xFE00, 0xFE0F),  # VARIATION SELECTOR-1..VARIATION SELECTOR-16
    (0xFEFF, 0xFEFF),  # ZERO WIDTH NO-BREAK SPACE (byte order mark)
    (0xFFA0, 0xFFA0),  # HALFWIDTH HANGUL FILLER
    (0xFFF0, 0xFFF8),  # reserved
    (0x1BCA0, 0x1BCA3),  # SHORTHAND FORMAT LETTER OVERLAP..SHORTHAND FORMAT UP STEP
    (0x1D173, 0x1D17A),  # MUSICAL SYMBOL BEGIN BEAM..MUSICAL SYMBOL END PHRASE
    (0xE0000, 0xE0FFF),  # LANGUAGE TAG, TAG SPACE..CANCEL TAG, VARIATION SELECTOR-17..-256, reserved
)
"""The ranges (first and last code point) of Default_Ignorable_Code_Point, from
DerivedCoreProperties.txt of Unicode 14.0.0 (``grep '; Default_Ignorable_Code_Point'``),
adjacent ranges merged."""
_IGNORABLE_STARTS = tuple(first for first, _ in _IGNORABLE)

_REMOVED_CATEGORIES = frozenset({"Cf", "Mn", "Me", "Mc"})
"""General categories removed from the normalised form: format characters, and the
combining marks, nonspacing, enclosing and spacing (U+0301 COMBINING ACUTE ACCENT, U+0332
COMBINING LOW LINE, U+20DD COMBINING ENCLOSING CIRCLE, U+0903 DEVANAGARI SIGN VISARGA),
which a renderer draws with the character before them, so that ``AKIA...X\u0301W`` reads
as one token again. A mark that NFC would compose with its base (``e`` and U+0301) goes
too: the form is read, never stored."""

_BLANKS = {0x1680: " ", 0x2800: " ", 0x1D159: " "}
"""Blank characters that NFKC leaves as they are, read as a space: OGHAM SPACE MARK (a
space separator), BRAILLE PATTERN BLANK and MUSICAL SYMBOL NULL NOTEHEAD (symbols drawn
as an empty cell)."""


def is_ignorable(ch: str) -> bool:
    """Whether the character ``ch`` is a Default_Ignorable_Code_Point (``_IGNORABLE``)."""
    at = bisect.bisect_right(_IGNORABLE_STARTS, ord(ch)) - 1
    return at >= 0 and ord(ch) <= _IGNORABLE[at][1]


_UNDRAWN_CATEGORIES = frozenset({"Cf", "Cc", "Zl", "Zp"})


def is_undrawn(ch: str) -> bool:
    """Whether a terminal draws ``ch`` as nothing or as a line break: a format character
    (``Cf``), a control (``Cc``), a line or paragraph separator (``Zl``, ``Zp``), or
    another Default_Ignorable_Code_Point (``is_ignorable``). The rule of a new identifier
    (``ledger.screening.invisible_refusal``) and of text shown on one line
    (``projections.wording.one_line``)."""
    return unicodedata.category(ch) in _UNDRAWN_CATEGORIES or is_ignorable(ch)


@dataclass(frozen=True)
class QuotedString:
    """A double-quoted string of a text: ``start`` and ``end`` (offsets of its quotes,
    ``end`` exclusive) and its decoded ``value``."""

    start: int
    end: int
    value: str


def quoted_strings(text: str, escaped_only: bool = True) -> list[QuotedString]:
    """The double-quoted strings of ``text`` that decode as JSON strings (control
    characters allowed raw), left to right; with ``escaped_only``, only those holding a
    backslash escape (cheap for a text without a backslash: ``[]``). Found left to
    right, so in a JSON text they are its strings, keys and values."""
    if escaped_only and "\\" not in text:
        return []
    found: list[QuotedString] = []
    for m in _QUOTED.finditer(text):
        token = m.group(0)
        if escaped_only and "\\" not in token:
            continue
        try:
            value = json.loads(token, strict=False)
        except ValueError:
            continue
        found.append(QuotedString(m.start(), m.end(), value))
    return found


def encode_string(value: str) -> str:
    """``value`` as a JSON string, UTF-8 kept but DEL and lone surrogates escaped (the
    ledger's text rule refuses them raw)."""
    encoded = json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    try:
        encoded.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value)
    return encoded


def is_json(text: str) -> bool:
    """Whether ``text`` is a JSON object or array (RFC 8259; control characters allowed
    raw in strings; one nested too deeply for Python's parser counts)."""
    if text.lstrip()[:1] not in ("{", "["):
        return False
    try:
        json.loads(text, strict=False)
    except RecursionError:
        return True
    except ValueError:
        return False
    return True


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
    """The forms of ``text`` screening reads: the text itself, its unescaped form when it
    holds an escaped string, and the normalised form of the last of those when
    normalising changes it (never for ASCII). Usually just ``[View(text)]``."""
    found = [View(text)]
    if quoted_strings(text):
        found.append(unescaped(text))
    normal = normalised(found[-1])
    if normal is not None:
        found.append(normal)
    return found


def unescaped(text: str) -> View:
    """The unescaped form of ``text``: each escaped string's value decoded, and decoded
    in turn while it holds escaped strings (each character of a decoded string traced
    back to the inside of its quotes)."""
    strings = quoted_strings(text)
    values = [_decoded(s.value) for s in strings]

    def sources() -> list[int]:
        out: list[int] = []
        last = 0
        for s, value in zip(strings, values, strict=True):
            out += range(last, s.start)
            out += [s.start, *[s.start + 1] * len(value), s.end - 1]
            last = s.end
        out += range(last, len(text) + 1)
        return out

    parts: list[str] = []
    last = 0
    for s, value in zip(strings, values, strict=True):
        parts += [text[last : s.start], '"', value, '"']
        last = s.end
    parts.append(text[last:])
    return View("".join(parts), sources)


def _decoded(value: str) -> str:
    """A decoded string's value, its own escaped strings decoded in turn."""
    return unescaped(value).text if quoted_strings(value) else value


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
    """What normalisation does to the characters of ``text``, by code point: an
    invisible character (a Default_Ignorable_Code_Point, or a format character: category
    ``Cf``) and a combining mark (``_REMOVED_CATEGORIES``) become
    nothing, a decimal digit of any script its ASCII digit, a blank one
    (``_BLANKS``) a space, another its NFKC form
    where that differs (no NFKC form holds an invisible character but those of U+3164
    and U+FFA0, themselves invisible). ASCII is its own normal form."""
    out: dict[int, str] = {}
    if text.isascii():
        return out
    for ch in set(text):
        if ch.isascii():
            continue
        if is_ignorable(ch) or unicodedata.category(ch) in _REMOVED_CATEGORIES:
            form = ""
        elif unicodedata.decimal(ch, None) is not None:  # a decimal digit of any script: ٤ reads 4
            form = str(unicodedata.decimal(ch))
        else:
            form = _BLANKS.get(ord(ch)) or unicodedata.normalize("NFKC", ch)
        if form != ch:
            out[ord(ch)] = form
    return out
