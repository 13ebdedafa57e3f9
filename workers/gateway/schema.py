"""The gateway's tables in the ledger's PostgreSQL, shared by every API process:
API keys (only hashes of the tokens), the audit log and the idempotency records."""

from __future__ import annotations

import psycopg

from ledger.pgschema import ensure_schema

SCHEMA_SQL = """
CREATE TABLE IF NOT EXISTS api_keys (
    key_id        text PRIMARY KEY,
    principal     text NOT NULL,
    token_sha256  bytea NOT NULL UNIQUE,
    scopes        text[] NOT NULL,
    subjects      text[] NOT NULL,
    label         text,
    operator      boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL,
    revoked_at    timestamptz
);
CREATE TABLE IF NOT EXISTS audit_log (
    id          bigserial PRIMARY KEY,
    at          timestamptz NOT NULL,
    principal   text,
    key_id      text,
    subject_id  text,
    route       text NOT NULL,
    outcome     text NOT NULL,
    reason      text NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_log_subject ON audit_log (subject_id, id);
CREATE TABLE IF NOT EXISTS idempotency_keys (
    principal    text NOT NULL,
    idem_key     text NOT NULL,
    fingerprint  text NOT NULL,
    response     jsonb NOT NULL,
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (principal, idem_key)
);
CREATE TABLE IF NOT EXISTS gateway_schema_v1 (applied_at timestamptz NOT NULL DEFAULT now());
"""


def install(conn: psycopg.Connection) -> None:
    """Create the gateway's tables if missing (``api_keys``, ``audit_log``, ``idempotency_keys``)."""
    ensure_schema(conn, "gateway_schema_v1", SCHEMA_SQL)
