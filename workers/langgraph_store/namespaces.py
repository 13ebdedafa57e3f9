"""How a LangGraph namespace and key map onto the ledger's memories.

``namespace[0]`` is the subject (whose memory it is: the server checks it against the
API key's grants), ``namespace[1]`` the purpose (what the memory may be used for), and
the rest of the namespace, with the item's key, is the memory's ``key``:

    ("user-42", "support", "prefs"), "answer_length"  ->  subject user-42, purpose support,
                                                          key "langgraph:prefs/answer_length"

The key is the ledger's unit of supersession, so one item is one slot (subject,
purpose, the subject's own scope, key): a put of an existing item supersedes its live
memory. Each part is written with ``%``, ``/``, white space and control characters
percent-encoded (UTF-8), so the parts can be read back exactly and the ledger (which
strips white space from a key and refuses control characters) keeps the key as given.
``KEY_PREFIX`` keeps the store's slots apart from keys written by other ways in.

Every revision of an item carries the same ``source_ref``, ``langgraph-item:`` and a
SHA-256 digest of the purpose and key: a delete erases by that source, which reaches
every revision in the ledger's own state, and the erasure request keeps the digest, not
the key.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote, unquote

from contracts.types import MAX_ID_BYTES, UNENCODABLE, identifier_problem
from workers.langgraph_store.errors import NamespaceError

KEY_PREFIX = "langgraph:"
"""Prefix of the ledger key of every item the store writes."""

SOURCE_PREFIX = "langgraph-item:"
"""Prefix of the ``source_ref`` every revision of an item carries."""


WILDCARD = "*"

_ESCAPED = re.compile(r"[%/\s\x00-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class Address:
    """Where an item lives in the ledger: ``subject_id``, ``purpose`` and ``key`` (the
    ledger key, ``KEY_PREFIX`` included)."""

    subject_id: str
    purpose: str
    key: str

    @property
    def source_ref(self) -> str:
        """The ``source_ref`` of every revision of the item."""
        digest = hashlib.sha256(json.dumps([self.purpose, self.key]).encode("utf-8")).hexdigest()[:32]
        return SOURCE_PREFIX + digest


@dataclass(frozen=True)
class Prefix:
    """What a namespace prefix narrows a listing to: the subject, the purpose (``None``:
    every purpose) and the start of the ledger key."""

    subject_id: str
    purpose: str | None
    key_prefix: str


def encode(part: str) -> str:
    """``part`` with ``%``, ``/``, white space and control characters percent-encoded."""
    return _ESCAPED.sub(lambda m: quote(m.group(0), safe=""), part)


def decode(part: str) -> str:
    """The inverse of ``encode``."""
    return unquote(part, errors="strict")


def address(namespace: Sequence[str], key: str) -> Address:
    """The ledger address of the item ``key`` in ``namespace``.

    Raises:
        NamespaceError: a namespace of fewer than two labels (field ``namespace``), a
            subject or purpose the ledger would read differently (``namespace[0]``,
            ``namespace[1]``), a key that is not a string, empty, or too long once
            encoded (``key``).
    """
    if len(namespace) < 2:
        raise NamespaceError(
            "namespace",
            f"{tuple(namespace)!r} must name at least a subject and a purpose: (subject_id, purpose, ...)",
        )
    subject, purpose = _label(namespace, 0, "subject"), _label(namespace, 1, "purpose")
    if not isinstance(key, str):  # BaseStore's methods pass str(key); an op given to batch may not
        raise NamespaceError("key", f"must be a string, not {type(key).__name__}")
    if not key:
        raise NamespaceError("key", "must not be empty")
    ledger_key = KEY_PREFIX + "/".join(encode(p) for p in (*namespace[2:], key))
    if utf8_bytes(ledger_key, "key") > MAX_ID_BYTES:
        raise NamespaceError(
            "key",
            f"the namespace below the purpose and the key take {utf8_bytes(ledger_key, 'key')} bytes as the"
            f" memory's key ({KEY_PREFIX!r}, the parts percent-encoded, joined by '/'); at most {MAX_ID_BYTES}",
        )
    return Address(subject, purpose, ledger_key)


def prefix(namespace_prefix: Sequence[str], *, field: str = "namespace_prefix", need_purpose: bool = False) -> Prefix:
    """What ``namespace_prefix`` (no wildcards) narrows a listing to.

    Raises:
        NamespaceError: no subject (or, with ``need_purpose``, no purpose) in it, or a
            label the ledger would read differently.
    """
    if not namespace_prefix or (need_purpose and len(namespace_prefix) < 2):
        need = "the subject and the purpose" if need_purpose else "the subject"
        raise NamespaceError(field, f"{tuple(namespace_prefix)!r} must start with {need}: (subject_id, purpose, ...)")
    subject = _label(namespace_prefix, 0, "subject", field)
    purpose = _label(namespace_prefix, 1, "purpose", field) if len(namespace_prefix) > 1 else None
    for i in range(2, len(namespace_prefix)):
        utf8_bytes(namespace_prefix[i], f"{field}[{i}]")  # a lone surrogate cannot be sent
    return Prefix(subject, purpose, KEY_PREFIX + "".join(encode(p) + "/" for p in namespace_prefix[2:]))


def pattern_prefix(path: Sequence[str]) -> Prefix:
    """What a ``list_namespaces`` prefix pattern (``*`` matches any label) narrows a
    listing to: the subject, the purpose unless it is a wildcard, and the labels after
    it up to the first wildcard.

    Raises:
        NamespaceError: a pattern that does not name the subject first (field ``prefix``).
    """
    if not path or path[0] == WILDCARD:
        raise NamespaceError("prefix", f"{tuple(path)!r} must name the subject first: (subject_id, ...)")
    subject = _label(path, 0, "subject", "prefix")
    purpose = None if len(path) < 2 or path[1] == WILDCARD else _label(path, 1, "purpose", "prefix")
    fixed: list[str] = []
    for i, label in enumerate(path[2:], 2):
        if label == WILDCARD:
            break
        utf8_bytes(label, f"prefix[{i}]")  # a lone surrogate cannot be sent
        fixed.append(label)
    return Prefix(subject, purpose, KEY_PREFIX + "".join(encode(p) + "/" for p in fixed))


def item_of(subject_id: str, purpose: str, ledger_key: str | None) -> tuple[tuple[str, ...], str] | None:
    """The namespace and key of the item stored under ``ledger_key``, or ``None`` for a
    key the store did not write (another way in)."""
    if ledger_key is None or not ledger_key.startswith(KEY_PREFIX):
        return None
    parts = ledger_key[len(KEY_PREFIX) :].split("/")
    try:
        decoded = [decode(p) for p in parts]
    except UnicodeDecodeError:
        return None
    if any(not p for p in decoded) or [encode(p) for p in decoded] != parts:
        return None  # not in the store's own spelling
    return (subject_id, purpose, *decoded[:-1]), decoded[-1]


def matches(namespace: Sequence[str], path: Sequence[str], match_type: str) -> bool:
    """Whether ``namespace`` starts (``prefix``) or ends (``suffix``) with ``path``,
    label by label, ``*`` matching any one label (LangGraph's ``MatchCondition``)."""
    if len(path) > len(namespace):
        return False
    if match_type == "prefix":
        return all(p in (WILDCARD, n) for n, p in zip(namespace, path, strict=False))
    return all(p in (WILDCARD, n) for n, p in zip(reversed(namespace), reversed(path), strict=False))


def utf8_bytes(text: str, field: str) -> int:
    """The length of ``text`` in bytes of UTF-8.

    Raises:
        NamespaceError: ``field``: ``text`` holds a lone surrogate (no UTF-8 encoding).
    """
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise NamespaceError(field, UNENCODABLE) from None


def label_problem(label: str) -> str | None:
    """The rule that ``label``, passed to the ledger unchanged as an identifier (a namespace's
    subject or purpose, an agent), breaks, or ``None``: the ledger's identifier rule
    (``contracts.types.identifier_problem``) and no white space at either end (the ledger
    strips it, so the label read back would not be the one put)."""
    if label != label.strip():
        return "must not start or end with white space"
    return identifier_problem(label)


def _label(namespace: Sequence[str], i: int, what: str, field: str = "namespace") -> str:
    label = namespace[i]
    problem = label_problem(label)
    if problem is not None:
        raise NamespaceError(f"{field}[{i}]", f"the {what} {problem}")
    return label
