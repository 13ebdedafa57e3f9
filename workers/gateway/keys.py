"""API keys: bearer tokens bound to a principal, its scopes and its subject grants.

A token is ``mlk_<key id>_<secret>``, the secret 32 random bytes (256 bits) from the
operating system's CSPRNG in URL-safe base64. Only the SHA-256 of the whole token is
stored (``api_keys.token_sha256``); the token is shown once, when it is created. A fast
unsalted hash is enough for a secret of that entropy: NIST SP 800-63B (section 5.1.2.2,
look-up secrets) asks for an approved one-way function for secrets of at least 112 bits,
and a salted, slow key derivation only below that (which is what passwords need).

Every request looks its token up again, so a revoked key fails at once, in every API
process that shares the database.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from psycopg_pool import ConnectionPool

from contracts import utc_now
from ledger.principals import ALL_ACTIONS, Grant, Principal
from workers.gateway.errors import InvalidRequestError, NotFoundError, UnauthenticatedError

SCOPES = ("read", "write", "erase", "admin")
"""What a key may do: ``read``, ``write`` and ``erase`` memories of the subjects it is
granted; ``admin``: lag, versions, the audit log and the erasure report."""

_TOKEN = re.compile(r"^mlk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")


@dataclass(frozen=True)
class ApiKey:
    """One key as stored (never the token). ``subjects`` are shell-style patterns
    (``fnmatch``, as in the grants file); ``operator`` marks the local operator's key
    that ``memledger serve`` makes for the CLI of the data directory's owner."""

    key_id: str
    principal: str
    scopes: tuple[str, ...]
    subjects: tuple[str, ...]
    label: str | None
    operator: bool
    created_at: datetime
    revoked_at: datetime | None

    def as_principal(self) -> Principal:
        """The principal with the grants this key carries: its subjects, for the actions
        among its scopes (deny by default: a key without subjects may touch none)."""
        actions = tuple(a for a in ALL_ACTIONS if a in self.scopes)
        if not self.subjects or not actions:
            return Principal(id=self.principal)
        return Principal(id=self.principal, grants=(Grant(subjects=self.subjects, actions=actions),))


def token_hash(token: str) -> bytes:
    """SHA-256 of the token's UTF-8 bytes (32 bytes)."""
    return hashlib.sha256(token.encode("utf-8")).digest()


def new_token() -> tuple[str, str]:
    """A fresh ``(key id, token)``: 64 random bits of id, 256 of secret."""
    key_id = secrets.token_hex(8)
    return key_id, f"mlk_{key_id}_{secrets.token_urlsafe(32)}"


def _validate(principal: str, scopes: Sequence[str], subjects: Sequence[str]) -> None:
    if not principal.strip() or len(principal) > 512:
        raise InvalidRequestError("principal", "must be 1 to 512 characters")
    if not scopes:
        raise InvalidRequestError("scope", f"give at least one of {', '.join(SCOPES)}")
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown:
        raise InvalidRequestError("scope", f"unknown {', '.join(unknown)}; choose from {', '.join(SCOPES)}")
    if any(not s.strip() for s in subjects):
        raise InvalidRequestError("subject", "a subject pattern must not be empty")


class KeyStore:
    """The ``api_keys`` table (``workers.gateway.schema``)."""

    def __init__(self, pool: ConnectionPool) -> None:
        self._pool = pool

    def create(
        self,
        principal: str,
        scopes: Sequence[str],
        subjects: Sequence[str],
        label: str | None = None,
        operator: bool = False,
    ) -> tuple[ApiKey, str]:
        """Store a new key and return it with its token (shown once, never stored).

        Raises:
            InvalidRequestError: an empty principal, no or an unknown scope, an empty
                subject pattern.
        """
        _validate(principal, scopes, subjects)
        key_id, token = new_token()
        key = ApiKey(key_id, principal, tuple(dict.fromkeys(scopes)), tuple(subjects), label, operator, utc_now(), None)
        with self._pool.connection() as conn:
            conn.execute(
                "INSERT INTO api_keys (key_id, principal, token_sha256, scopes, subjects, label, operator, created_at)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    key.key_id,
                    key.principal,
                    token_hash(token),
                    list(key.scopes),
                    list(key.subjects),
                    label,
                    operator,
                    key.created_at,
                ),
            )
        return key, token

    def authenticate(self, token: str | None) -> ApiKey:
        """The live key of ``token``.

        Raises:
            UnauthenticatedError: no token, a token not of this form, unknown, or revoked.
        """
        if not token:
            raise UnauthenticatedError("authorization", "a bearer token is required (Authorization: Bearer mlk_...)")
        if _TOKEN.match(token) is None:
            raise UnauthenticatedError("authorization", "not an API key of this ledger")
        with self._pool.connection() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM api_keys WHERE token_sha256 = %s", (token_hash(token),)
            ).fetchone()
        if row is None:
            raise UnauthenticatedError("authorization", "unknown API key")
        key = _key(row)
        if key.revoked_at is not None:
            raise UnauthenticatedError("authorization", f"API key {key.key_id} was revoked")
        return key

    def list(self, include_revoked: bool = True) -> list[ApiKey]:
        """Every key, oldest first (the local operator's ones included)."""
        where = "" if include_revoked else " WHERE revoked_at IS NULL"
        with self._pool.connection() as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM api_keys{where} ORDER BY created_at, key_id").fetchall()
        return [_key(r) for r in rows]

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke ``key_id`` from now on (revoking it again keeps the first time).

        Raises:
            NotFoundError: no key has this id.
        """
        with self._pool.connection() as conn:
            row = conn.execute(
                f"UPDATE api_keys SET revoked_at = coalesce(revoked_at, %s) WHERE key_id = %s RETURNING {_COLUMNS}",
                (utc_now(), key_id),
            ).fetchone()
        if row is None:
            raise NotFoundError("key_id", f"no API key {key_id!r}")
        return _key(row)

    def revoke_operators(self) -> int:
        """Revoke every local operator's key still live (a ``serve`` that was killed left
        one); returns how many."""
        with self._pool.connection() as conn:
            cur = conn.execute(
                "UPDATE api_keys SET revoked_at = %s WHERE operator AND revoked_at IS NULL", (utc_now(),)
            )
            return cur.rowcount

    def any_live(self) -> bool:
        """Whether a key other than the local operator's exists and is not revoked."""
        with self._pool.connection() as conn:
            row = conn.execute("SELECT 1 FROM api_keys WHERE revoked_at IS NULL AND NOT operator LIMIT 1").fetchone()
        return row is not None


_COLUMNS = "key_id, principal, scopes, subjects, label, operator, created_at, revoked_at"


def _key(row: tuple[object, ...]) -> ApiKey:
    key_id, principal, scopes, subjects, label, operator, created_at, revoked_at = row
    return ApiKey(
        str(key_id),
        str(principal),
        tuple(scopes),  # type: ignore[arg-type]
        tuple(subjects),  # type: ignore[arg-type]
        None if label is None else str(label),
        bool(operator),
        created_at,  # type: ignore[arg-type]
        revoked_at,  # type: ignore[arg-type]
    )
