"""Crypto-shredding: per-memory data keys, wrapped by a master key, in Postgres.

Each memory's text and personal fields (``contracts.PersonalFields``) are sealed with
AES-256-GCM under its own data key (``key_id`` = ``memory_id``, or
``<memory_id>/<revision>`` after a redaction); fields that belong to the subject rather
than to one memory are sealed under a subject key (``subject:<uuid>``). Data keys are
stored wrapped (AES-256-GCM under the master key) in ``memory_keys``. One memory is
shredded by destroying its keys; a whole subject by destroying all of them. Destroying
a wrapped key makes every copy of what it sealed in the log, its replicas and its
backups unreadable. Content fingerprints are HMAC-SHA256
under a key derived from the master key with HKDF-SHA256 (RFC 5869), so probes can
look for a copy without keeping the content.

Master key rotation (``Keyring.rotate``) re-wraps every live data key under a new master
key in one transaction; destroyed keys stay destroyed (there is nothing to re-wrap). The
fingerprint key must not change with the master key (every stored fingerprint would stop
matching), so rotation stores it, wrapped under the new master key, in ``keyring_meta``;
``Keyring.attach`` loads it from there when present.
"""

from __future__ import annotations

import base64
import hmac
import os
import secrets
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import psycopg
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from contracts.memory import SealedText
from ledger import write_behind
from ledger.errors import CorruptContentError, KeyStoreError
from ledger.pgschema import ensure_schema

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS memory_keys (
    key_id        text PRIMARY KEY,
    subject_id    text NOT NULL,
    wrapped_key   bytea,
    created_at    timestamptz NOT NULL DEFAULT now(),
    destroyed_at  timestamptz
);
CREATE INDEX IF NOT EXISTS memory_keys_subject ON memory_keys (subject_id);
"""

META_SQL = """
CREATE TABLE IF NOT EXISTS keyring_meta (
    name        text PRIMARY KEY,
    wrapped     bytea NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
"""

_FINGERPRINT_META = "fingerprint"

_NONCE_BYTES = 12

DataKeys = Mapping[str, bytes | None]
"""Unwrapped data keys by key id (``Keyring.load_keys``): ``None`` for a destroyed key; a
key id that has no row is absent."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text.encode("ascii"))


def _aad(key_id: str, context: str | None) -> bytes:
    return key_id.encode() if context is None else f"{key_id}\x00{context}".encode()


def _decrypt(data_key: bytes, sealed: SealedText, context: str | None) -> str:
    try:
        plain = AESGCM(data_key).decrypt(_unb64(sealed.nonce), _unb64(sealed.ciphertext), _aad(sealed.key_id, context))
    except InvalidTag:
        raise CorruptContentError(sealed.key_id) from None
    return plain.decode("utf-8")


def parse_master_key(text: str) -> bytes:
    """Decode a master key given as URL-safe base64 of exactly 32 bytes.

    Raises:
        KeyStoreError: not base64, or not 32 bytes once decoded.
    """
    try:
        raw = _unb64(text.strip())
    except (ValueError, UnicodeEncodeError) as exc:
        raise KeyStoreError("master_key: must be URL-safe base64 of 32 random bytes") from exc
    if len(raw) != 32:
        raise KeyStoreError(f"master_key: must decode to 32 bytes, got {len(raw)}")
    return raw


def new_master_key() -> str:
    """A fresh master key, URL-safe base64 of 32 random bytes."""
    return _b64(secrets.token_bytes(32))


@dataclass(frozen=True)
class RotationReport:
    """What ``Keyring.rotate`` did: keys re-wrapped, keys found already under the new
    master key, destroyed keys (left as they are), and both master key ids."""

    old_master_key_id: str
    new_master_key_id: str
    rewrapped: int
    already_rotated: int
    destroyed: int


class Keyring:
    """Seals and opens memory text; creates, reads and destroys data keys.

    Methods take an open psycopg connection so that key changes commit in the same
    transaction as the ledger's other writes.
    """

    def __init__(self, master_key: bytes) -> None:
        if len(master_key) != 32:
            raise KeyStoreError("master_key: must be 32 bytes")
        self._master = AESGCM(master_key)
        self._fingerprint_key = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=None, info=b"memledger content fingerprint"
        ).derive(master_key)
        self._master_id = (
            HKDF(algorithm=hashes.SHA256(), length=8, salt=None, info=b"memledger master key id")
            .derive(master_key)
            .hex()
        )

    @staticmethod
    def install(conn: psycopg.Connection) -> None:
        """Create the key tables if missing."""
        ensure_schema(conn, "memory_keys", SCHEMA_SQL)
        ensure_schema(conn, "keyring_meta", META_SQL)

    def attach(self, conn: psycopg.Connection) -> None:
        """Use the fingerprint key stored by a past rotation, if any (else the one derived
        from this master key, which is what every ledger used before its first rotation).

        Raises:
            KeyStoreError: the stored fingerprint key does not open under this master key
                (the process runs with a master key the ledger no longer uses).
        """
        row = conn.execute("SELECT wrapped FROM keyring_meta WHERE name = %s", (_FINGERPRINT_META,)).fetchone()
        if row is not None:
            self._fingerprint_key = self._unwrap(bytes(row[0]), _FINGERPRINT_META)

    def rotate(self, conn: psycopg.Connection, new_master_key: bytes) -> RotationReport:
        """Re-wrap every live data key, and the fingerprint key, under ``new_master_key``,
        in the caller's transaction (commit it: all keys move, or none do). Destroyed keys
        are left destroyed. ``memory_keys`` is locked against writers (``EXCLUSIVE``: reads
        go on) until the transaction ends.

        Resumable: a key that this keyring cannot open but the new master key can was
        already rotated and is counted in ``already_rotated``; running it again with the
        same new key also re-wraps keys a process still on the old key created meanwhile.

        Raises:
            KeyStoreError: the new key is not 32 bytes or equals the current one, or a key
                opens under neither master key (names the key).
        """
        if len(new_master_key) != 32:
            raise KeyStoreError("new_master_key: must be 32 bytes")
        new = Keyring(new_master_key)
        if new.master_key_id == self.master_key_id:
            raise KeyStoreError("new_master_key: is the master key already in use")
        conn.execute("LOCK TABLE memory_keys IN EXCLUSIVE MODE")
        rewrapped = already = 0
        rows = conn.execute("SELECT key_id, wrapped_key FROM memory_keys WHERE wrapped_key IS NOT NULL").fetchall()
        for key_id, wrapped in rows:
            try:
                data_key = self._unwrap(bytes(wrapped), key_id)
            except KeyStoreError:
                new._unwrap(bytes(wrapped), key_id)  # raises when neither master key opens it
                already += 1
                continue
            conn.execute(
                "UPDATE memory_keys SET wrapped_key = %s WHERE key_id = %s", (new._wrap(data_key, key_id), key_id)
            )
            rewrapped += 1
        conn.execute(
            "INSERT INTO keyring_meta (name, wrapped) VALUES (%s, %s)"
            " ON CONFLICT (name) DO UPDATE SET wrapped = EXCLUDED.wrapped, updated_at = now()",
            (_FINGERPRINT_META, new._wrap(self._fingerprint_key, _FINGERPRINT_META)),
        )
        destroyed = conn.execute("SELECT count(*) FROM memory_keys WHERE wrapped_key IS NULL").fetchone()
        return RotationReport(
            old_master_key_id=self.master_key_id,
            new_master_key_id=new.master_key_id,
            rewrapped=rewrapped,
            already_rotated=already,
            destroyed=int(destroyed[0]) if destroyed else 0,
        )

    @property
    def master_key_id(self) -> str:
        """A public identifier of the master key (16 hex digits, HKDF-SHA256 of it): safe
        to print and log, it reveals nothing of the key."""
        return self._master_id

    def _wrap(self, secret: bytes, key_id: str) -> bytes:
        nonce = os.urandom(_NONCE_BYTES)
        return nonce + self._master.encrypt(nonce, secret, key_id.encode())

    def _unwrap(self, wrapped: bytes, key_id: str) -> bytes:
        try:
            return self._master.decrypt(wrapped[:_NONCE_BYTES], wrapped[_NONCE_BYTES:], key_id.encode())
        except InvalidTag:
            raise KeyStoreError(
                f"master_key: does not open data key {key_id!r}; is MEMLEDGER_MASTER_KEY the one the ledger uses?"
            ) from None

    def fingerprint(self, text: str) -> str:
        """HMAC-SHA256 (hex) of ``text`` under the fingerprint key."""
        return hmac.digest(self._fingerprint_key, text.encode("utf-8"), "sha256").hex()  # one call, in C

    def seal(
        self,
        conn: psycopg.Connection,
        subject_id: str,
        key_id: str,
        text: str,
        context: str | None = None,
        fresh: bool = False,
    ) -> SealedText:
        """Encrypt ``text`` under the data key ``key_id``, creating the key if needed. The
        associated data is the key id (and ``context``, when given: text sealed with one
        context does not open with another, e.g. ``contracts.PERSONAL_CONTEXT``).

        ``fresh``: the caller knows the key does not exist yet (a new memory's id): it is
        created without reading the key store first, and its row is held back while a
        command defers its inserts (``ledger.write_behind``). A key the running command
        created or read is not read again.

        Raises:
            KeyStoreError: the key exists but was destroyed (the memory was erased).
        """
        held = write_behind.active(conn)
        data_key = None if fresh else self.load_keys(conn, [key_id]).get(key_id)
        if data_key is None:
            data_key = AESGCM.generate_key(bit_length=256)
            wrapped = self._wrap(data_key, key_id)
            if fresh:
                write_behind.insert(
                    conn, "memory_keys", ("key_id", "subject_id", "wrapped_key"), (key_id, subject_id, wrapped)
                )
            else:
                write_behind.barrier(conn)
                inserted = conn.execute(
                    "INSERT INTO memory_keys (key_id, subject_id, wrapped_key) VALUES (%s, %s, %s)"
                    " ON CONFLICT (key_id) DO NOTHING RETURNING key_id",
                    (key_id, subject_id, wrapped),
                ).fetchone()
                if inserted is None:
                    raise KeyStoreError(f"key {key_id!r} was destroyed: its memory was erased")
        if held is not None:
            held.data_keys[key_id] = data_key
        return self.seal_with(data_key, key_id, text, context)

    @staticmethod
    def seal_with(data_key: bytes, key_id: str, text: str, context: str | None = None) -> SealedText:
        """Encrypt ``text`` under ``data_key`` (the key ``key_id``): AES-256-GCM, a random
        96-bit nonce, the key id (and ``context``) as associated data."""
        nonce = os.urandom(_NONCE_BYTES)
        ciphertext = AESGCM(data_key).encrypt(nonce, text.encode("utf-8"), _aad(key_id, context))
        # made here, well-formed by construction (a 12-byte nonce, a tagged ciphertext): not validated again
        return SealedText.model_construct(key_id=key_id, nonce=_b64(nonce), ciphertext=_b64(ciphertext))

    def open(self, conn: psycopg.Connection, sealed: SealedText, context: str | None = None) -> str | None:
        """Decrypt sealed text (sealed with the same ``context``); ``None`` when its data
        key has been destroyed or never existed. For many texts, :meth:`load_keys` once
        and :meth:`open_with` each.

        Raises:
            CorruptContentError: the ciphertext does not authenticate under its key.
        """
        return self.open_with(self.load_keys(conn, [sealed.key_id]), sealed, context)

    def load_keys(self, conn: psycopg.Connection, key_ids: Sequence[str]) -> DataKeys:
        """The data keys ``key_ids``, unwrapped: key id -> 32-byte data key, or ``None`` for
        a destroyed key; an id without a row is absent from the result. The keys the running
        command holds (``ledger.write_behind``: created or read by it, perhaps not inserted
        yet) are taken from it; the others are read in ONE query (for a batch of events or
        texts, instead of one round trip each), after the command's held rows are sent.

        Raises:
            KeyStoreError: a key does not open under this master key (names the key).
        """
        held = write_behind.active(conn)
        keys: dict[str, bytes | None] = {}
        if held is not None:
            keys.update((k, held.data_keys[k]) for k in key_ids if k in held.data_keys)
        ids = [k for k in dict.fromkeys(key_ids) if k not in keys]
        if ids:
            write_behind.barrier(conn)
            rows = conn.execute("SELECT key_id, wrapped_key FROM memory_keys WHERE key_id = ANY(%s)", (ids,))
            keys.update((str(k), None if w is None else self._unwrap(bytes(w), str(k))) for k, w in rows)
        return keys

    def open_with(self, keys: DataKeys, sealed: SealedText, context: str | None = None) -> str | None:
        """``open`` with keys loaded by :meth:`load_keys` (no I/O): ``None`` when the key is
        destroyed or absent from ``keys``.

        Raises:
            CorruptContentError: the ciphertext does not authenticate under its key.
        """
        data_key = keys.get(sealed.key_id)
        return None if data_key is None else _decrypt(data_key, sealed, context)

    def subject_key_id(self, conn: psycopg.Connection, subject_id: str) -> str:
        """The id of the subject's live data key (``subject:<uuid>``), for fields that
        belong to the subject rather than to one memory (a withdrawn consent reference).
        A new one is made when the subject has none (first use, or after the whole
        subject was erased); seal with it through :meth:`seal`."""
        write_behind.barrier(conn)
        row = conn.execute(
            "SELECT key_id FROM memory_keys WHERE subject_id = %s AND key_id LIKE 'subject:%%'"
            " AND wrapped_key IS NOT NULL ORDER BY created_at DESC LIMIT 1",
            (subject_id,),
        ).fetchone()
        return str(row[0]) if row is not None else f"subject:{uuid.uuid4()}"

    def destroy_subject_keys(self, conn: psycopg.Connection, subject_id: str) -> int:
        """Destroy every data key of the subject (erasure of the whole subject): its
        subject-level keys and the keys of all its memories, whether or not the ledger's
        heads still know them (every key row records its subject). Returns how many live
        keys were destroyed."""
        write_behind.barrier(conn)
        self._forget_cached(conn)
        return conn.execute(
            "UPDATE memory_keys SET wrapped_key = NULL, destroyed_at = now()"
            " WHERE subject_id = %s AND wrapped_key IS NOT NULL",
            (subject_id,),
        ).rowcount

    def destroy(self, conn: psycopg.Connection, memory_ids: list[str], keep: str | None = None) -> int:
        """Destroy every data key of the given memories (``<memory_id>`` and the
        per-redaction ``<memory_id>/<revision>`` keys), except ``keep``: the wrapped key
        bytes are overwritten with NULL. Returns how many live keys were destroyed;
        destroying twice is harmless."""
        write_behind.barrier(conn)
        cur = conn.execute(
            "UPDATE memory_keys SET wrapped_key = NULL, destroyed_at = now()"
            " WHERE (key_id = ANY(%s) OR split_part(key_id, '/', 1) = ANY(%s)) AND wrapped_key IS NOT NULL"
            " AND key_id IS DISTINCT FROM %s",
            (memory_ids, memory_ids, keep),
        )
        self._forget_cached(conn)
        return cur.rowcount

    @staticmethod
    def _forget_cached(conn: psycopg.Connection) -> None:
        """Keys are being destroyed: the running command reads keys from the store again."""
        held = write_behind.active(conn)
        if held is not None:
            held.data_keys.clear()

    def key_exists(self, conn: psycopg.Connection, key_id: str) -> bool:
        """True when a row for ``key_id`` exists (live or destroyed)."""
        write_behind.barrier(conn)
        return conn.execute("SELECT 1 FROM memory_keys WHERE key_id = %s", (key_id,)).fetchone() is not None

    def is_destroyed(self, conn: psycopg.Connection, key_id: str) -> bool:
        """True when ``key_id`` exists and was destroyed."""
        write_behind.barrier(conn)
        row = conn.execute("SELECT wrapped_key IS NULL FROM memory_keys WHERE key_id = %s", (key_id,)).fetchone()
        return bool(row and row[0])
