"""What a model call costs on the client side, what the first one adds, and import weight.

``llmcall`` section of ``python -m benchmarks``:

* **Per call**, against the scripted server in this process, one 22-message ReAct-style
  conversation with two tools: raw HTTP (``http.client`` on a kept-alive connection posting
  the body bytes and parsing the reply with ``orjson``), the bare ``openai`` client's
  ``chat.completions.create``, the same plus the ``model_dump`` + ``ChatResponse.from_openai``
  an ``OpenAIChatModel`` used to add, and ``OpenAIChatModel.complete`` as it is. The rows are
  interleaved within each round and the table shows the median of the rounds; each row's
  cost over raw HTTP is the client's own (the server's share is in every row alike).
* **The first call**: a fresh interpreter compiles a one-node graph whose node calls an
  ``OpenAIChatModel``, then times its first and second ``invoke``; the first may add at most
  :data:`FIRST_CALL_BUDGET_MS` over the second.

:func:`import_times_ms` measures imports for the harness's closing lines: fresh interpreters,
alternating modules, CPU time of the ``import`` statement (wall time too), bytecode written
by one discarded run first as an installed package has it.
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any, Final

import orjson

__all__ = [
    "FIRST_CALL_BUDGET_MS",
    "SECTIONS",
    "first_call_ms",
    "import_times_ms",
    "llmcall_section",
    "per_call_us",
]

FIRST_CALL_BUDGET_MS: Final = 150.0
"""The first model call in a process may cost at most this much more than the second."""

_TOOLS: Final = tuple(
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["query"],
            },
        },
    }
    for name in ("search", "lookup")
)


def _conversation() -> Any:
    """The request: a system prompt, a question and ten tool-call/result rounds."""
    from stargraph.llm import ChatMessage, ChatRequest, ToolCall

    messages = [ChatMessage.system("You answer with tools."), ChatMessage.user("Find it.")]
    for i in range(10):
        call = ToolCall(id=f"call_{i}", name="search", arguments=json.dumps({"query": f"q{i}"}))
        messages.append(ChatMessage.assistant(None, (call,)))
        messages.append(ChatMessage.tool(f"call_{i}", f"result {i}: " + "x" * 200))
    return ChatRequest(messages=tuple(messages), tools=_TOOLS, temperature=0.0)


def per_call_us(calls: int, rounds: int) -> dict[str, float]:
    """Median over ``rounds`` of the µs per call of each client, ``calls`` calls a round."""
    import openai

    from stargraph.llm import ChatResponse, OpenAIChatModel
    from stargraph.testing import Reply, ScriptedOpenAIServer

    request = _conversation()
    with ScriptedOpenAIServer(lambda _request: Reply.text("The answer.")) as server:
        model = OpenAIChatModel("m", base_url=server.base_url, api_key="k", timeout=30)
        body = model.profile.body(request, model.model)
        payload = orjson.dumps(body)
        url = urllib.parse.urlsplit(server.base_url)
        raw = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=30)
        client = openai.OpenAI(api_key="k", base_url=server.base_url, max_retries=0)
        extra = {k: v for k, v in body.items() if k not in ("model", "messages")}

        def raw_http() -> object:
            raw.request(
                "POST",
                url.path + "/chat/completions",
                body=payload,
                headers={"Content-Type": "application/json", "Authorization": "Bearer k"},
            )
            return orjson.loads(raw.getresponse().read())

        def create() -> object:
            return client.chat.completions.create(
                model=body["model"], messages=body["messages"], extra_body=extra
            )

        def create_and_convert() -> object:
            return ChatResponse.from_openai(create().model_dump(mode="json"))  # type: ignore[attr-defined]

        clients: dict[str, Callable[[], object]] = {
            "raw HTTP (http.client + orjson)": raw_http,
            "openai create()": create,
            "openai create() + model_dump + from_openai": create_and_convert,
            "OpenAIChatModel.complete": lambda: model.complete(request),
        }
        samples: dict[str, list[float]] = {name: [] for name in clients}
        try:
            for call in clients.values():  # warm every path once, untimed
                call()
            for _ in range(rounds):
                for name, call in clients.items():
                    start = time.perf_counter()
                    for _ in range(calls):
                        call()
                    samples[name].append((time.perf_counter() - start) / calls * 1e6)
        finally:
            raw.close()
            client.close()
            model.close()
    return {name: statistics.median(values) for name, values in samples.items()}


_FIRST_CALL: Final = """
import json, time
from pydantic import BaseModel
from stargraph import END, START, Graph, RunContext
from stargraph.llm import ChatMessage, ChatRequest, OpenAIChatModel
from stargraph.testing import Reply, ScriptedOpenAIServer

class S(BaseModel):
    q: str = "hi"
    a: str = ""

def ask(state: S, ctx: RunContext) -> dict[str, str]:
    reply = ctx.services["model"].complete(ChatRequest(messages=(ChatMessage.user(state.q),)))
    return {"a": reply.message.content or ""}

with ScriptedOpenAIServer(lambda _request: Reply.text("hello")) as server:
    model = OpenAIChatModel("m", base_url=server.base_url, api_key="k")
    start = time.perf_counter()
    graph = Graph("one", state=S).with_node("ask", ask)
    app = graph.with_edge(START, "ask").with_edge("ask", END).compile(services={"model": model})
    times = [time.perf_counter() - start]
    for _ in range(2):
        start = time.perf_counter()
        assert app.invoke({}).a == "hello"
        times.append(time.perf_counter() - start)
    model.close()
print(json.dumps([t * 1000 for t in times]))
"""


def first_call_ms(runs: int) -> tuple[float, float, float]:
    """Median over ``runs`` fresh interpreters of (compile, first invoke, second invoke), ms."""
    samples = [json.loads(_python(_FIRST_CALL)) for _ in range(max(1, runs))]
    compile_ms, first, second = (statistics.median(column) for column in zip(*samples, strict=True))
    return compile_ms, first, second


def _python(code: str, *, write_bytecode: bool = False) -> str:
    """What a fresh interpreter running ``code`` prints."""
    dropped = {"PYTHONPROFILEIMPORTTIME"} | (
        {"PYTHONDONTWRITEBYTECODE"} if write_bytecode else set()
    )
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    return done.stdout


def import_times_ms(modules: Sequence[str], repeats: int) -> dict[str, tuple[float, float]]:
    """Median (wall ms, CPU ms) of ``import module`` in fresh interpreters, the modules taken
    in turn within each repeat so that drift in machine speed hits them alike."""
    code = (
        "import time; w, c = time.perf_counter(), time.process_time(); import {}; "
        "print((time.perf_counter() - w) * 1000, (time.process_time() - c) * 1000)"
    )
    # Bytecode first, as an installed package has it (PYTHONDONTWRITEBYTECODE would
    # otherwise make every run compile the sources).
    for module in modules:
        _python(f"import {module}", write_bytecode=True)
    samples: dict[str, list[tuple[float, float]]] = {m: [] for m in modules}
    for _ in range(repeats):
        for module in modules:
            wall, cpu = (float(x) for x in _python(code.format(module)).split())
            samples[module].append((wall, cpu))
    return {
        m: (statistics.median(w for w, _ in s), statistics.median(c for _, c in s))
        for m, s in samples.items()
    }


def llmcall_section(*, quick: bool, rounds: int) -> tuple[str, list[str]]:
    """The ``llmcall`` report section of ``python -m benchmarks``."""
    calls = 30 if quick else 200
    costs = per_call_us(calls, rounds)
    floor = costs["raw HTTP (http.client + orjson)"]
    lines = [
        "llmcall: one chat completion, 22 messages and 2 tools, scripted server in process "
        f"(µs per call, median of {rounds} rounds of {calls})",
        f"  {'client':<46} {'µs/call':>9} {'over raw HTTP':>14}",
    ]
    for name, us in costs.items():
        lines.append(f"  {name:<46} {us:9.0f} {us - floor:14.0f}")
    compile_ms, first, second = first_call_ms(1 if quick else 3)
    added = first - second
    ok = added <= FIRST_CALL_BUDGET_MS
    lines.append(
        f"  first call in a fresh process: compile {compile_ms:.0f} ms (the client set up), "
        f"first invoke {first:.1f} ms, second {second:.1f} ms: +{added:.1f} ms "
        f"{'ok' if ok else 'MISSED'} (<= {FIRST_CALL_BUDGET_MS:.0f} ms)"
    )
    misses = [] if ok else [f"the first model call adds {added:.0f} ms over a warm one"]
    return "\n".join(lines), misses


SECTIONS = {"llmcall": llmcall_section}
"""This module's report sections by ``--only`` name."""
