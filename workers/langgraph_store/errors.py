"""The error tree of the LangGraph store. Each ``LedgerStoreError`` names the field and
the rule it broke, as the CLI prints them (``error: <field>: <rule>``); nothing was sent
to the ledger. A refusal of the server (a subject outside the key's grants, a rule of the
ledger, a store down) is raised as the Python client's error (``workers.client``:
``Forbidden``, ``InvalidRequest``, ``Unavailable``, ...), with its problem document, when
nothing of the batch was written before it; after a write of the batch took effect, as a
``BatchInterruptedError`` holding that error and what was written and what was not."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from langgraph.store.base import InvalidNamespaceError

from workers.client import LedgerClientError


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


LISTED = 5
"""Operations of each kind a ``BatchInterruptedError``'s message names with their namespace
and key (its index spans name them all)."""


class BatchInterruptedError(LedgerClientError):
    """A batch stopped part-way by the server's refusal of a request (or a request that
    could not be sent) after some of its writes had taken effect. ``error`` is that
    refusal (``workers.client.ApiError``, its field in the operation's place:
    ``ops[3].value``) or the ``workers.client.TransportError`` (also the ``__cause__``);
    ``at`` the index of the operation it stopped at. The indices in the batch's ``ops``
    of its puts and deletes: ``written`` took effect; ``not_written`` did not (the refused
    request's and every later one's, and a request that never reached the server);
    ``in_doubt`` were in the request whose answer was lost (``TransportError`` with
    ``outcome_unknown``: written or not), and a put or a delete may be sent again.
    ``items`` maps each of those indices to the operation's namespace and key. The reads
    (get, search, list_namespaces) write nothing and are in none of them; their results
    are lost with the batch's."""

    def __init__(
        self,
        error: LedgerClientError,
        at: int,
        written: Sequence[int],
        not_written: Sequence[int],
        in_doubt: Sequence[int],
        items: Mapping[int, tuple[tuple[str, ...], str]],
    ) -> None:
        self.error, self.at = error, at
        self.written, self.not_written, self.in_doubt = tuple(written), tuple(not_written), tuple(in_doubt)
        self.items = dict(items)
        kinds = (("written", self.written), ("in doubt", self.in_doubt), ("not written", self.not_written))
        parts = [f"{name} {self._listed(found)}" for name, found in kinds if found]
        super().__init__(f"the batch stopped at ops[{at}] ({error}); " + "; ".join(parts))

    def _listed(self, found: tuple[int, ...]) -> str:
        named = ", ".join(f"{self.items[i][0]!r} {self.items[i][1]!r}" for i in found[:LISTED])
        more = f", and {len(found) - LISTED} more" if len(found) > LISTED else ""
        return f"{spans(found)}: {named}{more}"


def spans(indices: Sequence[int]) -> str:
    """``indices`` (ascending) as ``ops[...]`` with runs written as ranges: ``ops[0-2, 5]``."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return "ops[" + ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) + "]"
