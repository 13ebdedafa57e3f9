"""The path rules of the memory tool: every path the model sends is checked here before
anything is read or written, and refused with the field and the rule.

A path is ``/memories`` or ``/memories/`` followed by names separated by ``/`` (one
trailing ``/`` is dropped). At least as strict as the anthropic SDK's local filesystem
handler, and stricter where that one leans on a file system:

- the ``/memories`` prefix as a whole segment (``/memoriesX`` is refused, not read as
  ``/memories/X``); nothing absolute outside it;
- no ``.`` or ``..`` segment, nor a name made only of dots, in any encoding: ``%`` is
  refused outright (percent-encoding is never decoded, so no ``%2e%2e``, ``%252e`` or
  overlong ``%c0%ae`` can mean a dot to anyone who decodes it later), each name is also
  checked in its Unicode NFKC form (U+FF0E FULLWIDTH FULL STOP, U+2025 TWO DOT LEADER
  and the other compatibility dots are dots), and ``\\`` (a separator elsewhere) is
  refused; JSON escapes (``\\u002e``) are decoded before the rules see the path;
- no empty name (``//``), no hidden name (``.notes``), no white space at either end of a
  name, no control or invisible format character (Unicode categories Cc, Cf, Cs, Co);
- at most ``MAX_PATH_BYTES`` bytes of UTF-8 in all (the ledger's limit on a memory's
  key, which holds the path), ``MAX_NAME_BYTES`` per name (``NAME_MAX`` of Linux file
  systems) and ``MAX_DEPTH`` names below ``/memories``.

There is no symlink to escape through: a file is a memory of the ledger, addressed by
its path as a key, and no path is ever resolved against a file system.
"""

from __future__ import annotations

import unicodedata

from workers.gateway.errors import InvalidRequestError

ROOT = "/memories"
"""The root directory of every tree of files."""

MAX_PATH_BYTES = 512
MAX_NAME_BYTES = 255
MAX_DEPTH = 16

_INVISIBLE = {"Cc", "Cf", "Cs", "Co"}


def parse(path: str, field: str = "path") -> str:
    """``path`` in canonical form (``/memories`` or ``/memories/a/b``, no trailing ``/``).

    Raises:
        InvalidRequestError: ``field`` breaks one of the rules above (the rule is named).
    """
    if not path:
        raise InvalidRequestError(field, f"must be a path under {ROOT}, e.g. {ROOT}/notes.md")
    rule = _path_rule(path)
    if rule is None:
        body = path[len(ROOT) :].removesuffix("/")  # one trailing '/' of a directory is dropped
        names = body[1:].split("/") if body else []
        rule = next((r for r in map(_name_rule, names) if r is not None), None)
        if rule is None and len(names) > MAX_DEPTH:
            rule = f"must be at most {MAX_DEPTH} names deep below {ROOT}"
        if rule is None:
            return "/".join([ROOT, *names])
    raise InvalidRequestError(field, f"{rule} (got {_shown(path)})")


def _path_rule(path: str) -> str | None:
    """The rule the path as a whole breaks, if any."""
    if any(unicodedata.category(c) in _INVISIBLE for c in path):  # first: a lone surrogate has no UTF-8
        return "must not contain control or invisible format characters"
    if len(path.encode("utf-8")) > MAX_PATH_BYTES:
        return f"must be at most {MAX_PATH_BYTES} bytes in UTF-8"
    if "%" in path:
        return "must not contain '%': percent-encoding is not decoded, write the characters themselves"
    if "\\" in path:
        return "must not contain '\\': names are separated by '/'"
    if path != ROOT and not path.startswith(ROOT + "/"):
        return f"must start with {ROOT}/ (every file of the memory tool is under {ROOT})"
    return None


def _name_rule(name: str) -> str | None:
    """The rule one name of the path breaks, if any."""
    folded = unicodedata.normalize("NFKC", name)
    if not name:
        return "must not contain an empty name ('//')"
    if set(folded) <= {"."}:
        return f"must not contain '.' or '..' (in any spelling): a path names a file under {ROOT}"
    if folded.startswith("."):
        return "must not contain a hidden name (one starting with '.')"
    if "/" in folded or "\\" in folded:
        return "must not contain a character that reads as '/' or '\\' once normalised (NFKC)"
    if name != name.strip():
        return "must not have white space at either end of a name"
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        return f"must not contain a name longer than {MAX_NAME_BYTES} bytes in UTF-8"
    return None


def parent(path: str) -> str | None:
    """The directory holding ``path`` (canonical); ``None`` for the root."""
    return None if path == ROOT else path.rsplit("/", 1)[0]


def ancestors(path: str) -> list[str]:
    """Every directory above ``path`` up to the root, nearest first."""
    out = []
    current = parent(path)
    while current is not None:
        out.append(current)
        current = parent(current)
    return out


def is_within(path: str, directory: str) -> bool:
    """Whether ``path`` is ``directory`` or below it (both canonical)."""
    return path == directory or path.startswith(directory + "/")


def moved(path: str, old_dir: str, new_dir: str) -> str:
    """``path`` (within ``old_dir``) with ``old_dir`` replaced by ``new_dir``."""
    return new_dir + path[len(old_dir) :]


def _shown(path: str) -> str:
    """The path as the refusal repeats it: at most 80 characters, escapes visible."""
    text = path if len(path) <= 80 else path[:77] + "..."
    return repr(text)
