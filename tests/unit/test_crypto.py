"""Crypto-shredding against a real Postgres: seal/open, destroy, master keys, fingerprints."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from psycopg_pool import ConnectionPool

from contracts import SealedText
from ledger.crypto import Keyring, new_master_key, parse_master_key
from ledger.errors import CorruptContentError, KeyStoreError

pytestmark = pytest.mark.integration

TEXTS = ["likes green tea", "", "ünïcödé ✓ 中文 🙂", "y" * 300, "line one\nline two\x00nul"]


@pytest.fixture
def installed(pool: ConnectionPool) -> ConnectionPool:
    with pool.connection() as conn:
        Keyring.install(conn)
        Keyring.install(conn)  # idempotent
    return pool


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text.encode("ascii"))


# --------------------------------------------------------------------------- seal / open


@pytest.mark.parametrize("text", TEXTS, ids=["ascii", "empty", "unicode", "300-chars", "control"])
def test_seal_open_round_trip(installed: ConnectionPool, keyring: Keyring, text: str) -> None:
    with installed.connection() as conn:
        sealed = keyring.seal(conn, "user-1", "m-1", text)
    assert isinstance(sealed, SealedText)
    assert sealed.key_id == "m-1"
    assert len(_unb64(sealed.nonce)) == 12
    ciphertext = _unb64(sealed.ciphertext)
    assert len(ciphertext) == len(text.encode("utf-8")) + 16  # AES-GCM tag
    if text:
        assert text.encode("utf-8") not in ciphertext
        assert text not in sealed.model_dump_json()
    with installed.connection() as conn:
        assert keyring.open(conn, sealed) == text


@pytest.mark.parametrize(
    ("char", "length"),
    [("x", 368), ("x", 369), ("x", 1_000), ("x", 65_536), ("🙂", 65_536)],
    ids=["368", "369", "1000", "65536", "65536-4-byte"],
)
def test_seal_accepts_every_content_length_a_command_allows(
    installed: ConnectionPool, keyring: Keyring, char: str, length: int
) -> None:
    """Regression: sealing failed for text over 368 UTF-8 bytes (SealedText capped ciphertext at 512)."""
    text = char * length
    with installed.connection() as conn:
        sealed = keyring.seal(conn, "user-1", f"m-{length}", text)
        assert keyring.open(conn, sealed) == text


def test_key_row_holds_no_clear_data_key(installed: ConnectionPool, keyring: Keyring) -> None:
    with installed.connection() as conn:
        keyring.seal(conn, "user-1", "m-1", "secret")
        row = conn.execute(
            "SELECT subject_id, wrapped_key, destroyed_at FROM memory_keys WHERE key_id = 'm-1'"
        ).fetchone()
    assert row is not None
    subject_id, wrapped, destroyed_at = row
    assert subject_id == "user-1"
    assert destroyed_at is None
    assert len(bytes(wrapped)) == 12 + 32 + 16  # nonce + wrapped 256-bit key + tag


def test_sealing_twice_reuses_the_key_with_fresh_nonces(installed: ConnectionPool, keyring: Keyring) -> None:
    with installed.connection() as conn:
        first = keyring.seal(conn, "user-1", "m-1", "same text")
        second = keyring.seal(conn, "user-1", "m-1", "same text")
        count = conn.execute("SELECT count(*) FROM memory_keys WHERE key_id = 'm-1'").fetchone()
    assert count == (1,)
    assert first.nonce != second.nonce
    assert first.ciphertext != second.ciphertext
    with installed.connection() as conn:
        assert keyring.open(conn, first) == keyring.open(conn, second) == "same text"


def test_each_memory_has_its_own_key(installed: ConnectionPool, keyring: Keyring) -> None:
    with installed.connection() as conn:
        a = keyring.seal(conn, "user-1", "m-a", "text a")
        b = keyring.seal(conn, "user-1", "m-b", "text b")
        wrapped = conn.execute("SELECT key_id, wrapped_key FROM memory_keys ORDER BY key_id").fetchall()
    assert [k for k, _ in wrapped] == ["m-a", "m-b"]
    assert bytes(wrapped[0][1]) != bytes(wrapped[1][1])
    # sealed text bound to its key id: relabelling it to another memory's key does not open
    forged = SealedText(key_id="m-b", nonce=a.nonce, ciphertext=a.ciphertext)
    with installed.connection() as conn:
        assert keyring.open(conn, b) == "text b"
        with pytest.raises(CorruptContentError) as info:
            keyring.open(conn, forged)
    assert info.value.key_id == "m-b"
    assert "m-b" in str(info.value)


def _flip(text: str, index: int) -> str:
    """``text`` (URL-safe base64) with one bit of byte ``index`` flipped."""
    data = bytearray(_unb64(text))
    data[index] ^= 0x01
    return base64.urlsafe_b64encode(bytes(data)).decode("ascii")


@pytest.mark.parametrize("index", [0, 7, -16, -1], ids=["first-byte", "body", "tag-start", "tag-end"])
def test_open_of_a_tampered_ciphertext_raises_corrupt_content(
    installed: ConnectionPool, keyring: Keyring, index: int
) -> None:
    with installed.connection() as conn:
        sealed = keyring.seal(conn, "user-1", "m-1", "likes green tea")
    tampered = SealedText(key_id=sealed.key_id, nonce=sealed.nonce, ciphertext=_flip(sealed.ciphertext, index))
    with installed.connection() as conn:
        with pytest.raises(CorruptContentError) as info:
            keyring.open(conn, tampered)
        assert keyring.open(conn, sealed) == "likes green tea", "the key itself is untouched"
    assert info.value.key_id == "m-1"
    assert "likes green tea" not in str(info.value)


def test_open_with_a_tampered_nonce_raises_corrupt_content(installed: ConnectionPool, keyring: Keyring) -> None:
    with installed.connection() as conn:
        sealed = keyring.seal(conn, "user-1", "m-1", "likes green tea")
        tampered = SealedText(key_id=sealed.key_id, nonce=_flip(sealed.nonce, 0), ciphertext=sealed.ciphertext)
        with pytest.raises(CorruptContentError):
            keyring.open(conn, tampered)


def test_open_of_an_unknown_key_is_none(installed: ConnectionPool, keyring: Keyring) -> None:
    sealed = SealedText(key_id="never-created", nonce="AAAAAAAAAAAAAAAA", ciphertext="AAAAAAAAAAAAAAAAAAAAAA==")
    with installed.connection() as conn:
        assert keyring.open(conn, sealed) is None
        assert not keyring.is_destroyed(conn, "never-created")


def test_seal_rolls_back_with_its_transaction(installed: ConnectionPool, keyring: Keyring) -> None:
    """Keys are written on the caller's connection: a rolled-back transaction leaves no key."""

    class Abort(Exception):
        pass

    with installed.connection() as conn, pytest.raises(Abort):
        with conn.transaction():
            keyring.seal(conn, "user-1", "m-rolled-back", "text")
            raise Abort
    with installed.connection() as conn:
        row = conn.execute("SELECT count(*) FROM memory_keys WHERE key_id = 'm-rolled-back'").fetchone()
    assert row == (0,)


# --------------------------------------------------------------------------- destroy


def test_destroy_makes_open_return_none_and_seal_raise(installed: ConnectionPool, keyring: Keyring) -> None:
    with installed.connection() as conn:
        sealed = keyring.seal(conn, "user-1", "m-1", "my phone number")
        other = keyring.seal(conn, "user-1", "m-2", "kept")
    with installed.connection() as conn:
        assert keyring.destroy(conn, ["m-1"]) == 1
    with installed.connection() as conn:
        assert keyring.open(conn, sealed) is None
        assert keyring.is_destroyed(conn, "m-1")
        assert not keyring.is_destroyed(conn, "m-2")
        assert keyring.open(conn, other) == "kept"
        row = conn.execute("SELECT wrapped_key, destroyed_at FROM memory_keys WHERE key_id = 'm-1'").fetchone()
    assert row is not None
    assert row[0] is None, "the wrapped key bytes must be gone"
    assert row[1] is not None
    with installed.connection() as conn, pytest.raises(KeyStoreError) as info:
        keyring.seal(conn, "user-1", "m-1", "written again")
    assert "m-1" in str(info.value)


def test_destroy_twice_is_harmless_and_counts_live_keys(installed: ConnectionPool, keyring: Keyring) -> None:
    with installed.connection() as conn:
        for key_id in ("m-1", "m-2", "m-3"):
            keyring.seal(conn, "user-1", key_id, key_id)
    with installed.connection() as conn:
        assert keyring.destroy(conn, ["m-1", "m-2", "unknown"]) == 2
        assert keyring.destroy(conn, ["m-1", "m-2"]) == 0
        assert keyring.destroy(conn, []) == 0
        assert keyring.destroy(conn, ["m-2", "m-3"]) == 1
        assert all(keyring.is_destroyed(conn, k) for k in ("m-1", "m-2", "m-3"))


# --------------------------------------------------------------------------- master keys


def test_a_different_master_key_cannot_open(installed: ConnectionPool, keyring: Keyring) -> None:
    with installed.connection() as conn:
        sealed = keyring.seal(conn, "user-1", "m-1", "secret")
    intruder = Keyring(os.urandom(32))
    with installed.connection() as conn, pytest.raises(KeyStoreError) as info:
        intruder.open(conn, sealed)
    message = str(info.value)
    assert message.startswith("master_key:")
    assert "m-1" in message
    assert "secret" not in message
    with installed.connection() as conn:
        assert keyring.open(conn, sealed) == "secret"


def test_a_damaged_wrapped_key_raises_key_store_error(installed: ConnectionPool, keyring: Keyring) -> None:
    with installed.connection() as conn:
        sealed = keyring.seal(conn, "user-1", "m-1", "secret")
        row = conn.execute("SELECT wrapped_key FROM memory_keys WHERE key_id = 'm-1'").fetchone()
        assert row is not None
        wrapped = bytearray(row[0])
        wrapped[20] ^= 0x01  # inside the wrapped data key
        conn.execute("UPDATE memory_keys SET wrapped_key = %s WHERE key_id = 'm-1'", (bytes(wrapped),))
    with installed.connection() as conn, pytest.raises(KeyStoreError) as info:
        keyring.open(conn, sealed)
    assert "m-1" in str(info.value)


def test_the_same_master_key_in_a_new_keyring_opens(installed: ConnectionPool) -> None:
    master = os.urandom(32)
    with installed.connection() as conn:
        sealed = Keyring(master).seal(conn, "user-1", "m-1", "survives a restart")
    with installed.connection() as conn:
        assert Keyring(master).open(conn, sealed) == "survives a restart"


@pytest.mark.parametrize("length", [0, 16, 31, 33, 64])
def test_keyring_needs_a_32_byte_master_key(length: int) -> None:
    with pytest.raises(KeyStoreError) as info:
        Keyring(b"k" * length)
    assert "master_key" in str(info.value)


def test_parse_master_key_round_trip() -> None:
    text = new_master_key()
    raw = parse_master_key(text)
    assert len(raw) == 32
    assert base64.urlsafe_b64encode(raw).decode() == text
    assert parse_master_key(f"  {text}\n") == raw
    assert new_master_key() != text


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("", "got 0"),
        ("c2hvcnQ=", "got 5"),  # b"short"
        (base64.urlsafe_b64encode(b"k" * 31).decode(), "got 31"),
        (base64.urlsafe_b64encode(b"k" * 33).decode(), "got 33"),
        ("abc", "base64"),  # bad padding
        ("clé-non-ascii", "base64"),
    ],
    ids=["empty", "short", "31-bytes", "33-bytes", "bad-padding", "non-ascii"],
)
def test_parse_master_key_errors(text: str, detail: str) -> None:
    with pytest.raises(KeyStoreError) as info:
        parse_master_key(text)
    message = str(info.value)
    assert message.startswith("master_key:")
    assert detail in message
    assert "32" in message


# --------------------------------------------------------------------------- fingerprints


def test_fingerprint_is_stable_and_keyed() -> None:
    master = os.urandom(32)
    a, a_again, b = Keyring(master), Keyring(master), Keyring(os.urandom(32))
    fingerprint = a.fingerprint("likes green tea")
    assert len(fingerprint) == 64 and int(fingerprint, 16) >= 0
    assert a.fingerprint("likes green tea") == fingerprint
    assert a_again.fingerprint("likes green tea") == fingerprint
    assert b.fingerprint("likes green tea") != fingerprint
    assert a.fingerprint("likes green tea.") != fingerprint
    assert fingerprint != hashlib.sha256(b"likes green tea").hexdigest(), "an unkeyed hash would let anyone probe"


def test_fingerprint_is_hmac_sha256_under_an_hkdf_derived_key() -> None:
    master = os.urandom(32)
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"memledger content fingerprint").derive(
        master
    )
    text = "ünïcödé ✓"
    expected = hmac.new(derived, text.encode("utf-8"), hashlib.sha256).hexdigest()
    assert Keyring(master).fingerprint(text) == expected
    # not keyed with the master key itself
    assert Keyring(master).fingerprint(text) != hmac.new(master, text.encode(), hashlib.sha256).hexdigest()
