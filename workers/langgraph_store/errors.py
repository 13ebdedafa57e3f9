"""The error tree of the LangGraph store. Each error names the field and the rule it
broke, as the CLI prints them (``error: <field>: <rule>``); nothing was sent to the
ledger. A refusal of the server (a subject outside the key's grants, a rule of the
ledger, a store down) is raised as the Python client's error (``workers.client``:
``Forbidden``, ``InvalidRequest``, ``Unavailable``, ...), with its problem document."""

from __future__ import annotations

from langgraph.store.base import InvalidNamespaceError


class LedgerStoreError(Exception):
    """Base of every error raised by :mod:`workers.langgraph_store` itself: ``field``
    names the input, ``rule`` what was wrong with it."""

    def __init__(self, field: str, rule: str) -> None:
        super().__init__(f"{field}: {rule}")
        self.field = field
        self.rule = rule

    def at(self, place: str) -> LedgerStoreError:
        """The same error with its field inside ``place`` (``ops[1]``: ``ops[1].value``);
        itself for an empty ``place``."""
        return type(self)(f"{place}.{self.field}", self.rule) if place else self


class NamespaceError(LedgerStoreError, InvalidNamespaceError):
    """A namespace (or a key) that does not map onto the ledger: too short, a subject or
    a purpose the ledger would read differently, a key too long once encoded. Also a
    LangGraph ``InvalidNamespaceError``."""


class InvalidValueError(LedgerStoreError, ValueError):
    """A value that cannot be a memory's content: not a JSON object, not JSON at all, or
    larger than the store's limit; or a ``ttl``, a ``filter`` or a search bound the
    store cannot honour."""


class UnsupportedError(LedgerStoreError, NotImplementedError):
    """A configuration the ledger refuses by design: ``refresh_on_read`` (reading never
    extends a life), a TTL sweep of the store's own (``memledger sweep`` is the
    ledger's), or an ``index`` configuration (the ledger embeds with its own model)."""
