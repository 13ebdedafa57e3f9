"""Refusals as MCP tool errors (``workers.mcp.errors``): each known kind becomes the problem
document the HTTP API would answer, naming the field and the rule."""

from __future__ import annotations

from workers.client import InvalidArgument, TransportError
from workers.gateway import NotFoundError
from workers.mcp.errors import problem_of, tool_error


def test_a_token_the_client_refuses_is_a_tool_error_naming_the_field() -> None:
    problem = problem_of(InvalidArgument("token", "holds whitespace inside"))
    assert problem is not None
    assert (problem.status, problem.field, problem.rule) == (422, "token", "holds whitespace inside")
    result = tool_error(problem)
    assert result.is_error and result.content[0].text == "error: token: holds whitespace inside"


def test_a_server_that_does_not_answer_is_unavailable_and_may_be_retried() -> None:
    problem = problem_of(TransportError("GET /healthz: ConnectError: refused"))
    assert problem is not None and problem.status == 503 and problem.retry_after_s == 1.0


def test_a_gateway_refusal_keeps_its_kind_and_anything_else_is_left_to_the_sdk() -> None:
    problem = problem_of(NotFoundError("memory_id", "no such memory"))
    assert problem is not None and problem.status == 404
    assert problem_of(RuntimeError("boom")) is None
