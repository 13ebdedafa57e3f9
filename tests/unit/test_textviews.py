"""The forms of a text that screening reads (no I/O): the normalised form maps each of
its characters back to the one of the text it came from."""

from __future__ import annotations

from ledger.textviews import encode_string, is_json, quoted_strings, views


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
