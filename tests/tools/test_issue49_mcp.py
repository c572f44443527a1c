"""MCP tools through the arbiter, against real third-party servers (issue 49).

server-everything (the SDK's own test server, over stdio and streamable HTTP),
server-filesystem and mcp-server-time, installed by scripts/ensure_mcp_servers.sh: listing,
calls, annotations -> locks, output mapping, errors, timeouts with cancellation, a crash and
its one restart, pinned listings, closing with the arbiter.
"""

from __future__ import annotations

import base64
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import BaseModel

from stargraph import END, START, Graph, RunContext
from stargraph.checkpoint import MemoryStore
from stargraph.errors import McpServerError, ToolArgumentError, ToolError, ToolTimeoutError
from stargraph.tools import (
    Arbiter,
    McpListing,
    McpServer,
    ToolCall,
    ToolRegistry,
    ToolResult,
    failure_of,
)
from tests import mcp_servers

pytestmark = pytest.mark.mcp


@pytest.fixture
def everything() -> Iterator[McpServer]:
    server = McpServer(command=mcp_servers.everything())
    yield server
    server.close()


def _arbiter(workspace: Path, *servers: McpServer) -> Arbiter:
    return Arbiter(ToolRegistry.build(mcp=servers), workspace=workspace)


def test_issue49_listing_gives_canonical_ids_and_runtime_views(
    workspace: Path, tmp_path: Path
) -> None:
    files = tmp_path / "files"
    files.mkdir()
    fs = McpServer(command=mcp_servers.filesystem(files), name="fs")
    clock = McpServer(command=mcp_servers.time_server(), name="time")
    with _arbiter(workspace, fs, clock) as arbiter:
        registry = arbiter.registry
        read = registry.resolve("mcp.fs.read_text_file").spec
        write = registry.resolve("mcp.fs.write_file").spec
        mkdir = registry.resolve("mcp.fs.create_directory").spec
        now = registry.resolve("mcp.time.get_current_time").spec
        # The version is the server's own (server-filesystem reports 0.2.0).
        assert read.id == "mcp.fs.read_text_file@0.2.0"
        # readOnlyHint -> a shared lock on the server; openWorldHint unset -> MCP's default
        # (open world), so the read is external and audited.
        assert (read.locks, read.side_effect) == (("mcp:fs:S",), "external")
        # destructiveHint -> external, exclusive.
        assert (write.locks, write.side_effect, write.idempotent) == (
            ("mcp:fs:X",),
            "external",
            True,
        )
        # Not read-only, not destructive, but MCP's open-world default: still external.
        assert mkdir.side_effect == "external"
        # mcp-server-time says read-only, closed world: a plain read under an S lock.
        assert (now.side_effect, now.locks, now.network) == ("read", ("mcp:time:S",), False)
        assert now.description == clock.listing().tools[0].description
        # The model-facing schema is the server's, translated once.
        assert now.input_schema["required"] == ["timezone"]
        assert fs.started
        assert clock.started


def test_issue49_overrides_change_a_tools_runtime_view(workspace: Path, tmp_path: Path) -> None:
    fs = McpServer(
        command=mcp_servers.filesystem(tmp_path),
        name="fs",
        overrides={"write_file": {"locks": ["file:{path}:X"], "timeout_s": 5.0}},
    )
    with _arbiter(workspace, fs) as arbiter:
        spec = arbiter.registry.resolve("mcp.fs.write_file").spec
        assert (spec.locks, spec.timeout_s) == (("file:{path}:X",), 5.0)


def test_issue49_bad_server_configuration_is_a_typed_error() -> None:
    from stargraph.errors import ToolSpecError

    with pytest.raises(ToolSpecError, match=r"exactly one of command="):
        McpServer()
    with pytest.raises(ToolSpecError, match=r"cannot override \['description'\]"):
        McpServer(command=["x"], overrides={"echo": {"description": "trust me"}})


def test_issue49_calls_map_text_structured_content_links_and_images(
    everything: McpServer, workspace: Path
) -> None:
    with _arbiter(workspace, everything) as arbiter:
        total = arbiter.dispatch(ToolCall(tool="mcp.everything.get-sum", args={"a": 2, "b": 3}))
        assert total.summary == "The sum of 2 and 3 is 5."
        weather = arbiter.dispatch(
            ToolCall(tool="mcp.everything.get-structured-content", args={"location": "Chicago"})
        )
        structured: Any = weather.payload
        assert set(structured["structured"]) >= {"temperature", "conditions"}
        links = arbiter.dispatch(
            ToolCall(tool="mcp.everything.get-resource-links", args={"count": 2})
        )
        linked: Any = links.payload
        uris = [r["uri"] for r in linked["resources"]]
        assert len(uris) == 2
        assert all(str(u).startswith("demo://") for u in uris)
        image = arbiter.dispatch(ToolCall(tool="mcp.everything.get-tiny-image", args={}))
        payload: Any = image.payload
        (art,) = payload["artifacts"]
        assert art["mime_type"] == "image/png"
        # The image bytes are an artifact of their own, not base64 in the payload.
        png = arbiter.artifacts.get(str(art["artifact_ref"]))
        assert png.startswith(b"\x89PNG")
        assert len(png) == art["bytes"]
        assert base64.b64encode(png).decode() not in orjson.dumps(payload).decode()
        # Every call is in the hash-chained commit log, with its audit record (external).
        records = arbiter.commit_log.records()
        assert [(r.tool, r.kind) for r in records[:2]] == [
            ("mcp.everything.get-sum@2.0.0", "call"),
            ("mcp.everything.get-sum@2.0.0", "audit"),
        ]
        assert arbiter.commit_log.verify_chain() is None


def test_issue49_is_error_is_a_typed_failure_the_model_sees(
    workspace: Path, tmp_path: Path
) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    fs = McpServer(command=mcp_servers.filesystem(allowed), name="fs")
    with _arbiter(workspace, fs) as arbiter:
        with pytest.raises(ToolError, match="reported an error") as caught:
            arbiter.dispatch(
                ToolCall(tool="mcp.fs.read_text_file", args={"path": str(tmp_path / "x.txt")})
            )
        failure = failure_of(caught.value)
        assert failure.details == {"mcp_is_error": True}
        assert "outside allowed directories" in failure.message or "denied" in failure.message
        observation = ToolResult.from_error(caught.value, call_id="c1").to_tool_message("core")
        assert "reported an error" in str(observation["content"])
        assert arbiter.commit_log.records()[0].status == "error"


def test_issue49_arguments_are_validated_before_the_server_sees_them(
    everything: McpServer, workspace: Path
) -> None:
    with _arbiter(workspace, everything) as arbiter:
        with pytest.raises(ToolArgumentError) as caught:
            arbiter.dispatch(ToolCall(tool="mcp.everything.get-sum", args={"a": "2", "b": 3}))
        assert [f.field for f in failure_of(caught.value).fields] == ["a"]
        assert arbiter.commit_log.records()[0].status == "invalid"


def test_issue49_calls_write_and_read_through_the_filesystem_server(
    workspace: Path, tmp_path: Path
) -> None:
    files = tmp_path / "files"
    files.mkdir()
    fs = McpServer(command=mcp_servers.filesystem(files), name="fs")
    target = str(files / "note.txt")
    with _arbiter(workspace, fs) as arbiter:
        arbiter.dispatch(
            ToolCall(tool="mcp.fs.write_file", args={"path": target, "content": "hello"})
        )
        read = arbiter.dispatch(ToolCall(tool="mcp.fs.read_text_file", args={"path": target}))
        assert read.summary == "hello"
    assert (files / "note.txt").read_text() == "hello"


def test_issue49_timeout_cancels_the_mcp_request(workspace: Path, tmp_path: Path) -> None:
    sent = tmp_path / "client-to-server.jsonl"
    # What the client writes is teed to a file on its way to the real server.
    command = ["sh", "-c", f'tee "{sent}" | exec "{mcp_servers.everything()[0]}"']
    server = McpServer(
        command=command,
        name="everything",
        overrides={"trigger-long-running-operation": {"timeout_s": 0.5}},
    )
    with _arbiter(workspace, server) as arbiter:
        started = time.monotonic()
        with pytest.raises(ToolTimeoutError, match="request was cancelled"):
            arbiter.dispatch(
                ToolCall(
                    tool="mcp.everything.trigger-long-running-operation",
                    args={"duration": 30, "steps": 30},
                )
            )
        assert time.monotonic() - started < 20  # far below the operation's 30 s
        assert arbiter.commit_log.records()[0].status == "timeout"
        # The server is still there, and the cancellation reached it.
        echo = arbiter.dispatch(ToolCall(tool="mcp.everything.echo", args={"message": "hi"}))
        assert echo.summary == "Echo: hi"
        messages = [orjson.loads(line) for line in sent.read_text().splitlines() if line]
        cancels = [m for m in messages if m.get("method") == "notifications/cancelled"]
        calls = [m for m in messages if m.get("method") == "tools/call"]
        assert [c["params"]["requestId"] for c in cancels] == [calls[0]["id"]]


def test_issue49_an_mcp_call_runs_on_the_calling_thread(
    everything: McpServer, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The body only waits for the session's thread, within the call's deadline: handing it
    # to an arbiter worker would add two thread wake-ups to every call (the dispatch
    # overhead benchmarks/bench_mcp.py measures) and guard nothing.
    threads: list[threading.Thread] = []
    call = everything.call

    def recorded(tool: str, args: Any, *, timeout_s: float) -> Any:
        threads.append(threading.current_thread())
        return call(tool, args, timeout_s=timeout_s)

    monkeypatch.setattr(everything, "call", recorded)
    with _arbiter(workspace, everything) as arbiter:
        echo = arbiter.dispatch(ToolCall(tool="mcp.everything.echo", args={"message": "hi"}))
        assert echo.summary == "Echo: hi"
        done: list[str] = []
        worker = threading.Thread(
            target=lambda: done.append(
                arbiter.dispatch(
                    ToolCall(tool="mcp.everything.echo", args={"message": "there"})
                ).summary
            )
        )
        worker.start()
        worker.join(timeout=60)  # only catches a hang
    assert done == ["Echo: there"]
    assert threads == [threading.main_thread(), worker]


def test_issue49_a_crashed_server_is_restarted_once_then_a_typed_error(
    workspace: Path, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pid"
    command = ["sh", "-c", f'echo $$ > "{pidfile}"; exec "{mcp_servers.everything()[0]}"']
    server = McpServer(command=command, name="everything")

    def echo(arbiter: Arbiter) -> ToolResult:
        return arbiter.dispatch(ToolCall(tool="mcp.everything.echo", args={"message": "x"}))

    def crash() -> None:
        pid = int(pidfile.read_text())
        os.kill(pid, signal.SIGKILL)
        # Waiting for the kill to land, not for a guessed time: the pid stops existing.
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not _alive(pid), f"the MCP server {pid} outlived SIGKILL for 30 s"

    with _arbiter(workspace, server) as arbiter:
        assert echo(arbiter).summary == "Echo: x"
        crash()
        with pytest.raises(McpServerError, match="exited during a call"):
            echo(arbiter)
        assert echo(arbiter).summary == "Echo: x"  # started again
        assert server.starts == 2
        crash()
        with pytest.raises(McpServerError, match="exited during a call"):
            echo(arbiter)
        with pytest.raises(McpServerError, match="exited again after its one restart"):
            echo(arbiter)
        assert server.starts == 2


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); its /proc status says so.
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):  # reaped between the two looks
        return False


def test_issue49_a_server_that_cannot_start_is_a_typed_error(workspace: Path) -> None:
    server = McpServer(command=[str(workspace / "no-such-server")], name="ghost")
    with pytest.raises(McpServerError, match=r"McpServer\('ghost'.*did not start"):
        ToolRegistry.build(mcp=[server])
    server.close()


def test_issue49_streamable_http(workspace: Path) -> None:
    with mcp_servers.everything_http() as url:
        server = McpServer(url=url, name="everything", headers={"X-Test": "1"})
        with _arbiter(workspace, server) as arbiter:
            echo = arbiter.dispatch(
                ToolCall(tool="mcp.everything.echo", args={"message": "over http"})
            )
            assert echo.summary == "Echo: over http"
        assert not server.started


def test_issue49_a_pinned_listing_builds_tools_without_starting_the_server(
    everything: McpServer, workspace: Path
) -> None:
    pin = McpListing.model_validate_json(everything.listing().model_dump_json())
    everything.close()
    again = McpServer(command=mcp_servers.everything(), listing=pin)
    with _arbiter(workspace, again) as arbiter:
        assert not again.started  # lazily: nothing has been called yet
        echo = arbiter.dispatch(ToolCall(tool="mcp.everything.echo", args={"message": "x"}))
        assert echo.summary == "Echo: x"
        assert again.started


def test_issue49_a_changed_description_is_refused_against_the_pin(
    everything: McpServer, workspace: Path
) -> None:
    listing = everything.listing()
    everything.close()
    tools = list(listing.tools)
    tools[0] = tools[0].model_copy(update={"description": "Echoes back the input string"})
    # The pin holds what a reviewer approved; the live server says something else.
    approved = listing.model_copy(
        update={"tools": (tools[0].model_copy(update={"description": "Approved."}), *tools[1:])}
    )
    server = McpServer(command=mcp_servers.everything(), listing=approved)
    refused = pytest.raises(McpServerError, match=r"differ from its pinned listing.*\['echo'\]")
    with _arbiter(workspace, server) as arbiter, refused:
        arbiter.dispatch(ToolCall(tool="mcp.everything.echo", args={"message": "x"}))


def test_issue49_the_arbiter_closes_its_servers(everything: McpServer, workspace: Path) -> None:
    arbiter = _arbiter(workspace, everything)
    arbiter.dispatch(ToolCall(tool="mcp.everything.echo", args={"message": "x"}))
    assert everything.started
    arbiter.close()
    assert not everything.started
    with pytest.raises(McpServerError, match="was closed with its arbiter"):
        everything.call("echo", {"message": "x"}, timeout_s=5)


def test_issue49_unsupported_schema_keywords_leave_the_tool_out_or_raise(
    everything: McpServer,
) -> None:
    from stargraph.errors import ToolSpecError

    names = {t.info.name for t in everything.tools()}
    assert "gzip-file-as-resource" not in names
    assert "echo" in names
    assert "'format'" in everything.skipped["gzip-file-as-resource"]
    strict = McpServer(command=mcp_servers.everything(), strict=True)
    try:
        with pytest.raises(ToolSpecError, match="gzip-file-as-resource"):
            strict.tools()
    finally:
        strict.close()


class _Steps(BaseModel):
    seen: list[list[str]] = []
    doubled: str = ""


def _unlock(state: _Steps, ctx: RunContext) -> dict[str, Any]:
    arbiter, server = ctx.services["arbiter"], ctx.services["server"]
    arbiter.dispatch(ToolCall(tool="mcp.changing.unlock", args={}))
    deadline = time.monotonic() + 30  # only catches a hang: the server says so at once
    while not server.changed and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.changed
    # Changed, but not inside this step: the registry the step started with stays.
    return {"seen": [list(arbiter.registry.ids)]}


def _use(state: _Steps, ctx: RunContext) -> dict[str, Any]:
    arbiter = ctx.services["arbiter"]
    doubled = arbiter.dispatch(ToolCall(tool="mcp.changing.double", args={"x": 21}))
    return {"seen": [*state.seen, list(arbiter.registry.ids)], "doubled": doubled.summary}


def test_issue49_list_changed_refreshes_the_registry_between_steps(workspace: Path) -> None:
    script = Path(__file__).with_name("mcp_changing_server.py")
    server = McpServer(command=[mcp_servers.python(), str(script)])
    graph = (
        Graph("mcp-changing", state=_Steps)
        .with_node("unlock", _unlock)
        .with_node("use", _use)
        .with_edge(START, "unlock")
        .with_edge("unlock", "use")
        .with_edge("use", END)
    )
    with _arbiter(workspace, server) as arbiter:
        # A run with a store journals each task: the arbiter learns where steps begin.
        app = graph.compile(store=MemoryStore(), services={"arbiter": arbiter, "server": server})
        final = app.invoke({})
    assert final.seen == [
        ["mcp.changing.unlock@1.0.0"],
        ["mcp.changing.double@1.0.0", "mcp.changing.unlock@1.0.0"],
    ]
    assert final.doubled == "42"
