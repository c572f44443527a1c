"""``stargraph mcp serve`` driven by the MCP SDK's own client (issue 49): graphs listed as
tools with their schemas, a call is a durable run with progress per step, an interrupt is
answered by elicitation or, for a client without it, by a result saying how to answer; over
stdio and streamable HTTP; a cancelled call cancels its run at the next step boundary."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

from stargraph.checkpoint import SqliteStore

STARGRAPH = str(Path(sys.executable).parent / "stargraph")

GRAPH = textwrap.dedent(
    '''
    """Refund approval."""
    from pydantic import BaseModel

    from stargraph import END, START, Graph, RunContext


    class Refund(BaseModel):
        order: str
        amount: float = 0.0
        approved: str = ""
        paid: bool = False


    def approve(state: Refund, ctx: RunContext) -> dict:
        return {"approved": str(ctx.interrupt({"order": state.order, "amount": state.amount}))}


    def pay(state: Refund) -> dict:
        return {"paid": state.approved == "yes"}


    graph = (
        Graph("refund", state=Refund)
        .with_node("approve", approve)
        .with_node("pay", pay)
        .with_edge(START, "approve")
        .with_edge("approve", "pay")
        .with_edge("pay", END)
    )
    '''
)


def _text(result: Any) -> str:
    text: str = result.content[0].text
    return text


def _params(tmp_path: Path) -> Any:
    from mcp.client.stdio import StdioServerParameters

    (tmp_path / "refund.py").write_text(GRAPH)
    return StdioServerParameters(
        command=STARGRAPH,
        args=["mcp", "serve", "refund.py", "--db", str(tmp_path / "runs.db")],
        cwd=str(tmp_path),
        # The server's environment is the SDK's minimal one; this tree's sources go first.
        env={k: os.environ[k] for k in ("PATH", "PYTHONPATH") if k in os.environ},
    )


def test_issue49_serve_lists_graphs_and_answers_an_interrupt_by_elicitation(
    tmp_path: Path,
) -> None:
    import mcp_types as types
    from mcp import Client

    asked: list[str] = []
    steps: list[float] = []

    async def _elicit(_ctx: Any, params: Any) -> Any:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"response": '"yes"'})

    async def _progress(done: float, _total: float | None, _message: str | None) -> None:
        steps.append(done)

    # The SDK types its callbacks as protocols; these plain functions fit them.
    elicit: Any = _elicit
    progress: Any = _progress

    async def main() -> Any:
        async with Client(_params(tmp_path), elicitation_callback=elicit, mode="legacy") as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert set(tools) == {"refund", "stargraph_resume"}
            assert tools["refund"].input_schema["required"] == ["order"]
            assert "paid" in tools["refund"].output_schema["properties"]  # type: ignore[index]
            return await c.call_tool(
                "refund", {"order": "A-17", "amount": 12.5}, progress_callback=progress
            )

    result = asyncio.run(asyncio.wait_for(main(), 120))
    assert not result.is_error, result
    assert result.structured_content["paid"] is True
    assert result.structured_content["approved"] == "yes"
    assert len(asked) == 1
    assert "A-17" in asked[0]
    assert steps  # a progress notification per committed step
    run_id = result.meta["stargraph/run_id"]
    with SqliteStore(str(tmp_path / "runs.db")) as store:
        assert store.get_run(run_id).status == "done"


def test_issue49_serve_without_elicitation_returns_how_to_answer(tmp_path: Path) -> None:
    import orjson
    from mcp import Client

    async def main() -> tuple[Any, Any]:
        async with Client(_params(tmp_path)) as client:
            waiting = await client.call_tool("refund", {"order": "B-9"})
            assert waiting.is_error  # no output yet: the run waits
            told = orjson.loads(_text(waiting))
            assert told["status"] == "interrupted"
            assert told["payload"] == {"order": "B-9", "amount": 0.0}
            assert "stargraph_resume" in told["how_to_answer"]
            done = await client.call_tool(
                "stargraph_resume", {"run_id": told["run_id"], "response": "no"}
            )
            return told, done

    told, done = asyncio.run(asyncio.wait_for(main(), 120))
    assert done.structured_content["paid"] is False
    with SqliteStore(str(tmp_path / "runs.db")) as store:
        assert store.get_run(told["run_id"]).status == "done"


def test_issue49_serve_refuses_input_that_does_not_fit(tmp_path: Path) -> None:
    from mcp import Client

    async def main() -> Any:
        async with Client(_params(tmp_path)) as client:
            return await client.call_tool("refund", {"amount": 3})

    result = asyncio.run(asyncio.wait_for(main(), 120))
    assert result.is_error
    assert "order" in _text(result)


def test_issue49_serve_over_http_answers_an_interrupt_by_elicitation(tmp_path: Path) -> None:
    import mcp_types as types
    from mcp import Client

    from tests.mcp_conformance.run import serving_graphs

    asked: list[str] = []

    async def _elicit(_ctx: Any, params: Any) -> Any:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"response": '"yes"'})

    elicit: Any = _elicit
    (tmp_path / "refund.py").write_text(GRAPH)
    with serving_graphs(tmp_path, ["refund.py"]) as url:

        async def main() -> Any:
            async with Client(url, elicitation_callback=elicit, mode="legacy") as client:
                tools = {t.name for t in (await client.list_tools()).tools}
                assert tools == {"refund", "stargraph_resume"}
                return await client.call_tool("refund", {"order": "H-1", "amount": 4.0})

        result = asyncio.run(asyncio.wait_for(main(), 120))
    assert not result.is_error, result
    assert result.structured_content == {
        "order": "H-1",
        "amount": 4.0,
        "approved": "yes",
        "paid": True,
    }
    assert len(asked) == 1
    with SqliteStore(str(tmp_path / "runs.db")) as store:
        assert store.get_run(result.meta["stargraph/run_id"]).status == "done"


SLOW = textwrap.dedent(
    '''
    """Three steps; the second waits until the test writes to the named pipe `release`."""

    from pydantic import BaseModel

    from stargraph import END, START, Graph


    class Job(BaseModel):
        started: bool = False
        waited: bool = False
        finished: bool = False


    def start(state: Job) -> dict:
        return {"started": True}


    def wait(state: Job) -> dict:
        # Opening a FIFO to read blocks until a writer opens it: an event across processes.
        with open("release") as pipe:
            pipe.read()
        return {"waited": True}


    def finish(state: Job) -> dict:
        return {"finished": True}


    graph = (
        Graph("slow", state=Job)
        .with_node("start", start)
        .with_node("wait", wait)
        .with_node("finish", finish)
        .with_edge(START, "start")
        .with_edge("start", "wait")
        .with_edge("wait", "finish")
        .with_edge("finish", END)
    )
    '''
)


def test_issue49_a_cancelled_call_cancels_its_run_at_the_next_step_boundary(
    tmp_path: Path,
) -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    (tmp_path / "slow.py").write_text(SLOW)
    os.mkfifo(tmp_path / "release")
    db = tmp_path / "runs.db"
    params = StdioServerParameters(
        command=STARGRAPH,
        args=["mcp", "serve", "slow.py", "--db", str(db)],
        cwd=str(tmp_path),
        env={k: os.environ[k] for k in ("PATH", "PYTHONPATH") if k in os.environ},
    )

    def _release() -> None:
        with (tmp_path / "release").open("w"):  # waits for the node to open its end
            pass

    def _runs() -> list[Any]:
        with SqliteStore(str(db)) as store:
            return store.list_runs()

    async def main() -> list[Any]:
        first_step = asyncio.Event()

        async def _progress(done: float, _total: float | None, _message: str | None) -> None:
            first_step.set()

        progress: Any = _progress
        async with Client(params, mode="legacy") as client:
            call = asyncio.create_task(client.call_tool("slow", {}, progress_callback=progress))
            await first_step.wait()  # step 1 committed: the run is in its blocked step 2
            call.cancel()  # the SDK sends notifications/cancelled for the request
            with contextlib.suppress(asyncio.CancelledError):
                await call
            # The step in flight finishes and commits; then the run stops, cancelled.
            await asyncio.to_thread(_release)
            while not (runs := _runs()) or runs[0].status == "running":
                await asyncio.sleep(0.02)
            return runs

    runs = asyncio.run(asyncio.wait_for(main(), 120))  # the deadline only catches a hang
    assert len(runs) == 1
    run = runs[0]
    assert run.status == "cancelled"
    assert "cancelled the call" in (run.stopped_by or "")
    # Step 2 committed (its node was running when the call was cancelled); step 3 never ran.
    assert _values(db, run.run_id) == {"started": True, "waited": True, "finished": False}


def _values(db: Path, run_id: str) -> dict[str, Any]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("slow_graph", db.parent / "slow.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with SqliteStore(str(db)) as store:
        app = module.graph.compile(store=store)
        values: dict[str, Any] = app.get_state(run_id).model_dump()
    return values


def test_issue49_serve_over_http_on_a_taken_port_is_a_usage_error(tmp_path: Path) -> None:
    import socket
    import subprocess

    (tmp_path / "refund.py").write_text(GRAPH)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        where = ["--db", "runs.db", "--http", f"127.0.0.1:{port}"]
        done = subprocess.run(
            [STARGRAPH, "mcp", "serve", "refund.py", *where],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,  # a hang, not a slow start
            check=False,
        )
    assert done.returncode == 2, done.stderr
    assert f"--http 127.0.0.1:{port}: cannot listen there" in done.stderr
    assert "fix: choose a free port" in done.stderr
    assert "serving on" not in done.stderr
