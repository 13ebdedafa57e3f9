"""Principals and grants: who may write, read or erase the memories of which subjects.

Deny by default: a principal with no grant matching a subject may do nothing with it.
Grants come from a TOML file::

    [principals.support-agent]
    grants = [
      { subjects = ["user-*"], actions = ["write", "read"] },
    ]

``subjects`` are shell-style patterns (``fnmatch``, case-sensitive). A long-running
process reads the file through :class:`GrantsFile`, which reads it again when it changes.
"""

from __future__ import annotations

import fnmatch
import logging
import threading
import tomllib
from collections.abc import Collection
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contracts.types import identifier_problem
from ledger.errors import InvalidCommandError, NotAuthorisedError

log = logging.getLogger(__name__)

Action = Literal["write", "read", "erase"]
ALL_ACTIONS: tuple[Action, ...] = ("write", "read", "erase")


class Grant(BaseModel):
    """Permission to perform ``actions`` on subjects matching any of ``subjects``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    subjects: tuple[str, ...] = Field(min_length=1)
    actions: tuple[Action, ...] = Field(min_length=1)

    def allows(self, action: Action, subject_id: str) -> bool:
        return action in self.actions and any(fnmatch.fnmatchcase(subject_id, p) for p in self.subjects)


class Principal(BaseModel):
    """An authenticated caller (agent service, component or operator) and its grants."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str = Field(min_length=1)
    grants: tuple[Grant, ...] = ()

    def may(self, action: Action, subject_id: str) -> bool:
        """True when some grant allows ``action`` on ``subject_id``."""
        return any(g.allows(action, subject_id) for g in self.grants)

    def require(self, action: Action, subject_id: str) -> None:
        """Raise ``NotAuthorisedError`` unless a grant allows ``action`` on ``subject_id``;
        ``InvalidCommandError`` (field ``subject_id``) for an id no subject can have
        (``check_subject``)."""
        check_subject(subject_id)
        if not self.may(action, subject_id):
            raise NotAuthorisedError(self.id, action, subject_id)

    def may_list(self, subject_id: str, usable: Collection[str] = ("read", "erase")) -> bool:
        """The listing rule: a subject's memories may be listed with a read or an erase grant;
        returns True when their text and other sealed fields (the key) may be shown
        (read), False for status only (erase).
        ``usable``: the actions the caller's credential may use at all (an API key's scopes).

        Raises:
            InvalidCommandError: an id no subject can have (``check_subject``).
            NotAuthorisedError: neither grant, naming the read a listing needs.
        """
        check_subject(subject_id)
        if "read" in usable and self.may("read", subject_id):
            return True
        if "erase" in usable and self.may("erase", subject_id):
            return False
        raise NotAuthorisedError(self.id, "read", subject_id)


def check_subject(subject_id: str) -> None:
    """Refuse a subject id that no event can hold (``contracts.types.identifier_problem``:
    empty or only white space, control characters, over 512 bytes), which a wildcard grant
    would otherwise allow and a read answer with nothing.

    Raises:
        InvalidCommandError: field ``subject_id``, the rule.
    """
    problem = identifier_problem(subject_id)
    if problem is not None:
        raise InvalidCommandError("subject_id", problem)


class _PrincipalEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    grants: tuple[Grant, ...] = ()


class _GrantsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    principals: dict[Annotated[str, Field(min_length=1)], _PrincipalEntry] = {}


def parse_principals(raw: bytes, path: Path) -> dict[str, Principal]:
    """The principals of ``raw``, the content of the grants file ``path`` (named in errors).

    Raises:
        InvalidCommandError: not UTF-8 TOML, or breaks the schema; ``field`` names the
            file (and the key where known).
    """
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InvalidCommandError("grants_file", f"{path} is not valid TOML: {exc}") from None
    try:
        parsed = _GrantsFile.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        rule = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
        raise InvalidCommandError(f"grants_file:{where}", rule) from None
    return {pid: Principal(id=pid, grants=entry.grants) for pid, entry in parsed.principals.items()}


class GrantsFile:
    """The principals of a grants file, read again whenever its content changed: each
    call of :meth:`principals` reads the file (a few hundred bytes; it is compared, not
    parsed, when unchanged), so an edit takes effect on the next command or request.

    A file that no longer reads or parses (missing, not TOML, against the schema) leaves
    the last good principals in force: the problem is logged once per distinct content
    (a warning) and kept in :attr:`problem` until a good file replaces it. Thread-safe.
    """

    def __init__(self, path: Path) -> None:
        """Read ``path`` once.

        Raises:
            InvalidCommandError: the file is missing, or as ``parse_principals``: a process
                does not start on a bad file.
        """
        self.path = path
        self._lock = threading.Lock()
        try:
            self._raw = path.read_bytes()
        except FileNotFoundError:
            raise InvalidCommandError("grants_file", f"{path} does not exist") from None
        self._principals = parse_principals(self._raw, path)
        self._bad: bytes | None = None
        self.problem: str | None = None
        """``field: rule`` of the file's current content when it is not in force, else ``None``."""

    def principals(self) -> dict[str, Principal]:
        """The principals of the file's current content, or the last good ones (see the class)."""
        with self._lock:
            try:
                raw = self.path.read_bytes()
            except OSError as exc:
                why = "does not exist" if isinstance(exc, FileNotFoundError) else f"cannot be read: {exc.strerror}"
                self._refuse(b"", InvalidCommandError("grants_file", f"{self.path} {why}"))
                return self._principals
            if raw == self._raw:
                return self._principals
            try:
                principals = parse_principals(raw, self.path)
            except InvalidCommandError as exc:
                self._refuse(raw, exc)
                return self._principals
            self._raw, self._principals, self._bad, self.problem = raw, principals, None, None
            log.info("grants file %s read again: %d principals", self.path, len(principals))
            return principals

    def _refuse(self, raw: bytes, exc: InvalidCommandError) -> None:
        self.problem = f"{exc.field}: {exc.rule}"
        if raw != self._bad:
            self._bad = raw
            log.warning("error: %s; the grants read before stay in force", self.problem)


def resolve_principal(principals: dict[str, Principal], principal_id: str) -> Principal:
    """The principal named ``principal_id``, or one with no grants (deny by default).

    Raises:
        InvalidCommandError: ``principal_id`` is empty.
    """
    if not principal_id:
        raise InvalidCommandError("principal", "must not be empty")
    return principals.get(principal_id, Principal(id=principal_id))
