"""Refusals as MCP tool errors: a ``CallToolResult`` with ``isError``, its text the CLI's
``error: <field>: <rule>``, its structured content the problem document the HTTP API
would answer (status, field, rule, ``retry_after_s``). Never a stack trace: an error
that is none of these is left to the SDK, which answers with the tool's name only and
logs the rest."""

from __future__ import annotations

from mcp_types import CallToolResult, TextContent
from pydantic import ValidationError

from workers import wire
from workers.api.problems import STATUS, TITLES
from workers.client import ApiError, InvalidArgument, TransportError
from workers.gateway import GatewayError, InvalidRequestError, UnavailableError, translate

KNOWN = (GatewayError, ApiError, TransportError, InvalidArgument, ValidationError)
"""What ``problem_of`` turns into a problem document."""


def problem_of(exc: BaseException) -> wire.Problem | None:
    """The problem document of a refusal from a backend or from building a request, or
    ``None`` for any other error."""
    if isinstance(exc, ApiError):
        return exc.problem
    if isinstance(exc, TransportError):
        exc = UnavailableError("serve", str(exc), 1.0)
    elif isinstance(exc, InvalidArgument):  # refused by the client before sending (the key's token)
        exc = InvalidRequestError(exc.field, exc.rule)
    elif isinstance(exc, ValidationError):
        exc = translate(exc)
    if not isinstance(exc, GatewayError):
        return None
    status = STATUS.get(exc.kind, 422)
    return wire.Problem(
        title=TITLES.get(status, "Error"),
        status=status,
        detail=f"{exc.field}: {exc.rule}",
        field=exc.field,
        rule=exc.rule,
        retry_after_s=exc.retry_after_s,
    )


def tool_error(problem: wire.Problem) -> CallToolResult:
    """The tool result of a refusal."""
    text = f"error: {problem.detail}"
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=problem.model_dump(mode="json", exclude_none=True),
        is_error=True,
    )
