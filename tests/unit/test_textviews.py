"""The forms of a text that screening reads (no I/O): the normalised form maps each of
its characters back to the one of the text it came from."""

from __future__ import annotations

import unicodedata

import pytest

from ledger.textviews import encode_string, is_ignorable, is_json, quoted_strings, views


def test_an_ascii_text_is_its_only_form() -> None:
    forms = views("plain ASCII text, nothing to normalise")
    assert [f.text for f in forms] == ["plain ASCII text, nothing to normalise"]
    assert forms[0].origin(6, 11) == (6, 11)


def test_the_normalised_form_drops_format_characters_and_maps_spans_back() -> None:
    text = "key AKIA\u200bIOSF \uff47hp \ufb01le"
    given, normal = views(text)
    assert given.text == text and normal.text == "key AKIAIOSF ghp file"
    start = normal.text.index("AKIAIOSF")
    assert normal.origin(start, start + 8) == (4, 13)  # the zero-width space inside is covered
    assert text[slice(*normal.origin(normal.text.index("ghp"), normal.text.index("ghp") + 3))] == "\uff47hp"
    ligature = normal.text.index("fi")  # one character of the text, two of the form
    assert normal.origin(ligature, len(normal.text)) == (len(text) - 3, len(text))


INVISIBLE = {  # Default_Ignorable_Code_Point characters that are not format characters (Cf)
    "\u034f": "COMBINING GRAPHEME JOINER",
    "\u115f": "HANGUL CHOSEONG FILLER",
    "\u1160": "HANGUL JUNGSEONG FILLER",
    "\u17b4": "KHMER VOWEL INHERENT AQ",
    "\u180b": "MONGOLIAN FREE VARIATION SELECTOR ONE",
    "\u180f": "MONGOLIAN FREE VARIATION SELECTOR FOUR",
    "\u3164": "HANGUL FILLER",
    "\ufe00": "VARIATION SELECTOR-1",
    "\ufe0f": "VARIATION SELECTOR-16",
    "\uffa0": "HALFWIDTH HANGUL FILLER",
    "\U000e0100": "VARIATION SELECTOR-17",
    "\U000e01ef": "VARIATION SELECTOR-256",
}
FORMAT = ["\u200b", "\u00ad", "\u180e", "\u2060", "\u2064", "\u202e", "\ufeff", "\U000e0041", "\u0600", "\ufff9"]


@pytest.mark.parametrize("ch", [*INVISIBLE, *FORMAT], ids=lambda ch: f"U+{ord(ch):04X}")
def test_every_default_ignorable_or_format_character_is_dropped_and_covered(ch: str) -> None:
    assert ch not in INVISIBLE or unicodedata.name(ch) == INVISIBLE[ch]
    text = f"key AKIA{ch}IOSFODNN7EXAMPLE and sam.inv@exa{ch}mple.com"
    given, normal = views(text)
    assert given.text == text and normal.text == "key AKIAIOSFODNN7EXAMPLE and sam.inv@example.com"
    start = normal.text.index("AKIA")
    assert text[slice(*normal.origin(start, start + 20))] == f"AKIA{ch}IOSFODNN7EXAMPLE"


def test_default_ignorable_code_points_are_unicode_14s_ranges() -> None:
    ignorable = [cp for cp in range(0x110000) if is_ignorable(chr(cp))]
    assert len(ignorable) == 4174  # the code points of the property in DerivedCoreProperties.txt 14.0.0
    assert ignorable[0] == 0xAD and ignorable[-1] == 0xE0FFF
    assert not any(is_ignorable(ch) for ch in "\x00 A\u00ac\u00ae\u034e\u0350\u2010\u2070\ufe10\ufeef\U000e1000")


def test_blank_characters_read_as_a_space_and_visible_ones_are_kept() -> None:
    text = "iban\u2800DE89\u1680call\U0001d159me\u3000now, Zoë ❤\ufe0f, 한국어"
    given, normal = views(text)
    assert given.text == text and normal.text == "iban DE89 call me now, Zoë ❤, 한국어"
    assert text[slice(*normal.origin(4, 5))] == "\u2800"


def test_text_already_in_normal_form_has_no_second_form() -> None:
    assert len(views("Zoë prefers café, naïvely")) == 1


def test_the_unescaped_form_decodes_escaped_strings_and_json_inside_them() -> None:
    text = '{"cfg":"db_password=\\"x1\\"","inner":"{\\"k\\":\\"a\\\\nb\\"}","plain":"no escapes"}'
    given, unescaped = views(text)
    assert given.text == text
    assert unescaped.text == '{"cfg":"db_password="x1"","inner":"{"k":"a\nb"}","plain":"no escapes"}'
    inside = unescaped.text.index("x1")
    start, end = unescaped.origin(inside, inside + 2)
    assert (start - 1, end) == (text.index('"db_password'), start + 1)  # traced to the inside of its string
    escaped = quoted_strings(text)
    assert [text[s.start : s.end] for s in escaped] == ['"db_password=\\"x1\\""', '"{\\"k\\":\\"a\\\\nb\\"}"']
    assert [s.value for s in escaped] == ['db_password="x1"', '{"k":"a\\nb"}']
    assert [s.value for s in quoted_strings(text, escaped_only=False)][-1] == "no escapes"


def test_encoding_a_string_keeps_utf8_and_escapes_what_text_may_not_hold_raw() -> None:
    assert encode_string('café "x"\n') == '"café \\"x\\"\\n"'
    assert encode_string("del\x7f") == '"del\\u007f"'
    assert encode_string("lone \ud800") == '"lone \\ud800"'
    assert is_json('{"a": [1, "b"]}') and is_json("[" * 100_000 + "]" * 100_000) and not is_json('"just a string"')
