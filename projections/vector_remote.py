"""Read access to an embedded vector index owned by another process, over loopback HTTP.

An embedded engine (qdrant-client local mode, qdrant-edge) admits one process per
storage path. The owning process runs a :class:`VectorQueryServer` next to its index;
other processes use a :class:`RemoteVectorIndex`, which implements the read methods of
:class:`~projections.vector_index.VectorIndex` and refuses the write methods.

Wire format (JSON, UTF-8)::

    POST /v1/collections/<collection>/<op>   body: an object   ->  200 {"result": ...}
    op = search            {"vector": [float], "filter": {VectorFilter fields}, "limit": int,
                            "payload_keys": [str] | null (optional)}
                                           -> [{"memory_id", "score", "payload"}]
       | retrieve          {"memory_ids": [str]}   -> {memory_id: {"vector": [float], "payload": {}}}
       | vectors           {"memory_ids": [str]}   -> {memory_id: [float]}
       | scroll_ids        {"subject_id": str | null}  -> [str]
       | count             {}                      -> int
       | find_derived_from {"memory_ids": [str]}   -> [str]
    GET /v1/health                                 -> 200 {"collection": str}
    errors: 400 (bad request), 404 (unknown path or collection), 413 (body too large),
            500 (index error), each with body {"error": message}

There is no authentication: bind to loopback only (the default).
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

from projections.vector_index import (
    VectorFilter,
    VectorHit,
    VectorIndex,
    VectorIndexError,
    VectorIndexUnreachableError,
    VectorPoint,
)

__all__ = ["RemoteVectorIndex", "VectorQueryServer", "filter_from_json", "filter_to_json"]

_log = logging.getLogger(__name__)
_MAX_BODY = 16 * 1024 * 1024
_PREFIX = "/v1/collections/"


def filter_to_json(flt: VectorFilter) -> dict[str, Any]:
    """The JSON object form of ``flt`` (tuples become lists)."""
    return {
        "subject_id": flt.subject_id,
        "purpose": flt.purpose,
        "statuses": list(flt.statuses),
        "scope_keys": None if flt.scope_keys is None else list(flt.scope_keys),
        "not_expired_at": flt.not_expired_at,
        "kinds": None if flt.kinds is None else list(flt.kinds),
    }


def _strings(value: object, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name} must be a list of strings")
    return tuple(value)


def filter_from_json(obj: object) -> VectorFilter:
    """Parse the output of :func:`filter_to_json`; raises ValueError on a malformed object."""
    if not isinstance(obj, dict) or not isinstance(obj.get("subject_id"), str):
        raise ValueError("filter must be an object with a string subject_id")
    purpose, expiry = obj.get("purpose"), obj.get("not_expired_at")
    if purpose is not None and not isinstance(purpose, str):
        raise ValueError("filter.purpose must be a string or null")
    if expiry is not None and (isinstance(expiry, bool) or not isinstance(expiry, int | float)):
        raise ValueError("filter.not_expired_at must be a number or null")
    scope_keys, kinds = obj.get("scope_keys"), obj.get("kinds")
    return VectorFilter(
        subject_id=obj["subject_id"],
        purpose=purpose,
        statuses=_strings(obj.get("statuses", ["active"]), "filter.statuses"),
        scope_keys=None if scope_keys is None else _strings(scope_keys, "filter.scope_keys"),
        not_expired_at=None if expiry is None else float(expiry),
        kinds=None if kinds is None else _strings(kinds, "filter.kinds"),
    )


class _UnknownOperation(Exception):
    pass


def _answer(index: VectorIndex, op: str, body: dict[str, Any]) -> object:
    """Run read operation ``op``; KeyError/TypeError/ValueError mean a bad request."""
    if op == "search":
        vector = body["vector"]
        if not isinstance(vector, list) or not all(isinstance(x, int | float) for x in vector):
            raise ValueError("vector must be a list of numbers")
        limit = body["limit"]
        if not isinstance(limit, int):
            raise ValueError("limit must be an integer")
        keys = body.get("payload_keys")
        payload_keys = None if keys is None else _strings(keys, "payload_keys")
        hits = index.search(list(map(float, vector)), filter_from_json(body["filter"]), limit, payload_keys)
        return [{"memory_id": h.memory_id, "score": h.score, "payload": h.payload} for h in hits]
    if op == "retrieve":
        points = index.retrieve(_strings(body["memory_ids"], "memory_ids"))
        return {k: {"vector": list(p.vector), "payload": dict(p.payload)} for k, p in points.items()}
    if op == "vectors":
        return index.vectors(_strings(body["memory_ids"], "memory_ids"))
    if op == "scroll_ids":
        subject_id = body.get("subject_id")
        if subject_id is not None and not isinstance(subject_id, str):
            raise ValueError("subject_id must be a string or null")
        return index.scroll_ids(subject_id)
    if op == "count":
        return index.count()
    if op == "find_derived_from":
        return index.find_derived_from(_strings(body["memory_ids"], "memory_ids"))
    raise _UnknownOperation(f"unknown operation {op!r}")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], index: VectorIndex) -> None:
        super().__init__(address, _Handler)
        self.index = index


class _Handler(BaseHTTPRequestHandler):
    server_version = "memledger-vectors/1"

    def _reply(self, status: int, obj: object) -> None:
        data = json.dumps(obj).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        index = cast(_Server, self.server).index
        if self.path == "/v1/health":
            self._reply(200, {"collection": index.collection})
        else:
            self._reply(404, {"error": f"no such path {self.path!r}"})

    def do_POST(self) -> None:
        index = cast(_Server, self.server).index
        collection, _, op = self.path.removeprefix(_PREFIX).partition("/")
        if not self.path.startswith(_PREFIX) or not op:
            self._reply(404, {"error": f"no such path {self.path!r}"})
            return
        if urllib.parse.unquote(collection) != index.collection:
            self._reply(404, {"error": f"collection {collection!r} is not served here ({index.collection!r} is)"})
            return
        length_header = self.headers.get("Content-Length") or "0"
        length = int(length_header) if length_header.isdigit() else -1
        if length < 0:
            self._reply(400, {"error": "malformed Content-Length header"})
            return
        if length > _MAX_BODY:
            self._reply(413, {"error": f"request body of {length} bytes exceeds {_MAX_BODY}"})
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(body, dict):
                raise ValueError("request body must be a JSON object")
            result = _answer(index, op, body)
        except _UnknownOperation as exc:
            self._reply(404, {"error": str(exc)})
        except KeyError as exc:
            self._reply(400, {"error": f"bad {op} request: missing {exc}"})
        except (TypeError, ValueError) as exc:
            self._reply(400, {"error": f"bad {op} request: {exc}"})
        except VectorIndexError as exc:
            self._reply(500, {"error": str(exc)})
        except Exception as exc:
            _log.exception("vector query %s failed", op)
            self._reply(500, {"error": f"{op} failed: {type(exc).__name__}: {exc}"})
        else:
            self._reply(200, {"result": result})

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("%s " + format, self.address_string(), *args)


class VectorQueryServer:
    """Serves the read methods of ``index`` as JSON over HTTP from a background thread.

    Run it in the process that owns an embedded index; requests are answered on
    per-request threads (the adapters serialise their calls internally). ``stop`` does
    not close the index. IPv4 only; no authentication, so keep the default loopback host.
    """

    def __init__(self, index: VectorIndex, host: str = "127.0.0.1", port: int = 0) -> None:
        """Prepare to serve ``index`` on ``host:port`` (port 0 picks a free port at ``start``)."""
        self.index = index
        self.host = host
        self.port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind and serve in a daemon thread.

        Raises:
            VectorIndexError: if already started or the address cannot be bound.
        """
        if self._server is not None:
            raise VectorIndexError("vector query server already started", collection=self.index.collection)
        try:
            self._server = _Server((self.host, self.port), self.index)
        except OSError as exc:
            raise VectorIndexError(
                f"cannot serve vectors on {self.host}:{self.port}: {exc}", collection=self.index.collection
            ) from exc
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"vector-query-{self.index.collection}", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        """Base URL to give :class:`RemoteVectorIndex`, e.g. ``http://127.0.0.1:41234``."""
        if self._server is None:
            raise VectorIndexError("vector query server not started", collection=self.index.collection)
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def stop(self) -> None:
        """Stop serving and close the socket. Idempotent."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join()

    def __enter__(self) -> VectorQueryServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RemoteVectorIndex:
    """The read methods of :class:`VectorIndex`, answered by a :class:`VectorQueryServer` at ``url``.

    Write methods raise :class:`VectorIndexError` ("read-only: ..."). Server errors come
    back as :class:`VectorIndexError` with the server's message; an unreachable server
    (refused, timed out after ``timeout_s`` seconds) as a
    :class:`~projections.vector_index.VectorIndexUnreachableError` naming the URL. Proxies from
    the environment are ignored: the server is expected on the local machine.
    """

    def __init__(self, url: str, collection: str, timeout_s: float = 5.0) -> None:
        """Talk to the server at base ``url`` about ``collection``; nothing is sent yet."""
        self.url = url.rstrip("/")
        self.collection = collection
        self.timeout_s = timeout_s
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _call(self, op: str, body: Mapping[str, Any]) -> Any:
        endpoint = f"{self.url}{_PREFIX}{urllib.parse.quote(self.collection, safe='')}/{op}"
        request = urllib.request.Request(
            endpoint,
            data=json.dumps(body).encode("utf-8"),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                return json.loads(response.read())["result"]
        except urllib.error.HTTPError as exc:
            try:
                raw = exc.read()
            finally:
                exc.close()
            try:
                message = str(json.loads(raw)["error"])
            except (ValueError, KeyError, TypeError):
                message = f"HTTP {exc.code}: {raw[:200]!r}"
            raise VectorIndexError(f"{op} via {self.url}: {message}", collection=self.collection) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise VectorIndexUnreachableError(
                f"cannot reach vector query server at {self.url}: {reason}", collection=self.collection
            ) from exc
        except (ValueError, KeyError, TypeError) as exc:
            raise VectorIndexError(
                f"{op} via {self.url}: malformed response: {exc}", collection=self.collection
            ) from exc

    def _read_only(self, op: str) -> VectorIndexError:
        return VectorIndexError(
            f"read-only: {op} refused; collection {self.collection!r} is owned by the process serving {self.url}",
            collection=self.collection,
        )

    def ensure_collection(self, dim: int) -> None:
        """Refused: raises VectorIndexError (read-only)."""
        raise self._read_only("ensure_collection")

    def upsert(self, points: Sequence[VectorPoint]) -> None:
        """Refused: raises VectorIndexError (read-only)."""
        raise self._read_only("upsert")

    def set_payload(self, memory_id: str, payload: Mapping[str, Any]) -> None:
        """Refused: raises VectorIndexError (read-only)."""
        raise self._read_only("set_payload")

    def delete(self, memory_ids: Sequence[str]) -> None:
        """Refused: raises VectorIndexError (read-only)."""
        raise self._read_only("delete")

    def drop_collection(self) -> None:
        """Refused: raises VectorIndexError (read-only)."""
        raise self._read_only("drop_collection")

    def compact(self) -> str:
        """Refused: raises VectorIndexError (read-only: only the owner rewrites its storage)."""
        raise self._read_only("compact")

    def find_derived_from(self, memory_ids: Sequence[str]) -> list[str]:
        """Ids of the points whose payload ``derived_from`` holds any of ``memory_ids``."""
        return [str(m) for m in self._call("find_derived_from", {"memory_ids": list(memory_ids)})]

    def retrieve(self, memory_ids: Sequence[str]) -> dict[str, VectorPoint]:
        """The present points among ``memory_ids``, keyed by the ids as given."""
        found = self._call("retrieve", {"memory_ids": list(memory_ids)})
        return {
            str(k): VectorPoint(memory_id=str(k), vector=tuple(map(float, v["vector"])), payload=v["payload"])
            for k, v in found.items()
        }

    def vectors(self, memory_ids: Sequence[str]) -> dict[str, list[float]]:
        """The vectors of the present points among ``memory_ids``, keyed by the ids as given."""
        found = self._call("vectors", {"memory_ids": list(memory_ids)})
        return {str(k): list(map(float, v)) for k, v in found.items()}

    def search(
        self, vector: Sequence[float], flt: VectorFilter, limit: int, payload_keys: Sequence[str] | None = None
    ) -> list[VectorHit]:
        """Up to ``limit`` points matching ``flt``, nearest first (filtered in the owner's
        engine); with ``payload_keys``, only those keys of each payload."""
        body: dict[str, Any] = {"vector": list(map(float, vector)), "filter": filter_to_json(flt), "limit": limit}
        if payload_keys is not None:
            body["payload_keys"] = list(payload_keys)
        return [
            VectorHit(memory_id=str(h["memory_id"]), score=float(h["score"]), payload=h["payload"])
            for h in self._call("search", body)
        ]

    def scroll_ids(self, subject_id: str | None = None) -> list[str]:
        """All point ids, or those of one subject."""
        return [str(m) for m in self._call("scroll_ids", {"subject_id": subject_id})]

    def count(self) -> int:
        """Exact number of points."""
        return int(self._call("count", {}))

    def close(self) -> None:
        """Nothing to release (each call opens its own connection)."""
