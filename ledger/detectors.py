"""The detectors of screening (``ledger.screening``): a ``Screener`` finds secrets and
personal data in a text under a screening policy and decides, without I/O, what to do.

Secrets are found with detect-secrets' plugins, called directly (no detect-secrets
settings, filters, logging or verification requests are involved); email addresses are
candidates checked with email-validator (internationalised ones too); phone numbers are those libphonenumber's matcher
finds at its ``VALID`` leniency; payment card numbers are 13 to 19 digits whose first digit
is a card issuer's major industry identifier (ISO/IEC 7812-1: 2 to 6) and that pass the
Luhn check of python-stdnum; IBANs pass python-stdnum's ISO 13616 mod-97 check. Each
detector reads every form of the text (``ledger.textviews``), so an invisible or
compatibility character does not hide what it finds. This module imports those
libraries: the ledger builds its ``Screener`` at its first write.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote, urlsplit

import phonenumbers
from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.filters import heuristic
from detect_secrets.plugins import keyword
from detect_secrets.plugins.base import BasePlugin, RegexBasedDetector
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.high_entropy_strings import HighEntropyStringsPlugin
from detect_secrets.plugins.private_key import PrivateKeyDetector
from email_validator import EmailNotValidError, validate_email
from stdnum import iban, luhn

from contracts import MemoryWrite, Screening, ScreeningFinding
from contracts.types import Sensitivity
from ledger.errors import PolicyError
from ledger.policy import SENSITIVITY_ORDER
from ledger.screening import (
    Label,
    Screened,
    ScreeningPolicy,
    SecretFoundError,
    invisible_refusal,
    kind_of,
    label_refusal,
    write_labels,
)
from ledger.textviews import View, encode_string, is_json, quoted_strings, views

_KEYWORDS = re.compile(keyword.DENYLIST_REGEX, re.IGNORECASE)
_PHONE_DIGITS = re.compile(r"\d(?:[\s().-]*\d){5}")
"""Six digits, maybe separated: no phone number of a supported region is shorter (a
cheap test before libphonenumber's matcher, which is slow)."""
_LETTER = re.compile(r"[^\W\d_]")
_DIGIT = re.compile(r"\d")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]+-----")
_DELIMITERS = " \t\r\n:/@'\"=,;"
_AUTHORITY = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://([^\s/?#]*@[^\s/?#]*)")
"""A URL's scheme and authority (RFC 3986, section 3) holding an ``@``: its user
information is read by ``urllib.parse`` (``_url_credentials``)."""
_EMAIL = re.compile(r"[\w.!#$%&'*+/=?^`{|}~-]+@[^\W_](?:[\w-]*[^\W_])?(?:\.[\w-]+)+")
"""An email address candidate, internationalised (RFC 6531: letters and digits of any
script, in the local part and the domain, which email-validator checks as IDNA)."""
_ASCII_EMAIL = re.compile(
    r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)+"
)
"""An ASCII address inside a candidate that is not valid as a whole (letters of a word
before it: ``联系jane@example.com``)."""
_CARD = re.compile(r"(?<![^\W_])(?<!-)\d(?:[ \t\r\n-]{0,3}\d){12,18}(?![^\W_])(?!-)")
"""13 to 19 digits, maybe grouped by white space (up to three characters of it: a double
space, a line break) or hyphens, not part of a word or number (a UUID holds such runs:
4264-b466-739692214448); an underscore before or after does not hide it (card_4111...)."""
_CARD_DOTTED = re.compile(r"(?<![^\W_])(?<![.-])\d{4}(?:\.\d{4}){2}\.\d{1,7}(?![^\W_])(?![.-])")
"""A card number grouped by dots: groups of four (the last of one to seven), so that a
decimal number (3.14159265358979) is not read as one."""
_IBAN = re.compile(r"(?=([A-Z]{2}\d{2}(?:[ -]?[A-Z0-9]{4}){2,7}(?:[ -]?[A-Z0-9]{1,4})?))", re.IGNORECASE)
"""An IBAN candidate at every place it may start (a lookahead: overlapping candidates,
so that one glued to what comes before it, ``IBANDE89...``, ``ok_GB82...``, is found
too), in either case (its check digits are validated on the upper-cased form, ISO
13616), its groups of four maybe split by single spaces or hyphens (as an IBAN is
written on paper; a separator elsewhere ends it), running on over what follows it
(``_is_iban`` finds where it ends). A false candidate rarely passes: the country's one
length and its format, then mod 97."""
_ISSUER_MII = frozenset("23456")
"""First digits (major industry identifiers, ISO/IEC 7812-1) of payment card issuers:
2 and 5 Mastercard, 3 travel and entertainment (American Express, JCB, Diners), 4 Visa,
6 Discover, UnionPay, Maestro."""


@dataclass(frozen=True)
class _Secret:
    """A secret a plugin found: its ``kind`` (snake case), detect-secrets' ``name`` of it,
    the ``form`` of the text it was found in and its ``span`` there."""

    kind: str
    name: str
    form: View
    span: tuple[int, int]


class Screener:
    """Screens texts under one policy. Builds the detect-secrets plugins once; safe to
    share between threads (the plugins keep no state between calls)."""

    def __init__(self, policy: ScreeningPolicy) -> None:
        """Build the detectors of ``policy``.

        Raises:
            PolicyError: ``secrets.detectors`` names no detect-secrets plugin, or
                ``personal.phone_regions`` no region libphonenumber knows.
        """
        self.policy = policy
        by_name = _plugin_classes()
        _all_known("secrets.detectors", policy.secrets.detectors, set(by_name), "detect-secrets plugin")
        regions = phonenumbers.SUPPORTED_REGIONS
        _all_known("personal.phone_regions", policy.personal.phone_regions, regions, "region")
        self._plugins: list[BasePlugin] = [by_name[name]() for name in policy.secrets.detectors]
        # what a replaced secret leaves, [secret: <kind>]: no secret, though "secret:" reads as
        # a keyword assignment; masked before detection, so that a replaced text screens clean
        kinds = sorted({kind_of(p.secret_type) for p in self._plugins})
        self._markers = re.compile(r"\[secret: (?:" + "|".join(map(re.escape, kinds)) + r")\]")

    def screen(self, cmd: MemoryWrite) -> tuple[MemoryWrite, Screening]:
        """``cmd`` as it is admitted (content with secrets replaced, sensitivity raised)
        and the screening decision, after its labels (``ledger.screening.write_labels``)
        passed ``screen_labels``. The text and the labels are first read together, in
        one pass of every detector: a write in which nothing is found (the usual one)
        costs one pass; otherwise the labels and the text are screened apart, so that
        what is found is put down to its field.

        Raises:
            InvalidCommandError: the subject id or a label kept in clear or as the key
                holds a format character (``ledger.screening.invisible_refusal``).
            LabelRefusedError: a label breaks ``ledger.screening.label_refusal``.
            SecretFoundError: field ``content``, a secret the policy refuses.
        """
        labels = write_labels(cmd)
        named = [("subject_id", cmd.subject_id)] + [(x.field, x.value) for x in labels if x.storage != "reference"]
        for field, value in named:
            invisible = invisible_refusal(field, value)
            if invisible is not None:
                self.screen_labels(labels)  # a secret hidden by the character is named as one
                raise invisible
        if not self._finds_anything(cmd.content, labels):
            return cmd, Screening(policy=self.policy.name)
        self.screen_labels(labels)
        s = self.screen_text(cmd.content, cmd.sensitivity, "content")
        if (s.content, s.sensitivity) != (cmd.content, cmd.sensitivity):
            cmd = cmd.model_copy(update={"content": s.content, "sensitivity": s.sensitivity})
        return cmd, s.screening

    def screen_labels(self, labels: Sequence[Label]) -> None:
        """Screen the labels of a command (``ledger.screening.Label``), each as given and
        percent-decoded (a LangGraph key part, a URL), in every form
        (``ledger.textviews``), with the secret and personal detectors of the policy;
        the rule is ``ledger.screening.label_refusal``.

        Raises:
            LabelRefusedError: the first label the rule refuses, naming its field and the
                kinds found (never the value).
        """
        if not labels or not self._finds_anything(None, labels):
            return
        for label in labels:
            texts = [form.text for t in _label_texts(label.value) for form in views(t)]
            secrets = tuple(s.name for s in self._secrets([View(t) for t in texts]))
            wanted = label.storage != "reference"  # the rule allows personal data in a reference
            personal = tuple(kind for t in texts for kind in self._personal(t)) if wanted else ()
            refusal = label_refusal(label, secrets, personal)
            if refusal is not None:
                raise refusal

    def _finds_anything(self, content: str | None, labels: Sequence[Label]) -> bool:
        """Whether any detector finds anything in ``content`` and ``labels`` read together,
        one text a line (each line's forms made on its own): the secret detectors in all
        of them, the personal data detectors in the content and in the labels whose
        personal data the rule of labels refuses (not in references)."""
        texts = [] if content is None else [(content, True)]
        texts += [(t, label.storage != "reference") for label in labels for t in _label_texts(label.value)]
        forms = [(views(t), personal) for t, personal in texts]
        for level in range(max(len(f) for f, _ in forms)):
            lines = [(f[min(level, len(f) - 1)].text, personal) for f, personal in forms]
            joined = self._masked("\n".join(t for t, _ in lines))
            if any(_secret_spans(plugin, joined) for plugin in self._plugins):
                return True
            joined = "\n".join(t for t, personal in lines if personal)
            if joined and next(self._personal(joined), None) is not None:
                return True
        return False

    def screen_text(self, text: str, sensitivity: Sensitivity, field: str) -> Screened:
        """Screen ``text`` of a memory of class ``sensitivity``: the text itself and its
        other forms (``ledger.textviews``: unescaped, normalised). A kind found in several
        forms counts as often as in the form where it is found most.

        Raises:
            SecretFoundError: naming ``field``, a secret the policy refuses, or one it
                would replace that cannot be replaced without breaking the text.
        """
        text, found = self._without_secrets(text, field)
        findings = [
            ScreeningFinding(kind=k, category="secret", action="replaced", count=n)
            for k, n in sorted(_most((id(s.form), s.kind) for s in found).items())
        ]
        forms = views(text)
        personal = _most((i, kind) for i, form in enumerate(forms) for kind in self._personal(form.text))
        target = self.policy.personal.raise_to
        raise_it = bool(personal) and SENSITIVITY_ORDER.index(sensitivity) < SENSITIVITY_ORDER.index(target)
        action: Literal["raised", "kept"] = "raised" if raise_it else "kept"
        findings += [
            ScreeningFinding(kind=k, category="personal", action=action, count=n) for k, n in sorted(personal.items())
        ]
        screening = Screening(
            policy=self.policy.name, findings=tuple(findings), raised_from=sensitivity if raise_it else None
        )
        return Screened(text, target if raise_it else sensitivity, screening)

    def _without_secrets(self, text: str, field: str) -> tuple[str, list[_Secret]]:
        """``text`` with the secrets found in any of its forms replaced by
        ``[secret: <kind>]`` (``_replaced``), and what was found.

        Raises:
            SecretFoundError: a secret the policy refuses; or the replaced text still
                holds a secret, or is no longer JSON while ``text`` was (``replaceable``
                false).
        """
        found = self._secrets(views(text))
        rules = self.policy.secrets
        refused = sorted({(s.kind, s.name) for s in found if rules.actions.get(s.kind, rules.action) == "refuse"})
        if refused:
            raise SecretFoundError(field, tuple(k for k, _ in refused), tuple(n for _, n in refused), self.policy.name)
        if not found:
            return text, found
        replaced = self._replaced(text, found, field)
        left = self._secrets(views(replaced))
        if left or (is_json(text) and not is_json(replaced)):
            named = sorted({(s.kind, s.name) for s in left or found})
            kinds, names = tuple(k for k, _ in named), tuple(n for _, n in named)
            raise SecretFoundError(field, kinds, names, self.policy.name, replaceable=False)
        return replaced, found

    def _replaced(self, text: str, found: list[_Secret], field: str) -> str:
        """``text`` with each secret of ``found`` replaced. One inside a string of a JSON
        text, or inside an escaped string of another text (``textviews.quoted_strings``),
        is replaced in the string's decoded value, which is encoded again, so that JSON
        stays JSON (its structure as it was); when the value alone holds no secret (it
        was one by its context: ``{"password": "..."}``, or a match across strings), the
        whole value is replaced. Elsewhere the text it came from is replaced, whole."""
        strings = quoted_strings(text, escaped_only=not is_json(text))
        loose: list[tuple[tuple[int, int], str]] = []
        touched: dict[int, str] = {}  # index of a string -> the kind found first in it
        for s in found:
            start, end = s.form.origin(*s.span)
            inside = [i for i, e in enumerate(strings) if start < e.end and e.start < end]
            for i in inside:
                touched.setdefault(i, s.kind)
            if not inside:
                loose.append(((start, end), s.kind))
        edits = _markers(loose)
        for i, kind in touched.items():
            e = strings[i]
            value, _ = self._without_secrets(e.value, field)
            edits.append((e.start, e.end, encode_string(value if value != e.value else f"[secret: {kind}]")))
        return _apply(text, edits)

    def _secrets(self, forms: list[View]) -> list[_Secret]:
        """The secrets every plugin finds in each form (what replaced secrets left masked)."""
        return [
            _Secret(kind_of(plugin.secret_type), plugin.secret_type, form, span)
            for form in forms
            for text in (self._masked(form.text),)
            for plugin in self._plugins
            for span in _secret_spans(plugin, text)
        ]

    def _masked(self, text: str) -> str:
        """``text`` with each ``[secret: <kind>]`` made ``[___...]``, of the same length."""
        if "[secret: " not in text:
            return text
        return self._markers.sub(lambda m: "[" + "_" * (len(m.group(0)) - 2) + "]", text)

    def _personal(self, text: str) -> Iterator[str]:
        detectors = self.policy.personal.detectors
        if "email_address" in detectors and "@" in text:
            yield from ("email_address" for m in _EMAIL.finditer(text) if _is_email(m.group(0)))
        if "phone_number" in detectors:
            yield from ("phone_number" for _ in _phone_spans(text, self.policy.personal.phone_regions))
        if "payment_card_number" in detectors:
            for pattern in (_CARD, _CARD_DOTTED):
                yield from ("payment_card_number" for m in pattern.finditer(text) if _is_card(m.group(0)))
        if "iban" in detectors:
            yield from ("iban" for _ in _ibans(text))


def _ibans(text: str) -> Iterator[int]:
    """The offsets of the IBANs in ``text``, each counted once (a candidate starting inside
    one already found is not another)."""
    end = -1
    for m in _IBAN.finditer(text):
        if m.start() >= end and _is_iban(m.group(1)):
            end = m.start() + 15  # the shortest IBAN: no second one starts inside it
            yield m.start()


def _is_iban(candidate: str) -> bool:
    """Whether ``candidate`` (an ``_IBAN`` match) starts with an IBAN: the pattern runs on
    over what follows one (a word after a space, ``DE89 3704 ... monthly``; letters glued
    to it, ``...3000x``), so each shorter start of it is checked, longest first, down to
    the shortest IBAN's 15 characters (ISO 13616: the country's length and format, and the
    mod-97 check, by python-stdnum; each country has one length, so at most a few checks
    get past the length test)."""
    compact = re.sub(r"[ -]", "", candidate.upper())
    return any(iban.is_valid(compact[:n]) for n in range(len(compact), 14, -1))


# -- detection ----------------------------------------------------------------------------


def _label_texts(value: str) -> list[str]:
    """A label as given and, when it holds percent escapes, percent-decoded (UTF-8, an
    undecodable byte as U+FFFD)."""
    decoded = unquote(value) if "%" in value else value
    return [value] if decoded == value else [value, decoded]


def _all_known(field: str, given: tuple[str, ...], known: set[str], what: str) -> None:
    unknown = [g for g in given if g not in known]
    if unknown:
        raise PolicyError(f"screening policy: {field}: unknown {what} {', '.join(unknown)}")


def _plugin_classes() -> dict[str, type[BasePlugin]]:
    """detect-secrets' plugin classes by class name (``AWSKeyDetector``, ...)."""
    classes: list[type[BasePlugin]] = list(get_mapping_from_secret_type_to_class().values())
    return {c.__name__: c for c in classes}


def _secret_spans(plugin: BasePlugin, text: str) -> list[tuple[int, int]]:
    """Where ``plugin`` finds secrets in ``text``: the plugin decides what is a secret
    (its own ``analyze_string``, and for high-entropy strings its entropy limit), then the
    spans are the matches of its patterns that hold a value it reported; values that are
    sequential, UUIDs, templates or ``$`` references (detect-secrets' heuristic filters)
    are not secrets. A private key's span runs to its PEM ``END`` line. The basic auth
    plugin also finds what its pattern leaves out (``_url_credentials``)."""
    values = {v for v in _values(plugin, text) if v and not _filtered(v)}
    spans = _url_credentials(text) if isinstance(plugin, BasicAuthDetector) else []
    if not values:
        return _merge(spans)
    if isinstance(plugin, RegexBasedDetector):
        for regex in plugin.denylist:
            spans += [_trim(text, m.span()) for m in regex.finditer(text) if any(v in m.group(0) for v in values)]
    else:
        spans += [(m.start(), m.end()) for v in values for m in re.finditer(re.escape(v), text)]
    if isinstance(plugin, PrivateKeyDetector):
        spans = [_pem_block(text, span) for span in spans]
    return _merge(spans)


def _values(plugin: BasePlugin, text: str) -> Iterator[str]:
    """The secret values ``plugin`` reports in ``text``. The keyword plugin runs in its
    default mode (a quoted value: ``password = "..."``) and in its configuration-file mode
    (``password: ...``, its value running to the end of the line), where in prose only a
    first word mixing letters and digits counts (``password: hunter2 for now`` reports
    ``hunter2``; ``password: the one on the note`` and ``secret: the code is 0000`` are
    sentences, not credentials)."""
    if isinstance(plugin, keyword.KeywordDetector):
        if not _KEYWORDS.search(text):  # the plugin's own keywords (its patterns are slow)
            return
        yield from plugin.analyze_string(text)
        unquoted = plugin.analyze_string(text, keyword.CONFIG_DENYLIST_REGEX_TO_GROUP)
        words = (v.split()[0] for v in unquoted if v.strip())
        yield from (w for w in words if _LETTER.search(w) and _DIGIT.search(w))
    elif isinstance(plugin, HighEntropyStringsPlugin):
        limit = plugin.entropy_limit
        yield from (v for v in plugin.analyze_string(text) if plugin.calculate_shannon_entropy(v) > limit)
    else:
        yield from plugin.analyze_string(text)


def _url_credentials(text: str) -> list[tuple[int, int]]:
    """Spans of the user information (``user:password``) of the URLs in ``text`` that
    carry a password, as ``urllib.parse`` splits them (the password runs to the last
    ``@`` of the authority): those detect-secrets' basic auth pattern does not match, as
    an empty user name (``redis://:pw@host``, Redis' own form) or a password holding a
    character its pattern excludes (``Pa$$w0rd!``, ``p@ss``), are credentials all the
    same. A password the heuristic filters pass over (a template, a ``$`` reference) is
    not one."""
    if "://" not in text:
        return []
    spans: list[tuple[int, int]] = []
    for m in _AUTHORITY.finditer(text):
        try:
            password = urlsplit(m.group(0)).password
        except ValueError:  # not a URL after all (an unbalanced [ of an IPv6 host)
            continue
        if password and not _filtered(password):
            spans.append((m.start(1), m.start(1) + m.group(1).rindex("@")))
    return spans


def _filtered(value: str) -> bool:
    return (
        heuristic.is_sequential_string(value)
        or heuristic.is_potential_uuid(value)
        or heuristic.is_templated_secret(value)
        or heuristic.is_prefixed_with_dollar_sign(value)
    )


def _trim(text: str, span: tuple[int, int]) -> tuple[int, int]:
    """``span`` without delimiters at either end (``://user:pw@`` -> ``user:pw``)."""
    start, end = span
    while start < end and text[start] in _DELIMITERS:
        start += 1
    while end > start and text[end - 1] in _DELIMITERS:
        end -= 1
    return start, end


def _pem_block(text: str, span: tuple[int, int]) -> tuple[int, int]:
    start = text.rfind("-----", 0, span[0])
    start = span[0] if start < 0 else start
    end = _PEM_END.search(text, span[1])
    return start, len(text) if end is None else end.end()


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _markers(found: list[tuple[tuple[int, int], str]]) -> list[tuple[int, int, str]]:
    """Edits replacing every span of ``found`` by ``[secret: <kind>]``; overlapping spans
    (of several plugins) are replaced as one, named by the kind found first in it."""
    joined: list[tuple[int, int, str]] = []
    for (start, end), kind in sorted(found):
        if joined and start < joined[-1][1]:
            joined[-1] = (joined[-1][0], max(end, joined[-1][1]), joined[-1][2])
        elif end > start:
            joined.append((start, end, kind))
    return [(start, end, f"[secret: {kind}]") for start, end, kind in joined]


def _apply(text: str, edits: list[tuple[int, int, str]]) -> str:
    """``text`` with each (start, end, replacement) of ``edits`` made (they do not overlap)."""
    out: list[str] = []
    last = 0
    for start, end, replacement in sorted(edits):
        out += [text[last:start], replacement]
        last = end
    return "".join([*out, text[last:]])


def _is_email(candidate: str) -> bool:
    """Whether ``candidate`` is an email address (internationalised ones included: IDNA
    domains and UTF-8 local parts, as email-validator checks them), or, when it is not
    ASCII and not valid as a whole, holds an ASCII one."""
    if _valid_email(candidate):
        return True
    return not candidate.isascii() and any(_valid_email(m.group(0)) for m in _ASCII_EMAIL.finditer(candidate))


def _valid_email(candidate: str) -> bool:
    try:
        validate_email(candidate, check_deliverability=False)
    except EmailNotValidError:
        return False
    return True


def _most(found: Iterable[tuple[Hashable, str]]) -> dict[str, int]:
    """How often each kind was found in the form where it was found most often:
    ``found`` holds (form, kind) pairs, one for each occurrence."""
    per_form = Counter(found)
    most: dict[str, int] = {}
    for (_, kind), n in per_form.items():
        most[kind] = max(most.get(kind, 0), n)
    return most


def _phone_spans(text: str, regions: tuple[str, ...]) -> set[tuple[int, int]]:
    """Spans of valid phone numbers: in international format (any region), or in the
    national format of one of ``regions``."""
    spans: set[tuple[int, int]] = set()
    if not _PHONE_DIGITS.search(text):
        return spans
    for region in (None, *regions):
        matcher = phonenumbers.PhoneNumberMatcher(text, region, leniency=phonenumbers.Leniency.VALID)
        spans.update((m.start, m.end) for m in matcher)
    return spans


def _is_card(candidate: str) -> bool:
    digits = re.sub(r"[\s.-]", "", candidate)
    return 13 <= len(digits) <= 19 and digits[0] in _ISSUER_MII and luhn.is_valid(digits)
