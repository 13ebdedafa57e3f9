"""The MCP server and the memory tool as agents use them, against a real ``memledger
serve``: the tools through the ``mcp`` package's own client over streamable HTTP
(``/mcp``) and over stdio (``memledger mcp``), every memory tool command, the
cross-subject suite for every tool, path traversal and oversized inputs, and the
anthropic SDK adapter driven offline by the tool-use blocks a model would send. In the
embedded default (stdio goes through ``serve``) and the distributed mode (stdio opens
the stores itself); one ``serve`` per mode for the whole module."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from anthropic import Anthropic
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.e2e import serving
from tests.e2e.conftest import Cli, wait_until
from workers.client import Conflict, Forbidden, InvalidRequest, LedgerClient, NotFound
from workers.memtool.adapter import LedgerMemoryTool

pytestmark = [pytest.mark.e2e]

PURPOSE = "agent_memory"
TOOLS = {"remember", "recall", "get", "list", "history", "forget", "trace", "memory"}


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[serving.Served]:
    with serving.embedded(tmp_path_factory.mktemp("mcp-embedded")) as served:
        yield served


@pytest.fixture(scope="module")
def distributed(
    tmp_path_factory: pytest.TempPathFactory, pg_dsn: str, kafka_bootstrap: str, redis_url: str
) -> Iterator[serving.Served]:
    root = tmp_path_factory.mktemp("mcp-distributed")
    with serving.distributed(root, pg_dsn, kafka_bootstrap, redis_url) as served:
        with LedgerClient(served.url, served.key("warm-up", ["warm-up"])) as client:  # until the workers apply
            client.wait(client.write("warm-up", "the workers are up", PURPOSE), timeout_s=60)
        yield served


@pytest.fixture(scope="module", params=["embedded", "distributed"])
def served(request: pytest.FixtureRequest) -> serving.Served:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def admin(served: serving.Served) -> Iterator[LedgerClient]:
    with LedgerClient(served.url, served.key("ops", ["*"], ("read", "erase", "admin"))) as client:
        yield client


class Agent:
    """A subject and an API key granted for it alone."""

    def __init__(self, served: serving.Served, name: str, scopes: tuple[str, ...] = ("read", "write", "erase")) -> None:
        self.served = served
        self.subject = f"{name}-{uuid.uuid4().hex[:8]}"
        self.principal = f"agent-{self.subject}"
        self.token = served.key(self.principal, [self.subject], scopes)

    @asynccontextmanager
    async def http(self, token: str | None = None) -> AsyncIterator[Client]:
        """An MCP client of ``/mcp`` with this agent's key (or ``token``)."""
        headers = {"Authorization": f"Bearer {token or self.token}"}
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            async with Client(streamable_http_client(self.served.url + "/mcp", http_client=http)) as client:
                yield client

    def stdio(self, **env: str) -> Client:
        """An MCP client of ``memledger mcp`` started with this agent's key, in the
        environment of ``serve`` (embedded: the same data directory, so it goes through
        ``serve``; distributed: the same stores, which it opens itself)."""
        full = self.served.cli.env | {"MEMLEDGER_API_KEY": self.token} | env
        params = StdioServerParameters(command=sys.executable, args=["-m", "workers", "mcp"], env=full)
        return Client(params, read_timeout_seconds=120)


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """The structured result of a tool call that must succeed."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, (tool, arguments, result.content)
    assert result.structured_content is not None
    return result.structured_content


async def refused(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """The problem document of a tool call that must be refused (and its text)."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, (tool, arguments, result.structured_content)
    text = result.content[0].text  # type: ignore[union-attr]
    problem = result.structured_content or {}
    assert text == f"error: {problem['detail']}" and "Traceback" not in text, text
    return problem | {"text": text}


async def every_tool(client: Client, agent: Agent) -> None:
    """Every tool and every memory tool command, as one agent's session."""
    s = agent.subject
    listed = {t.name: t for t in (await client.list_tools()).tools}
    assert set(listed) == TOOLS
    assert listed["forget"].annotations is not None and listed["forget"].annotations.destructive_hint
    assert listed["recall"].annotations is not None and listed["recall"].annotations.read_only_hint
    assert all(listed[name].output_schema for name in TOOLS)

    ack = await call(client, "remember", subject_id=s, content="Ana prefers tea", purpose=PURPOSE, key="drink")
    assert ack["events"][0]["type"] == "MemoryWritten" and ack["events"][0]["event_id"] and ack["positions"]
    found = await call(client, "recall", subject_id=s, query="tea", purpose=PURPOSE, wait_for=ack["positions"])
    assert [i["content"] for i in found["items"]] == ["Ana prefers tea"]
    assert found["items"][0]["provenance"]["writer"] == agent.principal
    mid = ack["memory_id"]
    newer = await call(client, "remember", subject_id=s, content="Ana prefers coffee", purpose=PURPOSE, key="drink")
    await call(client, "recall", subject_id=s, query="coffee", purpose=PURPOSE, wait_for=newer["positions"])
    detail = await call(client, "get", subject_id=s, memory_id=mid)
    assert detail["memory"]["status"] == "superseded" and detail["memory"]["superseded_by"] == newer["memory_id"]
    history = await call(client, "history", subject_id=s, memory_id=mid)
    assert [h["event_type"] for h in history["history"]] == ["MemoryWritten", "MemorySuperseded"]
    assert {m["memory_id"] for m in (await call(client, "list", subject_id=s))["memories"]} == {newer["memory_id"]}

    await memory_tool_commands(client, s)

    unconfirmed = await refused(client, "forget", subject_id=s, memory_ids=[newer["memory_id"]])
    assert unconfirmed["field"] == "confirm" and unconfirmed["status"] == 422
    erased = await call(client, "forget", subject_id=s, memory_ids=[newer["memory_id"]], confirm=True)
    assert erased["request_id"].startswith("er-") and erased["events"][0]["type"] == "ErasureRequested"
    # the preference it superseded is live again, awaiting confirmation (its replacement is erased)
    assert erased["reinstated"] == [mid] and erased["earlier_versions"] == [mid]
    traced = await call(client, "trace", request_id=erased["request_id"])
    assert traced["subject_id"] == s and traced["memory_ids"] == [newer["memory_id"]]
    missing = await refused(client, "remember", subject_id=s, purpose=PURPOSE)
    assert missing["field"] == "content"
    secret = "the deploy key is AKIAIOSFODNN7EXAMPLE"  # screened at the ledger, as every way in
    leaked = await refused(client, "remember", subject_id=s, content=secret, purpose=PURPOSE)
    assert leaked["field"] == "content" and "AWS Access Key" in leaked["rule"] and "AKIA" not in json.dumps(leaked)


async def memory_tool_commands(client: Client, s: str) -> None:
    """view, create, str_replace, insert, rename and delete, with a stale precondition."""

    async def memory(**arguments: Any) -> dict[str, Any]:
        return await call(client, "memory", subject_id=s, **arguments)

    assert (await memory(command="view", path="/memories"))["output"].endswith("0B\t/memories")
    made = await memory(command="create", path="/memories/notes/todo.md", file_text="buy milk\ncall Bo\n")
    assert made["events"][0]["type"] == "MemoryWritten" and made["files"][0]["path"] == "/memories/notes/todo.md"
    sha = made["files"][0]["content_sha256"]
    listing = (await memory(command="view", path="/memories"))["output"]
    assert "\t/memories/notes/\n" in listing and listing.endswith("\t/memories/notes/todo.md")
    lines = await memory(command="view", path="/memories/notes/todo.md", view_range=[2, -1])
    assert lines["output"].endswith("     2\tcall Bo") and sha in lines["output"]
    edited = await memory(command="str_replace", path="/memories/notes/todo.md", old_str="milk", new_str="oat milk")
    assert {e["type"] for e in edited["events"]} == {"MemoryWritten", "MemorySuperseded"}
    stale = await refused(
        client, "memory", subject_id=s, command="insert", path="/memories/notes/todo.md", insert_line=0,
        insert_text="# Todo", content_sha256=sha,
    )  # fmt: skip
    assert stale["status"] == 409 and stale["field"] == "content_sha256"
    fresh = edited["files"][0]["content_sha256"]
    await memory(
        command="insert", path="/memories/notes/todo.md", insert_line=0, insert_text="# Todo", content_sha256=fresh
    )
    moved = await memory(command="rename", old_path="/memories/notes", new_path="/memories/done")
    assert moved["files"][0]["path"] == "/memories/done/todo.md"
    text = (await memory(command="view", path="/memories/done/todo.md"))["output"]
    assert "# Todo" in text and "oat milk" in text and "call Bo" in text
    gone = await memory(command="delete", path="/memories/done")
    assert gone["request_id"].startswith("er-") and len(gone["erased"]) == 4  # every revision of the file
    assert (await refused(client, "memory", subject_id=s, command="view", path="/memories/done"))["status"] == 404


def test_every_tool_over_streamable_http(served: serving.Served) -> None:
    agent = Agent(served, "http")

    async def run() -> None:
        async with agent.http() as client:
            await every_tool(client, agent)

    asyncio.run(run())


def test_every_tool_over_stdio_and_a_revoked_key_stops_at_once(served: serving.Served) -> None:
    agent = Agent(served, "stdio")

    async def run() -> None:
        async with agent.stdio() as client:
            await every_tool(client, agent)
            served.cli.json("keys", "revoke", agent.token.split("_")[1])
            revoked = await refused(client, "recall", subject_id=agent.subject, query="x", purpose=PURPOSE)
            assert revoked["status"] == 401 and revoked["field"] == "authorization"

    asyncio.run(run())


def test_a_key_for_s2_gets_nothing_of_s1_from_any_tool(served: serving.Served, admin: LedgerClient) -> None:
    s1, s2 = Agent(served, "s1"), Agent(served, "s2")
    secret = "S1 secret: the door code is 4321"

    async def run() -> None:
        async with s1.http() as one:
            mem = await call(one, "remember", subject_id=s1.subject, content=secret, purpose=PURPOSE, turn_id="turn-s1")
            await call(one, "memory", subject_id=s1.subject, command="create", path="/memories/s1.md", file_text=secret)
            gone = await call(one, "remember", subject_id=s1.subject, content="S1 to erase", purpose=PURPOSE)
            request = (await call(one, "forget", subject_id=s1.subject, memory_ids=[gone["memory_id"]], confirm=True))[
                "request_id"
            ]
        a, b, mid = s1.subject, s2.subject, mem["memory_id"]
        attempts: list[tuple[str, dict[str, Any]]] = [
            ("remember", {"subject_id": a, "content": "x", "purpose": PURPOSE}),
            ("recall", {"subject_id": a, "query": "door code", "purpose": PURPOSE}),
            ("get", {"subject_id": a, "memory_id": mid}),
            ("get", {"subject_id": b, "memory_id": mid}),  # S1's memory under S2's own subject
            ("list", {"subject_id": a, "include_all": True}),
            ("history", {"subject_id": a, "memory_id": mid}),
            ("history", {"subject_id": b, "memory_id": mid}),
            ("forget", {"subject_id": a, "memory_ids": [mid], "confirm": True}),
            ("forget", {"subject_id": b, "memory_ids": [mid], "confirm": True}),
            ("forget", {"subject_id": a, "source": "turn-s1", "confirm": True}),
            ("trace", {"request_id": request}),
            *(
                ("memory", {"subject_id": a, **command})
                for command in (
                    {"command": "view", "path": "/memories"},
                    {"command": "view", "path": "/memories/s1.md"},
                    {"command": "create", "path": "/memories/s2.md", "file_text": "x"},
                    {"command": "str_replace", "path": "/memories/s1.md", "old_str": "4321", "new_str": "0"},
                    {"command": "insert", "path": "/memories/s1.md", "insert_line": 0, "insert_text": "x"},
                    {"command": "rename", "old_path": "/memories/s1.md", "new_path": "/memories/x.md"},
                    {"command": "delete", "path": "/memories/s1.md"},
                )
            ),
        ]
        before = {e.id for e in admin.audit(limit=1000).entries}
        async with s2.http() as two:
            for tool, arguments in attempts:
                problem = await refused(two, tool, **arguments)
                assert problem["status"] in (403, 404), (tool, arguments, problem)
                for leaked in (secret, "door code", "turn-s1", "s1.md", gone["memory_id"]):
                    assert leaked not in json.dumps(problem), (tool, arguments, problem)
                if arguments.get("subject_id") == b:
                    assert problem["status"] == 404  # another subject's memory is not revealed
        entries = [e for e in admin.audit(limit=1000).entries if e.id not in before]
        refusals = [e for e in entries if e.outcome == "refused"]
        assert len(refusals) >= len(attempts) and {e.principal for e in refusals} == {s2.principal}
        assert all(e.route.startswith("mcp ") for e in refusals) and all(secret not in e.reason for e in refusals)
        # no credential, a malformed one, a revoked one: 401 with WWW-Authenticate, audited
        served.cli.json("keys", "revoke", s2.token.split("_")[1])
        for headers in ({}, {"Authorization": "Bearer nonsense"}, {"Authorization": f"Bearer {s2.token}"}):
            r = httpx.post(
                served.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers
            )
            assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer"), r.text
            assert r.headers["content-type"] == "application/problem+json"
        assert admin.audit(limit=3).entries[0].route == "POST /mcp"

    asyncio.run(run())


BAD_PATHS = [
    "/memories/../secret.md",
    "/memories/notes/../../etc/passwd",
    "/etc/passwd",
    "memories/notes.md",
    "/memoriesX/notes.md",
    "/memories/%2e%2e/notes.md",
    "/memories/%252e%252e/notes.md",
    "/memories/%c0%ae%c0%ae/notes.md",
    "/memories/\uff0e\uff0e/notes.md",
    "/memories/\u2025/notes.md",
    "/memories/..\\secret.md",
    "/memories/a\x00.md",
    "/memories/\u202enotes.md",
    "/memories//notes.md",
    "/memories/./notes.md",
    "/memories/.hidden",
    "/memories/" + "n" * 256,
    "/memories/" + "/".join(["d"] * 17) + "/f.md",
    "/memories/" + "x/" * 300 + "f.md",
]


def test_path_traversal_and_oversized_inputs_are_refused(served: serving.Served, admin: LedgerClient) -> None:
    agent = Agent(served, "paths")
    ends = admin.lag().end_offsets

    async def run() -> None:
        async with agent.http() as client:
            for path in BAD_PATHS:
                for arguments in (
                    {"command": "create", "path": path, "file_text": "x"},
                    {"command": "view", "path": path},
                    {"command": "rename", "old_path": "/memories/a.md", "new_path": path},
                ):
                    problem = await refused(client, "memory", subject_id=agent.subject, **arguments)
                    assert problem["status"] == 422 and problem["field"] in ("path", "new_path"), (path, problem)
            too_long = await refused(
                client, "memory", subject_id=agent.subject, command="create", path="/memories/big.md",
                file_text="x" * 65_537,
            )  # fmt: skip
            assert too_long["field"] == "file_text" and "65,536" in too_long["rule"]

    asyncio.run(run())
    with LedgerClient(served.url, agent.token) as client:
        with pytest.raises(InvalidRequest) as bad:
            client.memory_tool(agent.subject, {"command": "create", "path": BAD_PATHS[0], "file_text": "x"})
        assert bad.value.field == "path"
    big = {"command": "create", "path": "/memories/big.md", "file_text": "x" * 1_048_576}
    auth = {"Authorization": f"Bearer {agent.token}"}
    r = httpx.post(f"{served.url}/v1/subjects/{agent.subject}/memory-tool", json=big, headers=auth)
    assert r.status_code == 413 or (r.status_code == 422 and r.json()["field"] == "file_text"), r.text
    huge = "x" * (3 * 1024 * 1024)
    r = httpx.post(served.url + "/mcp", content=huge, headers=auth | {"content-type": "application/json"})
    assert r.status_code == 413, r.text
    assert admin.lag().end_offsets == ends  # nothing was written


def test_an_argument_a_tool_does_not_take_is_refused_naming_it(served: serving.Served, admin: LedgerClient) -> None:
    agent = Agent(served, "typos")
    s = agent.subject
    ends = admin.lag().end_offsets

    async def run() -> None:
        async with agent.http() as client:
            schemas = {t.name: t.input_schema for t in (await client.list_tools()).tools}
            assert {name: schema.get("additionalProperties") for name, schema in schemas.items()} == dict.fromkeys(
                TOOLS, False
            )
            typo = await refused(
                client, "remember", subject_id=s, content="Ana has asthma", purpose=PURPOSE, sensitivty="restricted"
            )
            assert (typo["status"], typo["field"]) == (422, "sensitivty")
            assert typo["rule"] == "Extra inputs are not permitted"
            forget = await refused(client, "forget", subject_id=s, memory_ids=["m-1"], confirm=True, with_histroy=True)
            assert forget["field"] == "with_histroy" and forget["text"] == (
                "error: with_histroy: Extra inputs are not permitted"
            )
            assert (await call(client, "list", subject_id=s, include_all=True))["memories"] == []

    asyncio.run(run())
    assert admin.lag().end_offsets == ends  # nothing was written


class ScriptedModel:
    """The Anthropic API, offline: answers each request of the SDK's tool runner with
    the next scripted assistant turn (tool-use blocks of the memory tool), and keeps
    the tool results the runner sent back."""

    def __init__(self, turns: list[list[dict[str, Any]]], before: dict[int, Callable[[], object]]) -> None:
        self.turns = turns
        self.before = before
        self.served = 0
        self.results: list[dict[str, Any]] = []

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        last = body["messages"][-1]
        if isinstance(last["content"], list):
            self.results += [b for b in last["content"] if b.get("type") == "tool_result"]
        self.before.get(self.served, lambda: None)()
        self.served += 1
        turn = self.turns.pop(0) if self.turns else [{"type": "text", "text": "done"}]
        content = [
            {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:12]}", "name": "memory", "input": block}
            if "command" in block
            else block
            for block in turn
        ]
        stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
        message = {
            "id": f"msg_{uuid.uuid4().hex[:12]}", "type": "message", "role": "assistant", "model": "offline",
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }  # fmt: skip
        return httpx2.Response(200, json=message)


def test_the_anthropic_sdk_adapter_with_a_scripted_model(served: serving.Served) -> None:
    agent, other = Agent(served, "sdk"), Agent(served, "sdk-other")
    path = "/memories/profile.md"
    with LedgerClient(served.url, agent.token) as client, LedgerClient(served.url, other.token) as elsewhere:

        def someone_else_edits() -> None:  # another agent of the subject, between the model's view and its edit
            client.memory_tool(
                agent.subject, {"command": "str_replace", "path": path, "old_str": "Ana", "new_str": "Ana B."}
            )

        edit = {"command": "str_replace", "path": path, "old_str": "Lyon", "new_str": "Paris"}
        model = ScriptedModel(
            [
                [{"command": "view", "path": "/memories"}],
                [{"command": "create", "path": path, "file_text": "name: Ana\ndrink: tea\n"}],
                [{"command": "str_replace", "path": path, "old_str": "tea", "new_str": "coffee"}],
                [{"command": "insert", "path": path, "insert_line": 2, "insert_text": "city: Lyon"}],
                [{"command": "view", "path": path}],
                [edit],
                [{"command": "view", "path": path}, edit],
                [{"command": "rename", "old_path": path, "new_path": "/memories/people/ana.md"}],
                [{"command": "view", "path": "/memories/../etc/passwd"}],
                [{"command": "delete", "path": "/memories/people"}],
            ],
            before={5: someone_else_edits},
        )  # fmt: skip
        tool = LedgerMemoryTool(client, agent.subject)
        anthropic = Anthropic(
            api_key="offline", http_client=httpx2.Client(transport=httpx2.MockTransport(model.handle))
        )
        runner = anthropic.beta.messages.tool_runner(
            model="offline", max_tokens=256, tools=[tool], messages=[{"role": "user", "content": "Remember me."}]
        )
        assert runner.until_done().content[0].type == "text"
        texts = [str(r["content"]) for r in model.results]
        failed = [i for i, r in enumerate(model.results) if r.get("is_error")]
        assert len(texts) == 11 and failed == [5, 9], texts
        assert texts[0].endswith("0B\t/memories") and texts[1].startswith("Created /memories/profile.md")
        assert "coffee" in texts[2] and "city: Lyon" in texts[3] and "name: Ana" in texts[4]
        assert texts[5].startswith("error: content_sha256: ") and "view it again" in texts[5]  # the stale edit
        assert "Ana B." in texts[6] and "Paris" in texts[7]  # viewed again, then the edit goes through
        assert texts[8].startswith("Moved") and texts[9].startswith("error: path: ")
        assert "Erasure request er-" in texts[10] and tool.last_result is not None
        request_id, erased = tool.last_result.request_id, tool.last_result.erased
        assert request_id is not None and len(erased) == 6  # created, 4 edits (one by the other agent), moved
        assert client.memories(agent.subject).memories == []
        wait_until(lambda: client.trace(request_id).verdict == "complete", 90, "the delete's erasure to complete")
        with pytest.raises(Forbidden):  # the adapter's subject is checked against the key, as on any route
            elsewhere.memory_tool(agent.subject, {"command": "view", "path": "/memories"})
        with pytest.raises(NotFound):
            client.memory_tool(agent.subject, {"command": "view", "path": path})
        with pytest.raises(Conflict):
            client.memory_tool(
                agent.subject,
                {"command": "create", "path": "/memories/a.md", "file_text": "x", "content_sha256": "0" * 64},
            )


def test_stdio_without_serve_opens_the_data_directory_itself(tmp_path: Path) -> None:
    env = serving.base_env(tmp_path)
    cli = Cli(env)
    token = str(cli.json("keys", "create", "agent-solo", "--scope=read", "--scope=write", "--subject=solo")["token"])
    no_key = cli.run("mcp", check=False)
    assert no_key.returncode == 2 and no_key.stderr.startswith("error: api_key: ") and "Traceback" not in no_key.stderr

    async def run() -> None:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "workers", "mcp"], env=env | {"MEMLEDGER_API_KEY": token}
        )
        async with Client(params, read_timeout_seconds=120) as client:
            made = await call(
                client, "memory", subject_id="solo", command="create", path="/memories/a.md", file_text="solo note"
            )
            found = await call(
                client, "recall", subject_id="solo", query="solo note", purpose=PURPOSE, wait_for=made["positions"]
            )
            assert [i["content"] for i in found["items"]] == ["solo note"]  # the projections run in the mcp process

    asyncio.run(run())
    assert not (Path(env["MEMLEDGER_DATA_DIR"]) / "serve.json").exists()
