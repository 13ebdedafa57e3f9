"""The README's Python examples run as written: each block compiles and binds every name
it uses (a reader copies one block, not the page)."""

from __future__ import annotations

import builtins
import re
import symtable
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.S | re.M)


def unbound(source: str) -> set[str]:
    """The global names ``source`` reads that it neither assigns nor imports (builtins
    aside), in the module and in every function or class in it."""
    top = symtable.symtable(source, "README.md", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    read: set[str] = set()

    def walk(table: symtable.SymbolTable) -> None:
        for s in table.get_symbols():
            if s.is_referenced() and (table is top or s.is_global()):
                read.add(s.get_name())
        for child in table.get_children():
            walk(child)

    walk(top)
    return read - bound - set(dir(builtins))


def test_the_check_finds_a_name_used_before_it_is_given() -> None:
    assert unbound("import os\nprint(os.sep, TOKEN)\n") == {"TOKEN"}
    assert unbound("def f() -> None:\n    print(MODEL)\n") == {"MODEL"}
    assert unbound("TOKEN = 'x'\nprint(TOKEN, len(TOKEN))\n") == set()


def test_every_python_example_of_the_readme_binds_the_names_it_uses() -> None:
    blocks = python_blocks()
    assert len(blocks) >= 4  # the Python client, the MCP client, the SDK adapter, LangGraph
    for block in blocks:
        assert unbound(block) == set(), block.splitlines()[0]
