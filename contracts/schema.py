"""JSON Schema export of every event, kept in sync with ``contracts/schemas/events.schema.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contracts.commands import MemoryWrite
from contracts.events import EVENT_ADAPTER

SCHEMA_PATH = Path(__file__).parent / "schemas" / "events.schema.json"


def current_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12, as pydantic emits it) of the event union and
    of the ``MemoryWrite`` command."""
    return {
        "title": "memory-ledger contracts",
        "events": EVENT_ADAPTER.json_schema(),
        "commands": {"MemoryWrite": MemoryWrite.model_json_schema()},
    }


def render_schema() -> str:
    """The schema as the checked-in file holds it: sorted keys, two-space indent."""
    return json.dumps(current_schema(), indent=2, sort_keys=True) + "\n"


def main() -> None:
    """Write the schema file (``python -m contracts.schema``)."""
    SCHEMA_PATH.parent.mkdir(parents=True, exist_ok=True)
    SCHEMA_PATH.write_text(render_schema(), encoding="utf-8")
    print(f"wrote {SCHEMA_PATH.name}")


if __name__ == "__main__":
    main()
