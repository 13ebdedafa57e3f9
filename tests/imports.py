"""What a piece of client code imports: the server's dependencies must stay out of it."""

from __future__ import annotations

import subprocess
import sys

#: Packages only the server side needs; a client (``workers.client``, the LangGraph store)
#: must work without them.
SERVER_DEPENDENCIES = ("fastapi", "starlette", "uvicorn", "psycopg", "psycopg_pool", "faust", "onnxruntime", "redis")


def server_dependencies_imported(code: str) -> str:
    """Run ``code`` (Python statements, ``;``-separated) in a new interpreter and return
    the printed sorted list of :data:`SERVER_DEPENDENCIES` it imported (``"[]"``: none).

    Raises:
        subprocess.CalledProcessError: ``code`` failed.
    """
    probe = (
        f"{code}; import sys; print(sorted({{m.split('.')[0] for m in sys.modules}} & set({SERVER_DEPENDENCIES!r})))"
    )
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
