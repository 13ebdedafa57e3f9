"""The CLI through a running ``memledger serve`` (embedded default).

While ``serve`` owns a data directory (``serve.json`` names a live pid), ``memledger``
does not open the stores itself: it sends its command line to
``POST /v1/operator/cli`` with the local operator's token, ``serve`` runs the very same
command (the same code, on its open stores, one command at a time) and returns what it
printed and its exit status, which the CLI prints and exits with. So the output is what
it would be without ``serve``, byte for byte (rich tables are drawn for a pipe, not a
terminal). Path options (``--html``, ``--new-key-file``, ``ingest-locomo PATH``) are made
absolute first. The command runs with ``serve``'s settings: a ``MEMLEDGER_*`` variable of
the CLI's environment set to another value is refused, naming it
(``workers.serve.environment``).

Commands that cannot go through it say so in one line and exit 2: ``serve`` and
``worker`` (``serve`` already runs the projections), ``rotate-master-key`` (``serve``
holds the master key; stop it first) and ``eval scenarios --in-place``. ``demo``,
``bench`` and ``eval scenarios`` run in directories of their own, as before.
"""

from __future__ import annotations

import base64
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Base64Bytes, BaseModel, ConfigDict, Field

from workers.serve import files

if TYPE_CHECKING:
    from workers.settings import Settings

ROUTE = "/v1/operator/cli"

GLOBAL_WITH_VALUE = ("--data-dir", "--principal")
GLOBAL_FLAGS = ("-v", "--verbose")
PATH_OPTIONS = ("--html", "--new-key-file")

LOCAL = ("demo", "bench", "mcp")
"""Commands that run in directories of their own, not through ``serve`` (``mcp`` goes
through it with its own API key, as an agent would)."""

REFUSED = {
    "serve": "memledger serve (pid {pid}) already serves this data directory at {url}",
    "worker": "memledger serve (pid {pid}) already runs the projections of this data directory",
    "rotate-master-key": "memledger serve (pid {pid}) holds the master key in memory: stop it first, then rotate",
}


class ForwardedCommand(BaseModel):
    """A command line, as ``memledger`` got it (global options included).

    An argument that is not valid UTF-8 (typed in a terminal of another encoding: Python
    holds its bad bytes as lone surrogates, which JSON cannot carry) is in ``argv`` with
    U+FFFD in place of each bad byte, and its bytes, exactly as given, are in
    ``undecodable`` under its index; ``exact_argv`` decodes them as the CLI itself would
    (``os.fsdecode``), so ``serve`` refuses it with the line the CLI prints without
    ``serve`` (``error: content: ...``)."""

    model_config = ConfigDict(extra="forbid")
    argv: list[str] = Field(max_length=10_000)
    prog_name: str = Field(default="memledger", max_length=200)
    undecodable: dict[int, Base64Bytes] = Field(default_factory=dict, max_length=10_000)

    @classmethod
    def of(cls, argv: Sequence[str], prog_name: str) -> ForwardedCommand:
        """The command of ``argv`` (``sys.argv``'s strings), its undecodable arguments set aside."""
        clean: list[str] = []
        raw: dict[int, bytes] = {}
        for i, arg in enumerate(argv):
            try:
                arg.encode("utf-8")
            except UnicodeEncodeError:
                raw[i] = os.fsencode(arg)
                arg = raw[i].decode("utf-8", "replace")
            clean.append(arg)
        return cls(argv=clean, prog_name=prog_name, undecodable={i: base64.b64encode(b) for i, b in raw.items()})

    def exact_argv(self) -> list[str]:
        """``argv`` with each undecodable argument as the CLI got it."""
        return [os.fsdecode(self.undecodable[i]) if i in self.undecodable else a for i, a in enumerate(self.argv)]


class ForwardedResult(BaseModel):
    exit_code: int
    stdout: str
    stderr: str


def split_command(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """The command of ``argv`` (after the global options) and what follows it."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in GLOBAL_WITH_VALUE:
            i += 2
        elif arg.split("=", 1)[0] in GLOBAL_WITH_VALUE or arg in GLOBAL_FLAGS:
            i += 1
        else:
            return arg, list(argv[i + 1 :])
    return None, []


def refusal(argv: Sequence[str], info: files.ServeFile) -> str | None:
    """Why ``argv`` cannot go through ``serve``, as ``field: rule``; ``None`` if it can."""
    command, rest = split_command(argv)
    if command in REFUSED:
        return f"{command}: " + REFUSED[command].format(pid=info.pid, url=info.url)
    if command == "eval" and "--in-place" in rest:
        return f"in_place: memledger serve (pid {info.pid}) owns this data directory; run the suite without --in-place"
    return None


def runs_locally(argv: Sequence[str]) -> bool:
    """Commands that never need the data directory's stores: help, and the ones with
    directories of their own."""
    command, rest = split_command(argv)
    if command is None or command.startswith("-") or "--help" in argv:
        return True
    return command in LOCAL or (command == "eval" and "--in-place" not in rest)


def absolute_paths(argv: Sequence[str], cwd: Path) -> list[str]:
    """``argv`` with the values of path options, and the file of ``ingest-locomo``, made absolute."""
    out = list(argv)
    for i, arg in enumerate(out):
        name, eq, value = arg.partition("=")
        if name in PATH_OPTIONS and eq:
            out[i] = f"{name}={cwd / value}"
        elif arg in PATH_OPTIONS and i + 1 < len(out):
            out[i + 1] = str(cwd / out[i + 1])
    command, rest = split_command(out)
    if command == "ingest-locomo":
        j = len(out) - len(rest)
        while j < len(out):
            if out[j].startswith("-"):  # an option; --limit takes a value
                j += 2 if out[j] == "--limit" else 1
                continue
            out[j] = str(cwd / out[j])
            break
    return out


def maybe_forward(argv: Sequence[str]) -> int | None:
    """Run ``argv`` through the ``serve`` of its data directory, if one runs: prints its
    output and returns its exit status (2 with one line for a command that cannot go
    through it); ``None`` when the CLI should run the command itself."""
    if runs_locally(argv):
        return None
    settings = _embedded_settings(argv)
    if settings is None:
        return None
    info = files.read(settings.data_dir)
    if info is None:
        return None
    why = refusal(argv, info) or _settings_refusal(settings, info)
    if why is not None:
        print(f"error: {why}", file=sys.stderr)
        return 2
    import click.utils
    import httpx

    args = absolute_paths(argv, Path.cwd())
    if os.environ.get("MEMLEDGER_PRINCIPAL") and not any(a.split("=", 1)[0] == "--principal" for a in args):
        args = ["--principal", os.environ["MEMLEDGER_PRINCIPAL"], *args]  # serve's environment is not ours
    body = ForwardedCommand.of(args, click.utils._detect_program_name())
    sent.append(info.url)  # from here an interruption cannot tell whether serve ran it
    try:
        response = httpx.post(
            info.url.rstrip("/") + ROUTE,
            json=body.model_dump(mode="json"),
            headers={"Authorization": f"Bearer {info.token}"},
            timeout=httpx.Timeout(None, connect=5.0),
        )
    except httpx.HTTPError as exc:
        print(f"error: serve: memledger serve (pid {info.pid}) at {info.url} does not answer: {exc}", file=sys.stderr)
        return 2
    if response.status_code != 200:
        detail = response.json().get("detail", response.text) if response.content else response.reason_phrase
        print(f"error: serve: memledger serve (pid {info.pid}) refused the command: {detail}", file=sys.stderr)
        return 2
    result = ForwardedResult.model_validate(response.json())
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.exit_code


sent: list[str] = []
"""The ``serve`` this process sent its command to (once it began sending): an interrupted
CLI says the command's outcome is unknown then, and that nothing was recorded before."""


def _settings_refusal(settings: Settings, info: files.ServeFile) -> str | None:
    """Why the CLI's environment cannot go through ``serve`` (a ``MEMLEDGER_*`` variable
    set to another value than ``serve``'s, which the command would silently not use), as
    ``field: rule``; ``None`` if it agrees."""
    from workers.serve import environment

    names = environment.differing(settings, info.settings, os.environ)
    if not names:
        return None
    return (
        f"{', '.join(names)}: memledger serve (pid {info.pid}) runs this data directory's commands with its own"
        " settings, and its value differs; unset it here to use serve's, or stop serve and start it with this value"
    )


def _embedded_settings(argv: Sequence[str]) -> Settings | None:
    """The CLI's settings for ``argv`` in the embedded mode (``None`` in the distributed
    mode, or when the settings cannot be read: the CLI then reports it itself)."""
    from workers.settings import Settings

    overrides: dict[str, object] = {}
    for i, arg in enumerate(argv):
        if arg == "--data-dir" and i + 1 < len(argv):
            overrides["data_dir"] = Path(argv[i + 1])
        elif arg.startswith("--data-dir="):
            overrides["data_dir"] = Path(arg.split("=", 1)[1])
    try:
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except ValueError:
        return None
    return settings if settings.mode == "embedded" else None
