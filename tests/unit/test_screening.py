"""Screening at the write boundary (no I/O): each detector finds its kind, ordinary text
passes untouched, secrets are refused or replaced whole, personal data raises the class
(and a redaction may not), the policy file is checked, and no value found ever reaches
an error, a record or a log line."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from pathlib import Path

import pytest

from contracts import EraseMemories, MemoryWrite, RedactMemory, RevokeConsent, utc_now
from ledger.detectors import Screener
from ledger.errors import InvalidCommandError, PolicyError
from ledger.policy import load_policy
from ledger.screening import (
    Label,
    LabelRefusedError,
    ScreeningPolicy,
    SecretFoundError,
    admit_write,
    erasure_labels,
    kind_of,
    load_screening_policy,
    redaction_labels,
    revocation_labels,
    screen_redaction,
)
from tests.builders import memory_write
from workers.gateway import InvalidRequestError
from workers.gateway.service import translate

POLICY = load_screening_policy()
SCREENER = Screener(POLICY)
REPLACING = Screener(POLICY.model_copy(update={"secrets": POLICY.secrets.model_copy(update={"action": "replace"})}))
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx4UbaDzY\n-----END RSA PRIVATE KEY-----"

SECRETS = [
    ("my aws key is AKIAIOSFODNN7EXAMPLE", "aws_access_key", "AKIAIOSFODNN7EXAMPLE"),
    ("CI uses 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", "github_token", "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"),
    ("postgres://admin:s3cr3tPassw0rd@db.example.com/app", "basic_auth_credentials", "s3cr3tPassw0rd"),
    # what detect-secrets' pattern leaves out: no user name, and a $, ! or @ in the password
    ("cache at redis://:s3cr3tPassw0rd@cache.internal:6379/0", "basic_auth_credentials", "s3cr3tPassw0rd"),
    ("postgres://admin:Pa$$w0rd!@db.example.com/app", "basic_auth_credentials", "Pa$$w0rd!"),
    ("postgresql://admin:p@ssw0rd@db.example.com/app", "basic_auth_credentials", "p@ssw0rd"),
    (f"the deploy key:\n{PEM}\nkeep it safe", "private_key", "MIIEowIBAAKCAQEAx4UbaDzY"),
    ("password = hunter2isgreat", "secret_keyword", "hunter2isgreat"),
    ("db password: hunter2isgreat until Friday", "secret_keyword", "hunter2isgreat"),
    ('api_key = "abcd1234efgh5678"', "secret_keyword", "abcd1234efgh5678"),
    ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe_access_key", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    (
        "slack xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
        "slack_token",
        "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    ),
]

PERSONAL = [
    ("write to sam.jones@example.com", "email_address"),
    ("call +49 30 901820 after six", "phone_number"),
    ("her mobile is (415) 555-2671", "phone_number"),
    ("card 4111 1111 1111 1111, exp 12/29", "payment_card_number"),
    ("pay to DE89 3704 0044 0532 0130 00", "iban"),
    ("iban de89 3704 0044 0532 0130 00", "iban"),  # lower case
    ("iban gb82west12345698765432", "iban"),
    ("pay to DE89370400440532013000 monthly", "iban"),  # a word after it: the pattern runs on over it
    ("iban GB82 WEST 1234 5698 7654 32 ok", "iban"),
    ("to DE89 3704 0044 0532 0130 00 for rent", "iban"),
    ("iban_DE89370400440532013000", "iban"),  # an underscore before it
    ("x DE89370400440532013000_monthly", "iban"),  # and after it
    ("GB82WEST12345698765432ok", "iban"),  # letters glued after it
    ("DE89370400440532013000x monthly", "iban"),
    ("pay DE89-3704-0044-0532-0130-00", "iban"),  # groups split by hyphens
    ("IBANDE89370400440532013000", "iban"),  # glued to the letters before it
    ("ref 123DE89370400440532013000", "iban"),  # or the digits
    ("okGB82WEST12345698765432", "iban"),
    ("AB12DE89370400440532013000", "iban"),  # a false candidate before it does not hide it
    ("card 4111  1111  1111  1111", "payment_card_number"),  # double spaces
    ("card 4111.1111.1111.1111", "payment_card_number"),
    ("card 4111 1111\n1111 1111", "payment_card_number"),  # a line break between groups
    ("card_4111111111111111", "payment_card_number"),
    ("card " + " ".join(["\u0664\u0661\u0661\u0661"] + ["\u0661" * 4] * 3), "payment_card_number"),  # Arabic-Indic
]

EVASIONS = [  # a secret split by an invisible character, or spelt with a compatibility one
    ("my aws key is AKIAIOSF\u200bODNN7EXAMPLE", "aws_access_key", "ODNN7EXAMPLE"),
    ("my aws key is AKIA\u00adIOSFODNN7EXAMPLE", "aws_access_key", "IOSFODNN7EXAMPLE"),
    ("CI uses \uff47hp_wWPw5k4aXcaT4fNP0UcnZwJUVFk6LO0pINUx", "github_token", "wWPw5k4aXcaT4fNP0UcnZwJUVFk6LO0pINUx"),
    ("Zoë's key: AKIAIOSFODNN7\u2060EXAMPLE, café", "aws_access_key", "IOSFODNN7"),
    # default ignorable, though not format characters: a joiner, variation selectors, a filler
    ("my key AKIA\u034fIOSFODNN7EXAMPLE", "aws_access_key", "IOSFODNN7EXAMPLE"),
    ("my key ❤\ufe0f AKIA\ufe0fIOSFODNN7EXAMPLE", "aws_access_key", "IOSFODNN7EXAMPLE"),
    ("my key AKIAIOSF\U000e0100ODNN7EXAMPLE", "aws_access_key", "ODNN7EXAMPLE"),
    ("CI uses ghp_wWPw5k4aXcaT4fNP0U\u3164cnZwJUVFk6LO0pINUx", "github_token", "cnZwJUVFk6LO0pINUx"),
    ("db password:\u2800hunter2isgreat until Friday", "secret_keyword", "hunter2isgreat"),  # a blank reads as a space
    ("key AKIAIOSFODNN7EXAMPL\u0301E", "aws_access_key", "IOSFODNN7EXAMPL"),  # a combining mark drawn on the L
    ("key AKIAIOSFODNN7EXAM\u0332PLE", "aws_access_key", "IOSFODNN7EXAM"),
    ("key AKIAIOSFODNN7EXAMPL\u0903E", "aws_access_key", "IOSFODNN7EXAMPL"),  # a spacing mark (Mc)
]

HIDDEN_PERSONAL = [  # personal data split by an invisible character
    ("mail sam.inv@exa\ufe0fmple.com", "email_address"),
    ("mail sam.inv\u034f@example.com", "email_address"),
    ("pay to DE89\u115f3704\uffa00044 0532 0130 00", "iban"),
    ("card 4111\U000e01ef 1111 1111 1111", "payment_card_number"),
    ("card 4111 1111 1111 111\u0301 1", "payment_card_number"),  # combining marks
    ("card 4\u20dd111 1111 1111 1111", "payment_card_number"),
]

INTERNATIONAL_EMAIL = [
    "mail john@exämple.com",
    "mail jöhn@example.com",
    "schreib an jürgen@bücher.de",
    "联系jane@example.com",
]

ORDINARY = [
    "Alice prefers short answers",
    "Alice's badge number is 90210 and her desk is 4F-17",
    "The meeting moved to 10:30 on 2026-01-05",
    "Order 1234567890123 shipped in version 1.2.3.4",
    "Her password policy: rotate every 90 days",
    "password: the one on the sticky note",
    "Their secret: the launch code is 0000",
    "Memory 0190a5a0-0000-7000-8000-000000000000 was superseded",
    "The database is postgres://app:${DB_PASSWORD}@db/app, and Git at ssh://git@git-host/team/app",
    "Card ending 4242, IBAN not given, email me later",
    "Uses a secret santa list and a private key ring for the office",
    "Zoë prefers café au lait and the \ufb01le names in \uff46\uff55\uff4c\uff4c\uff57\uff49\uff44\uff54\uff48 letters",
    "Zero\u200bwidth spaces and soft\u00adhyphens stay as written",
    "pi is 3.14159265358979 and e is 2.71828182845904",
    "versions 4111.1111.1111.1111.2 and 1.2.3 were built",
    "the run ids are 4111-1111-1111-1111-abcd and abc_def",
]


@pytest.mark.parametrize(("text", "kind", "value"), SECRETS, ids=[k for _, k, _ in SECRETS])
def test_a_secret_is_refused_naming_its_kind_and_never_its_value(text: str, kind: str, value: str) -> None:
    with pytest.raises(SecretFoundError) as info:
        SCREENER.screen_text(text, "internal", "content")
    assert info.value.field == "content" and info.value.kinds == (kind,)
    assert value not in str(info.value) and value not in repr(info.value.kinds)


@pytest.mark.parametrize(("text", "kind", "value"), SECRETS, ids=[k for _, k, _ in SECRETS])
def test_a_replaced_secret_is_gone_whole_and_recorded_by_kind(text: str, kind: str, value: str) -> None:
    screened = REPLACING.screen_text(text, "internal", "content")
    assert value not in screened.content and f"[secret: {kind}]" in screened.content
    assert [(f.kind, f.category, f.action) for f in screened.screening.findings] == [(kind, "secret", "replaced")]
    assert value not in screened.screening.model_dump_json()


@pytest.mark.parametrize(("text", "kind", "value"), EVASIONS, ids=[t[:22] for t, _, _ in EVASIONS])
def test_a_secret_hidden_by_an_invisible_or_compatibility_character_is_found(text: str, kind: str, value: str) -> None:
    with pytest.raises(SecretFoundError) as info:
        SCREENER.screen_text(text, "internal", "content")
    assert info.value.kinds == (kind,) and value not in str(info.value)
    screened = REPLACING.screen_text(text, "internal", "content")  # replaced whole, the invisible character too
    assert value not in screened.content and f"[secret: {kind}]" in screened.content
    assert [(f.kind, f.count) for f in screened.screening.findings] == [(kind, 1)]


@pytest.mark.parametrize(("text", "kind"), HIDDEN_PERSONAL, ids=[k for _, k in HIDDEN_PERSONAL])
def test_personal_data_hidden_by_an_invisible_character_raises_the_class(text: str, kind: str) -> None:
    screened = SCREENER.screen_text(text, "public", "content")
    assert screened.sensitivity == "personal" and screened.content == text
    assert [(f.kind, f.count) for f in screened.screening.findings] == [(kind, 1)]


@pytest.mark.parametrize("text", INTERNATIONAL_EMAIL)
def test_an_internationalised_email_address_raises_the_class(text: str) -> None:
    screened = SCREENER.screen_text(text, "public", "content")
    assert screened.sensitivity == "personal" and screened.content == text
    assert [(f.kind, f.count) for f in screened.screening.findings] == [("email_address", 1)]


@pytest.mark.parametrize("screener", [SCREENER, REPLACING], ids=["refuse", "replace"])
def test_what_a_replaced_secret_left_screens_clean_but_a_secret_dressed_as_it_does_not(screener: Screener) -> None:
    replaced = REPLACING.screen_text("postgres://deploy:Sup3rS3cretPw@db.internal:5432/app", "internal", "content")
    again = screener.screen_text(replaced.content, "internal", "content")  # e.g. an item read and put back
    assert (again.content, again.screening.findings) == (replaced.content, ())
    with pytest.raises(SecretFoundError):
        SCREENER.screen_text("[secret: AKIAIOSFODNN7EXAMPLE]", "internal", "content")


def test_a_private_key_is_replaced_up_to_its_end_line_and_the_rest_is_kept() -> None:
    screened = REPLACING.screen_text(f"the deploy key:\n{PEM}\nkeep it safe", "internal", "content")
    assert screened.content == "the deploy key:\n[secret: private_key]\nkeep it safe"


@pytest.mark.parametrize(("text", "kind"), PERSONAL, ids=[k for _, k in PERSONAL])
def test_personal_data_raises_the_class_and_is_recorded(text: str, kind: str) -> None:
    screened = SCREENER.screen_text(text, "public", "content")
    assert screened.content == text and screened.sensitivity == "personal"
    assert screened.screening.raised_from == "public"
    assert [(f.kind, f.category, f.action, f.count) for f in screened.screening.findings] == [
        (kind, "personal", "raised", 1)
    ]
    kept = SCREENER.screen_text(text, "restricted", "content")  # already above: kept, not lowered
    assert kept.sensitivity == "restricted" and kept.screening.raised_from is None
    assert [f.action for f in kept.screening.findings] == ["kept"]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_passes_untouched(text: str) -> None:
    screened = SCREENER.screen_text(text, "internal", "content")
    assert (screened.content, screened.sensitivity, screened.screening.findings) == (text, "internal", ())
    assert screened.screening.policy == "default"


def test_a_write_raised_to_personal_meets_its_class_rules_and_the_error_says_why() -> None:
    retention = load_policy()
    cmd = memory_write(content="Sam's email is sam.jones@example.com", sensitivity="internal")
    with pytest.raises(InvalidCommandError) as info:
        admit_write(retention, SCREENER, cmd, utc_now())
    assert info.value.field == "provenance.consent_ref"
    assert "holds personal data (email address), so the memory is personal, not internal" in info.value.rule
    assert "sam.jones@example.com" not in str(info.value)
    consented = memory_write(
        content=cmd.content, provenance={"writer": "w", "written_at": utc_now(), "consent_ref": "c-1"}
    )
    admitted = admit_write(retention, SCREENER, consented, utc_now())
    assert admitted.cmd.sensitivity == "personal" and admitted.original.sensitivity == "internal"
    expires_at = admitted.cmd.retention.expires_at
    assert expires_at is not None and expires_at <= utc_now() + timedelta(days=180)


def test_a_redaction_may_not_raise_the_class_but_may_keep_it() -> None:
    with pytest.raises(InvalidCommandError) as info:
        screen_redaction(SCREENER, "Sam's phone is +49 30 901820", "internal")
    assert info.value.field == "replacement" and "cannot raise its class" in info.value.rule
    text, screening = screen_redaction(SCREENER, "Sam's phone is +49 30 901820", "personal")
    assert text == "Sam's phone is +49 30 901820" and screening.kinds() == ("phone_number",)
    with pytest.raises(SecretFoundError) as secret:
        screen_redaction(SCREENER, "token AKIAIOSFODNN7EXAMPLE", "personal")
    assert secret.value.field == "replacement"


def test_per_kind_actions_override_the_default() -> None:
    rules = POLICY.secrets.model_copy(update={"action": "replace", "actions": {"private_key": "refuse"}})
    screener = Screener(POLICY.model_copy(update={"secrets": rules}))
    assert "[secret: aws_access_key]" in screener.screen_text("AKIAIOSFODNN7EXAMPLE", "internal", "content").content
    with pytest.raises(SecretFoundError):
        screener.screen_text(PEM, "internal", "content")


def test_screening_logs_nothing_of_what_it_finds(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for text, _, _ in SECRETS:
        REPLACING.screen_text(text, "internal", "content")
    for text, _ in PERSONAL:
        SCREENER.screen_text(text, "public", "content")
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert not [v for _, _, v in SECRETS if v in logged]
    assert "sam.jones@example.com" not in logged and "4111" not in logged


def test_kinds_are_the_detect_secrets_types_in_snake_case() -> None:
    assert kind_of("AWS Access Key") == "aws_access_key"
    assert kind_of("Basic Auth Credentials") == "basic_auth_credentials"


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ('name = "x"\n[secrets]\ndetectors = ["AWSKeyDetector"]\n[personal]\nphone_regions = ["usa"]\n', "regions"),
        ('name = "x"\n[secrets]\ndetectors = ["AWSKeyDetector"]\naction = "ignore"\n[personal]\n', "action"),
        ('name = "x"\n[personal]\n', "secrets"),
        ("name = ", "not valid TOML"),
    ],
)
def test_a_bad_policy_file_is_refused_naming_the_field(tmp_path: Path, toml: str, expected: str) -> None:
    path = tmp_path / "screening.toml"
    path.write_text(toml, encoding="utf-8")
    with pytest.raises(PolicyError, match=expected):
        load_screening_policy(path)
    with pytest.raises(PolicyError, match="cannot read"):
        load_screening_policy(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ({"secrets": POLICY.secrets.model_copy(update={"detectors": ("NoSuchDetector",)})}, "detect-secrets plugin"),
        ({"personal": POLICY.personal.model_copy(update={"phone_regions": ("XX",)})}, "phone_regions: unknown region"),
    ],
)
def test_a_policy_naming_an_unknown_detector_or_region_is_refused_when_screening_starts(
    section: dict[str, object], expected: str
) -> None:
    with pytest.raises(PolicyError, match=expected):
        Screener(POLICY.model_copy(update=section))


def test_the_checked_in_policy_refuses_secrets_and_raises_to_personal() -> None:
    assert isinstance(POLICY, ScreeningPolicy) and POLICY.secrets.action == "refuse"
    assert POLICY.personal.raise_to == "personal" and set(POLICY.personal.detectors) == {
        "email_address",
        "phone_number",
        "payment_card_number",
        "iban",
    }


def as_json(value: object) -> str:
    """A value as the LangGraph store writes it: compact JSON, UTF-8 kept."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


ESCAPED_SECRETS = [  # each is refused as plain text; JSON's escapes must not hide it
    (as_json({"cfg": 'db_password="hunter2xyz"'}), "secret_keyword", "hunter2xyz"),
    (as_json({"outer": as_json({"cfg": 'db_password="hunter2xyz"'})}), "secret_keyword", "hunter2xyz"),
    (as_json({"note": "deploy with\nAKIAIOSFODNN7EXAMPLE"}), "aws_access_key", "AKIAIOSFODNN7EXAMPLE"),
    ('she wrote "db_password=\\"hunter2xyz\\"" in the ticket', "secret_keyword", "hunter2xyz"),
]

ESCAPED_PERSONAL = [
    (as_json({"a": "iban:\nDE89370400440532013000"}), "iban"),
    (as_json({"a": "phone\t2125550199"}), "phone_number"),
    (as_json({"a": "tel:\n(212) 555-0199"}), "phone_number"),
    (as_json({"card\n4111111111111111": "a key holds it"}), "payment_card_number"),
]


@pytest.mark.parametrize(("text", "kind", "value"), ESCAPED_SECRETS, ids=[k for _, k, _ in ESCAPED_SECRETS])
def test_a_secret_behind_json_escapes_is_refused(text: str, kind: str, value: str) -> None:
    with pytest.raises(SecretFoundError) as info:
        SCREENER.screen_text(text, "internal", "content")
    assert info.value.kinds == (kind,) and value not in str(info.value)


@pytest.mark.parametrize(("text", "kind"), ESCAPED_PERSONAL, ids=[t[:14] for t, _ in ESCAPED_PERSONAL])
def test_personal_data_behind_json_escapes_raises_a_public_memory(text: str, kind: str) -> None:
    screened = SCREENER.screen_text(text, "public", "content")
    assert screened.sensitivity == "personal" and screened.content == text
    assert [(f.kind, f.count) for f in screened.screening.findings] == [(kind, 1)]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"secret": 'abc"def', "n": 1}, {"secret": "[secret: secret_keyword]", "n": 1}),
        ({"cfg": 'db_password="hunter2xyz"', "x": [1]}, {"cfg": 'db_password="[secret: secret_keyword]"', "x": [1]}),
        ({"password": "hunter2xyz", "user": "sam"}, {"password": "[secret: secret_keyword]", "user": "sam"}),
        ({"outer": as_json({"key": "AKIAIOSFODNN7EXAMPLE"})}, {"outer": as_json({"key": "[secret: aws_access_key]"})}),
        (
            {"a\nAKIAIOSFODNN7EXAMPLE": "a key", "b": "line one\nAKIAIOSFODNN7EXAMPLE\tend"},
            {"a\n[secret: aws_access_key]": "a key", "b": "line one\n[secret: aws_access_key]\tend"},
        ),
        (  # a match across strings: each string is replaced, the list keeps its items
            {"pem": ["-----BEGIN RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEAx4UbaDzY", "-----END RSA PRIVATE KEY-----"]},
            {"pem": ["[secret: private_key]", "[secret: private_key]", "[secret: private_key]"]},
        ),
    ],
)
def test_a_secret_replaced_in_json_leaves_json_with_the_rest_of_the_value(
    value: dict[str, object], expected: dict[str, object]
) -> None:
    screened = REPLACING.screen_text(as_json(value), "internal", "content")
    assert json.loads(screened.content) == expected
    assert "hunter2xyz" not in screened.content and "AKIAIOSFODNN7EXAMPLE" not in screened.content
    assert [f.action for f in screened.screening.findings] == ["replaced"]


def with_label(field: str, value: str) -> MemoryWrite:
    """A write whose label ``field`` (dotted, as errors name it) is ``value``."""
    prov: dict[str, object] = {"writer": "test-agent", "written_at": utc_now(), "turn_id": "turn-1"}
    fields: dict[str, object] = {"provenance": prov}
    if field.startswith("provenance."):
        prov[field.removeprefix("provenance.")] = value
    elif field == "scope.id":
        fields["scope"] = {"type": "document", "id": value}
    else:
        fields[field] = value
    return memory_write(content="Sam prefers short answers", **fields)


LABEL_FIELDS = ["purpose", "key", "provenance.agent", "provenance.turn_id", "provenance.source_ref", "scope.id"]
CLEAR_OR_KEY = ["purpose", "key", "provenance.agent"]
REFERENCES = ["provenance.turn_id", "provenance.tool_call_id", "provenance.consent_ref", "provenance.source_ref"]


@pytest.mark.parametrize("field", LABEL_FIELDS)
@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("bot AKIAIOSFODNN7EXAMPLE", "aws_access_key"),
        ("ci-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", "github_token"),
        ("AKIAIOSF\u200bODNN7EXAMPLE", "aws_access_key"),
        ("AKIA\u034fIOSFODNN7EXAMPLE", "aws_access_key"),
        ("bot AKIA\ufe0fIOSFODNN7EXAMPLE", "aws_access_key"),
        ("langgraph:AKIAIOSFODNN7EXAMPLE/answer", "aws_access_key"),
    ],
)
def test_a_secret_in_any_label_is_refused_naming_the_field_also_under_replace(
    field: str, value: str, kind: str
) -> None:
    for screener in (SCREENER, REPLACING):
        with pytest.raises(LabelRefusedError) as info:
            admit_write(load_policy(), screener, with_label(field, value), utc_now())
        assert (info.value.field, info.value.category, info.value.kinds) == (field, "secret", (kind,))
        assert "a label is an identifier, not a place for data" in info.value.rule
        assert "AKIAIOSF" not in str(info.value) and "wWPw5k4a" not in str(info.value)


@pytest.mark.parametrize("field", CLEAR_OR_KEY)
@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("bot of jane.doe@example.com", "email_address"),
        ("langgraph:notes/call%20%2B44%2020%207946%200958", "phone_number"),
        ("card:4111111111111111", "payment_card_number"),
        ("DE89370400440532013000", "iban"),
        ("jürgen@bücher.de", "email_address"),
        ("sam.inv@exa\ufe0fmple.com", "email_address"),
    ],
)
def test_personal_data_in_a_clear_label_or_the_key_is_refused_naming_the_field(
    field: str, value: str, kind: str
) -> None:
    with pytest.raises(LabelRefusedError) as info:
        admit_write(load_policy(), SCREENER, with_label(field, value), utc_now())
    assert (info.value.field, info.value.category, info.value.kinds) == (field, "personal", (kind,))
    assert info.value.rule.startswith(f"holds personal data ({kind.replace('_', ' ')})")
    assert "put personal data in the content" in info.value.rule
    assert "jane.doe" not in str(info.value) and "7946" not in str(info.value) and "4111" not in str(info.value)


@pytest.mark.parametrize("field", REFERENCES)
def test_personal_data_in_a_reference_is_kept_sealed_and_records_nothing(field: str) -> None:
    admitted = admit_write(load_policy(), SCREENER, with_label(field, "<CAF1x9=q@mail.example.com>"), utc_now())
    assert admitted.screening.findings == () and admitted.cmd.sensitivity == "internal"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("purpose", "technical_writing"),
        ("key", "langgraph:prefs/answer_length"),
        ("key", "/memories/notes/2026-01-05.md"),
        ("key", "0190a5a0-4264-7466-8396-739692214448"),
        ("key", "35115d21-bbb4-4264-b466-739692214448"),
        ("provenance.agent", "claude-code/1.2.3"),
        ("provenance.tool_call_id", "toolu_01A09q90qw90lq917835lq9"),
        ("provenance.turn_id", "D12:7"),
        ("scope.id", "doc:handbook/v2"),
    ],
)
def test_ordinary_labels_pass(field: str, value: str) -> None:
    admitted = admit_write(load_policy(), SCREENER, with_label(field, value), utc_now())
    assert admitted.screening.findings == () and admitted.cmd.sensitivity == "internal"


def test_content_findings_are_put_down_to_the_content_when_the_labels_are_clean() -> None:
    cmd = with_label("provenance.agent", "support-bot")
    cmd = cmd.model_copy(update={"content": "Mail Sam at sam.jones@example.com", "sensitivity": "restricted"})
    cmd, screening = SCREENER.screen(cmd)
    assert [(f.kind, f.action) for f in screening.findings] == [("email_address", "kept")]


@pytest.mark.parametrize(
    ("labels", "field", "category"),
    [
        (
            erasure_labels(EraseMemories(subject_id="a", whole_subject=True, reason="ticket from sam@example.com")),
            "reason",
            "personal",
        ),
        (
            erasure_labels(
                EraseMemories(subject_id="a", whole_subject=True, reason="ticket AKIA\ufe0fIOSFODNN7EXAMPLE")
            ),
            "reason",
            "secret",
        ),
        (
            erasure_labels(
                EraseMemories(subject_id="a", whole_subject=True, reason="r", legal_basis="AKIAIOSFODNN7EXAMPLE")
            ),
            "legal_basis",
            "secret",
        ),
        (revocation_labels(RevokeConsent(subject_id="a", purpose="mails to sam@example.com")), "purpose", "personal"),
        (
            revocation_labels(RevokeConsent(subject_id="a", consent_ref="c-AKIAIOSFODNN7EXAMPLE")),
            "consent_ref",
            "secret",
        ),
        (
            redaction_labels(RedactMemory(memory_id="m", replacement="x", fields=("content", "sam@example.com"))),
            "fields[1]",
            "personal",
        ),
    ],
)
def test_the_labels_of_erasures_withdrawals_and_redactions_are_screened(
    labels: list[Label], field: str, category: str
) -> None:
    with pytest.raises(LabelRefusedError) as info:
        SCREENER.screen_labels(labels)
    assert (info.value.field, info.value.category) == (field, category)
    assert "sam@example.com" not in str(info.value) and "AKIAIOSF" not in str(info.value)


def test_an_erasure_by_source_is_never_refused_for_its_source_and_references_may_hold_personal_data() -> None:
    cmd = EraseMemories(subject_id="a", source_ref="mailto:sam@example.com", reason="subject asked")
    SCREENER.screen_labels(erasure_labels(cmd))
    SCREENER.screen_labels(revocation_labels(RevokeConsent(subject_id="a", consent_ref="consent of sam@example.com")))
    assert [label.field for label in erasure_labels(cmd)] == ["reason", "legal_basis"]


@pytest.mark.parametrize(
    ("field", "body_field"), [("purpose", "purpose"), ("key", "key"), ("provenance.agent", "agent")]
)
def test_a_refused_label_is_bad_input_to_the_gateway_not_a_conflict_of_state(field: str, body_field: str) -> None:
    for value in ("bot of jane.doe@example.com", "AKIAIOSFODNN7EXAMPLE"):
        with pytest.raises(LabelRefusedError) as info:
            admit_write(load_policy(), SCREENER, with_label(field, value), utc_now())
        err = translate(info.value)
        assert (type(err), err.field) == (InvalidRequestError, body_field)  # the HTTP body's name


@pytest.mark.parametrize(
    ("field", "value", "char"),
    [
        ("subject_id", "user-adv\u200b", "U+200B ZERO WIDTH SPACE at position 8"),
        ("purpose", "sup\u00adport", "U+00AD SOFT HYPHEN at position 3"),
        ("key", "employer\u2060", "U+2060 WORD JOINER at position 8"),
        ("provenance.agent", "\u202ebot", "U+202E RIGHT-TO-LEFT OVERRIDE at position 0"),
        ("subject_id", "sj\u034fx", "U+034F COMBINING GRAPHEME JOINER at position 2"),  # ignorable, not Cf
        ("purpose", "p\ufe0fq", "U+FE0F VARIATION SELECTOR-16 at position 1"),
        ("subject_id", "sj\u3164x", "U+3164 HANGUL FILLER at position 2"),
        ("subject_id", "sj\u2028x", "U+2028 LINE SEPARATOR at position 2"),
        ("key", "k\x85k", "U+0085 a control character at position 1"),  # C1 (NEL)
    ],
)
def test_an_identifier_with_an_invisible_format_character_is_refused_naming_it(
    field: str, value: str, char: str
) -> None:
    cmd = memory_write(subject=value) if field == "subject_id" else with_label(field, value)
    with pytest.raises(InvalidCommandError) as info:
        admit_write(load_policy(), SCREENER, cmd, utc_now())
    assert info.value.field == field
    assert info.value.rule == (
        f"must not contain invisible or control characters ({char}): it would read as another identifier"
    )


def test_a_reference_or_an_identifier_of_other_scripts_may_hold_what_it_holds() -> None:
    """References are sealed and erased with the memory, and are other systems' ids: not
    refused; letters of any script (no format character) pass."""
    admit_write(load_policy(), SCREENER, with_label("provenance.turn_id", "turn\u200b7"), utc_now())
    other_scripts = memory_write(subject="пользователь-7", purpose="サポート")
    admitted = admit_write(load_policy(), SCREENER, other_scripts, utc_now())
    assert admitted.cmd.subject_id == "пользователь-7"
