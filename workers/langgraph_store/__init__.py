"""LangGraph's long-term memory store (``BaseStore``) backed by the ledger, through the
HTTP API of ``memledger serve`` (``pip install 'memory-ledger[langgraph]'``)::

    from workers.langgraph_store import LedgerStore

    store = LedgerStore("http://127.0.0.1:8765", token)
    store.put(("user-42", "support"), "answer_length", {"prefers": "short answers"})
    store.search(("user-42", "support"), query="how long should answers be")

A namespace is ``(subject_id, purpose, *rest)``: the subject is checked against the API
key's grants, the purpose is the memory's, and the rest with the item's key is the
memory's ``key`` (``namespaces``). A value is the memory's content as JSON (``values``);
a put supersedes the item's live memory; a delete is an erasure with a receipt
(``LedgerStore.erase``, ``LedgerStore.erasures``); a search with a query is a recall
(``plan``). ``errors`` holds the store's own refusals, and the error of a batch the
server stopped part-way (``BatchInterruptedError``).
"""

from workers.langgraph_store.errors import (
    BatchInterruptedError,
    InvalidValueError,
    LedgerStoreError,
    NamespaceError,
    UnsupportedError,
)
from workers.langgraph_store.plan import ErasureReceipt
from workers.langgraph_store.store import LedgerStore

__all__ = [
    "BatchInterruptedError",
    "ErasureReceipt",
    "InvalidValueError",
    "LedgerStore",
    "LedgerStoreError",
    "NamespaceError",
    "UnsupportedError",
]
