"""The error tree of the read side."""

from __future__ import annotations


class ProjectionError(Exception):
    """Base of every error raised by :mod:`projections`."""


class ProjectionStalledError(ProjectionError):
    """A projection could not apply the record at ``partition``/``offset`` after
    ``attempts`` tries and stopped rather than skip it (an erasure is never skipped)."""

    def __init__(self, projection: str, partition: int, offset: int, attempts: int, cause: str) -> None:
        super().__init__(
            f"projection {projection} stalled at partition {partition} offset {offset}"
            f" after {attempts} attempts: {cause}"
        )
        self.projection = projection
        self.partition = partition
        self.offset = offset
        self.attempts = attempts
        self.cause = cause


class UnreadableErasureError(ProjectionStalledError):
    """The record at ``partition``/``offset`` claims to be an ``ErasureRequested`` that
    this reader cannot read (``cause`` says why). It is never skipped nor dead-lettered:
    the projection stops on that partition until a reader that can read it is deployed;
    its other partitions may go on (``projections.stalls``)."""


class RecallError(ProjectionError):
    """Bad recall input; ``field`` names the argument and the message gives the rule."""

    def __init__(self, field: str, rule: str) -> None:
        super().__init__(f"{field}: {rule}")
        self.field = field
        self.rule = rule


class UnknownRequestError(ProjectionError):
    """No erasure request with this id is known."""

    def __init__(self, request_id: str) -> None:
        super().__init__(f"request_id: no erasure request {request_id!r} is known")
        self.request_id = request_id


class VersionError(ProjectionError):
    """A refused change to the projection version registry (``field``: the argument,
    the message gives the rule), e.g. a rebuild to a version that exists, a rollback
    with no previous version, retiring the serving version."""

    def __init__(self, field: str, rule: str) -> None:
        super().__init__(f"{field}: {rule}")
        self.field = field
        self.rule = rule


class VerifyError(ProjectionError):
    """``verify`` could not run (unknown projection, scratch target not isolated)."""
