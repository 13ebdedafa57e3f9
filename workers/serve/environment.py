"""The settings a command forwarded to ``serve`` runs with: ``serve``'s, not the CLI's.

A command sent through ``memledger serve`` (``workers.serve.forward``) runs in ``serve``'s
process, with the settings ``serve`` started with. A ``MEMLEDGER_*`` variable set in the
CLI's own environment (a screening policy file, recall weights, a retention policy) would
be silently ignored, so the CLI refuses a command whose environment sets one to a value
other than ``serve``'s, naming the variable. Variables the CLI's environment does not set
are ``serve``'s, as documented.

``serve`` records, in ``serve.json``, one SHA-256 digest per compared setting of its
effective value (paths made absolute against its working directory): the file holds no
value itself. Not compared: the settings that only locate the data directory or the
caller (``data_dir``, ``principal``, ``serve_url``, ``api_key``), the secrets
(``master_key``), and those that shape ``serve``'s own process and never a command's
outcome (``api_*`` limits, ``metrics_*``, ``consumer_*``, ``embedder_threads``,
``pool_max_size``, ``vector_query_url``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from workers.settings import Settings

PREFIX = "MEMLEDGER_"

NOT_COMPARED = frozenset(
    {
        "data_dir",
        "principal",
        "serve_url",
        "api_key",
        "master_key",
        "embedder_threads",
        "pool_max_size",
        "vector_query_url",
    }
)
NOT_COMPARED_PREFIXES = ("api_", "metrics_", "consumer_")


def compared(field: str) -> bool:
    """Whether the setting ``field`` (a ``Settings`` field name) must agree with ``serve``'s."""
    return field in Settings.model_fields and field not in NOT_COMPARED and not field.startswith(NOT_COMPARED_PREFIXES)


def digests(settings: Settings) -> dict[str, str]:
    """``{field: sha256 hex of its effective value}`` for every compared setting; a path is
    made absolute against the working directory first (a relative one means another file
    in another directory)."""
    out: dict[str, str] = {}
    for field in Settings.model_fields:
        if not compared(field):
            continue
        value = getattr(settings, field)
        if isinstance(value, Path):
            value = str(value.expanduser().resolve())
        text = json.dumps(value, sort_keys=True, default=str)
        out[field] = hashlib.sha256(text.encode()).hexdigest()
    return out


def differing(settings: Settings, serve_digests: Mapping[str, str], environ: Mapping[str, str]) -> list[str]:
    """The ``MEMLEDGER_*`` variables of ``environ`` (the CLI's environment; names are
    case-insensitive, as ``Settings`` reads them) that set a compared setting to a value
    other than ``serve``'s, sorted; ``settings`` is the CLI's own. A setting ``serve.json``
    holds no digest of (a ``serve`` of an older version) is not compared."""
    mine = digests(settings)
    names = []
    for name in environ:
        if not name.upper().startswith(PREFIX):
            continue
        field = name[len(PREFIX) :].lower()
        if compared(field) and field in serve_digests and serve_digests[field] != mine.get(field):
            names.append(name)
    return sorted(names)
