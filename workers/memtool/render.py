"""What the model reads back from the memory tool: a directory listing, a file's numbered
lines, the lines around an edit. The layouts follow the anthropic SDK's local filesystem
handler (tab-separated sizes and paths, line numbers right-aligned in six columns), so a
model used to that handler reads these the same way."""

from __future__ import annotations

from workers.memtool.files import File, Tree

LINE_NUMBER_WIDTH = 6
LISTING_DEPTH = 2
"""How many levels below the directory viewed the listing shows."""


def human_size(size_bytes: int) -> str:
    """``size_bytes`` in binary units: ``0B``, ``512B``, ``1.5K``, ``2M``, ``1G``."""
    size = float(size_bytes)
    for unit in ("B", "K", "M"):
        if size < 1024:
            return _short(size, unit)
        size /= 1024
    return _short(size, "G")


def _short(value: float, unit: str) -> str:
    return f"{int(value)}{unit}" if value == int(value) else f"{value:.1f}{unit}"


def listing(tree: Tree, directory: str) -> str:
    """The directory, then its subdirectories and files up to ``LISTING_DEPTH`` levels
    below, depth first by name; a directory's size is the bytes of the files below it."""
    lines = [f"{human_size(_bytes_below(tree, directory))}\t{directory}"]
    _list(tree, directory, 1, lines)
    header = f"The files and directories up to {LISTING_DEPTH} levels deep in {directory}:"
    return "\n".join([header, *lines])


def _list(tree: Tree, directory: str, depth: int, out: list[str]) -> None:
    children: dict[str, File | None] = {}
    for f in tree.under(directory):
        name = f.path[len(directory) + 1 :].split("/", 1)[0]
        child = f"{directory}/{name}"
        children[child] = f if f.path == child else None
    for child in sorted(children):
        found = children[child]
        if found is not None:
            out.append(f"{human_size(found.size_bytes)}\t{child}")
            continue
        out.append(f"{human_size(_bytes_below(tree, child))}\t{child}/")
        if depth < LISTING_DEPTH:
            _list(tree, child, depth + 1, out)


def _bytes_below(tree: Tree, directory: str) -> int:
    return sum(f.size_bytes for f in tree.under(directory))


def split_lines(content: str) -> list[str]:
    """The file's lines (split on ``\\n``, carriage returns kept), without the empty
    line a final newline leaves."""
    lines = content.split("\n")
    if lines and lines[-1] == "" and len(lines) > 1:
        lines.pop()
    return lines


def numbered(lines: list[str], first: int) -> list[str]:
    """``lines`` numbered from ``first``, the number right-aligned."""
    return [f"{n:>{LINE_NUMBER_WIDTH}}\t{line}" for n, line in enumerate(lines, start=first)]


def file_view(f: File, first: int, last: int | None) -> str:
    """Lines ``first`` to ``last`` (1-based, inclusive; ``None``: to the end) of ``f``,
    numbered, under a header that gives its SHA-256 for the next edit's precondition."""
    lines = split_lines(f.content)
    shown = lines[first - 1 : last]
    header = f"{f.path} ({len(lines)} lines, content_sha256 {f.sha256}), with line numbers:"
    return "\n".join([header, *numbered(shown, first)])


def around(content: str, first_index: int, last_index: int, context: int = 2) -> str:
    """Lines ``first_index`` to ``last_index`` (0-based, inclusive) of ``content`` and
    ``context`` lines on either side, numbered."""
    lines = split_lines(content)
    start = max(0, first_index - context)
    return "\n".join(numbered(lines[start : last_index + context + 1], start + 1))
