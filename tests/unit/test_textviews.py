"""The forms of a text that screening reads (no I/O): the normalised form maps each of
its characters back to the one of the text it came from."""

from __future__ import annotations

from ledger.textviews import views


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
