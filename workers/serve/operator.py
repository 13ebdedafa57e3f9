"""The serving side of the CLI's forwarding (``workers.serve.forward``): the local
operator's route, ``POST /v1/operator/cli``, and the runner of forwarded commands."""

from __future__ import annotations

import threading

from fastapi import APIRouter

from workers.api.app import Who
from workers.gateway import ForbiddenError, Gateway
from workers.serve import capture, files
from workers.serve.forward import ROUTE, ForwardedCommand, ForwardedResult, refusal


class CommandRunner:
    """Runs forwarded command lines in this process, one at a time, on the shared
    services (``workers.cli.util.share``)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self._lock = threading.Lock()
        capture.install()

    def run(self, command: ForwardedCommand) -> ForwardedResult:
        from workers.cli.root import run_args

        with self._lock, capture.captured() as (out, err):
            code = run_args(command.exact_argv(), prog_name=command.prog_name)
        return ForwardedResult(exit_code=code, stdout=out.getvalue(), stderr=err.getvalue())


def operator_router(gateway: Gateway, runner: CommandRunner, info: files.ServeFile) -> APIRouter:
    """``POST /v1/operator/cli`` for the local operator's key only (not in the OpenAPI document)."""
    router = APIRouter()

    @router.post(ROUTE, response_model=ForwardedResult, include_in_schema=False)
    def forwarded(body: ForwardedCommand, caller: Who) -> ForwardedResult:
        if not caller.key.operator:
            raise ForbiddenError("authorization", "only the local operator's key may run CLI commands")
        why = refusal(body.argv, info)
        if why is not None:
            return ForwardedResult(exit_code=2, stdout="", stderr=f"error: {why}\n")
        return runner.run(body)

    return router
