"""A ReAct agent with three tools: a calculator, workspace ``fs.read`` and ``http.fetch``.

Run: ``.venv/bin/python examples/react_agent.py``. Offline by default: the model is the real
``OpenAIChatModel`` (the ``openai`` client over HTTP) talking to
``stargraph.testing.ScriptedOpenAIServer`` on 127.0.0.1, which plays a model that reads a
file, fetches a local web page, computes with the calculator, then answers. The page is
served on 127.0.0.1 too. Against a real endpoint, set ``OPENAI_BASE_URL`` (and
``OPENAI_API_KEY``, ``STARGRAPH_MODEL``; ``STARGRAPH_PROFILE`` names the server kind, else
it is asked of the server; ``STARGRAPH_TIMEOUT`` is the seconds a reply may take, 60 unless
set): the same graph then talks to that model instead.

The loop stops through rules only (``termination/done``, ``termination/max_steps``,
``termination/error_budget``); the run record in the SQLite store names the rule. With
``STARGRAPH_DB=path/runs.db`` the store is kept, and the run replays offline, with no model
and no tools, from the example's directory::

    stargraph replay order-1 --db path/runs.db --graph react_agent:build_graph
"""

from __future__ import annotations

import ast
import contextlib
import operator
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from stargraph.checkpoint import SqliteStore
from stargraph.graph import Graph
from stargraph.llm import OpenAIChatModel, RequestOptions
from stargraph.skills.react import ReactState, react_graph
from stargraph.testing import RecordedRequest, Reply, ScriptedOpenAIServer
from stargraph.tools import Arbiter, ToolRegistry, builtin_tools, tool

CALC = "demo.calc@1.0.0"
FS_READ = "choir.fs.read@1.0.0"
HTTP_FETCH = "choir.http.fetch@1.0.0"
RUN_ID = "order-1"

_OPERATORS: dict[type[ast.AST], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return float(_OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right)))
    raise ValueError(f"unsupported expression element {ast.dump(node)}")


@tool(id=CALC)
def calc(
    expression: Annotated[
        # The length bound is in the schema the model sees; servers that constrain tool
        # arguments with a grammar (llama.cpp) then cannot generate without end.
        str,
        Field(description="Arithmetic: numbers, + - * / ** and ( ).", max_length=80),
    ],
) -> float:
    """Evaluate an arithmetic expression (no names, no calls: safe by construction)."""
    return _evaluate(ast.parse(expression, mode="eval"))


@contextlib.contextmanager
def local_page(text: str) -> Iterator[str]:
    """Serve ``text`` as an HTML page on 127.0.0.1; yields its URL."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = f"<html><body><p>{text}</p></body></html>".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/prices.html"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def scripted_model(page_url: str) -> Callable[[RecordedRequest], Reply]:
    """What a capable model would do, as a function of the conversation so far."""

    def reply(request: RecordedRequest) -> Reply:
        answers = [m["content"] for m in request.messages if m["role"] == "tool"]
        if not answers:
            return Reply.tool_calls(
                # The short names the model is offered: read, fetch, calc.
                [("read", {"path": "order.txt"})],
                content="First I read the order.",
            )
        if len(answers) == 1:
            return Reply.tool_calls(
                [("fetch", {"url": page_url})],
                content="Now the price list.",
            )
        if len(answers) == 2:
            return Reply.tool_calls(
                [("calc", {"expression": "3 * 4.5 + 2 * 1.25"})],
                content="3 widgets at 4.50 and 2 gizmos at 1.25.",
            )
        total = answers[-1]  # the tool's payload itself: the calculator's number
        return Reply.text(f"The order costs {float(total):.2f} EUR.")

    return reply


def build_graph() -> Graph[ReactState]:
    """The agent's graph: the same for every endpoint, so a run replays from it alone."""
    return react_graph(
        tools=[CALC, FS_READ, HTTP_FETCH],
        system_prompt=(
            "You are a careful shop assistant. Read order.txt in the workspace, fetch the "
            "price list at the URL you are given, compute the total with the calculator, "
            "then answer."
        ),
        max_steps=8,
        error_budget=3,
        temperature=0.0,
        # Bounded replies: a small local model may otherwise ramble up to its context size.
        request=RequestOptions(max_tokens=256),
    )


def main() -> None:
    with contextlib.ExitStack() as stack:
        workspace = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        (workspace / "order.txt").write_text("3 widgets, 2 gizmos\n", encoding="utf-8")
        page_url = stack.enter_context(local_page("widget: 4.50 EUR, gizmo: 1.25 EUR"))

        if os.environ.get("OPENAI_BASE_URL"):
            model = OpenAIChatModel(
                os.environ.get("STARGRAPH_MODEL", "gpt-4o-mini"),
                profile=os.environ.get("STARGRAPH_PROFILE", "detect"),
                timeout=float(os.environ.get("STARGRAPH_TIMEOUT", "60")),
            )
        else:
            server = stack.enter_context(ScriptedOpenAIServer(scripted_model(page_url)))
            model = OpenAIChatModel("scripted-model", base_url=server.base_url)
        stack.callback(model.close)

        registry = ToolRegistry.build(builtins=[calc, *builtin_tools()])
        arbiter = stack.enter_context(Arbiter(registry, workspace=workspace))
        db = Path(os.environ.get("STARGRAPH_DB") or workspace / "runs.db")
        store = SqliteStore(db)
        stack.callback(store.close)

        app = build_graph().compile(store=store, services={"model": model, "arbiter": arbiter})
        task = f"How much does my order cost? The price list is at {page_url}"
        final = app.invoke({"task": task}, run_id=RUN_ID)

        for record in final.tool_calls:
            print(f"tool  {record.tool:24} {record.status:8} {record.summary}")
        print(f"final answer: {final.final_answer}")
        print(f"stopped by:   {app.get_run(RUN_ID).stopped_by}")
        print(f"LLM steps:    {final.llm_steps}, tokens: {final.usage.total_tokens}")
        if os.environ.get("STARGRAPH_DB"):
            print(
                f"replay:       stargraph replay {RUN_ID} --db {db} --graph react_agent:build_graph"
            )


if __name__ == "__main__":
    main()
