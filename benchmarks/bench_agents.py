"""Agent-shaped workloads on stargraph and LangGraph: the ``agents`` report section.

The core table times engines on trivial chains; these are the shapes users run. Each workload
is built on both engines and run two ways, ``invoke`` and ``stream`` in ``updates`` mode, and
reported in µs per run (one run = everything the row's description says, e.g. five turns):

``react``
    A ReAct agent with two tools (``add``, then ``mul``, then a final answer quoting both
    results) over the real ``openai`` client and :class:`~stargraph.testing.ScriptedOpenAIServer`:
    both engines talk to the same server, answered by the same script function. stargraph:
    ``react_graph`` with :class:`~stargraph.llm.OpenAIChatModel` and an ``Arbiter``. LangGraph:
    ``create_react_agent`` over a minimal ``BaseChatModel`` that sends the same request through
    an ``openai.OpenAI`` client (``langchain_openai`` is not installed here; ``ChatOpenAI``
    would add its own conversion cost on top).
``mapreduce``
    ``fork`` sends 8 items to a ``work`` node (``Send``), ``collect`` runs once after them.
``skill``
    A 3-node parent whose middle node is a compiled 5-node skill (``SubgraphNode.from_skill``;
    on LangGraph the compiled child invoked from the parent's node, as in the core table).
``thread``
    Five turns on one thread, each turn appending a user message and a reply that depends on
    the conversation so far: stargraph ``thread_id=`` with a ``SqliteStore`` on a temporary
    file, LangGraph a ``SqliteSaver`` on another (both WAL, ``synchronous=NORMAL``,
    LangGraph ``durability="sync"``, as in the ``durable`` section). A new thread per run.
``hitl``
    A node asks for approval and the run stops; the caller answers and the run finishes.
    stargraph ``ctx.interrupt()`` + ``resume(run_id, response=True)``, LangGraph
    ``interrupt()`` + ``Command(resume=True)``; a SQLite store on both, as for ``thread``.
``prebuilt``
    The prebuilt agents over two plain functions (``add``, then ``mul``, then an answer
    quoting both results) and an in-process model answering from the conversation, no HTTP:
    stargraph ``create_agent`` over a ``ScriptedChatModel``, LangGraph
    ``create_react_agent`` over a minimal ``BaseChatModel``.

Before anything is timed, every (engine, mode) pair runs once and must reach the same answer
(the final answer text, the final counter and items, the conversation); otherwise
:class:`~benchmarks.core_harness.StateMismatch` aborts the run. Engines and modes are
interleaved within a round; the figure is the median over rounds of wall time per run.
Targets: stargraph at least 10x LangGraph on ``mapreduce``, ``skill`` and ``prebuilt``; the
others are reported only (a model call over HTTP dominates ``react``, SQLite commits
``thread`` and ``hitl``).
"""

from __future__ import annotations

import gc
import itertools
import json
import operator
import sqlite3
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict

from pydantic import BaseModel

from benchmarks.core_harness import StateMismatch
from benchmarks.workloads import (
    SKILL_NODES,
    LGState,
    send_graph,
    send_state_graph,
    subgraph_graph,
    subgraph_state_graph,
)
from stargraph import reducers
from stargraph.graph import END, START, Graph
from stargraph.runtime import RunContext
from stargraph.tools import tool

__all__ = [
    "AGENT_ENGINES",
    "AGENT_TARGET",
    "MAP_ITEMS",
    "MODES",
    "SECTIONS",
    "THREAD_TURNS",
    "AgentResult",
    "AgentWorkload",
    "Built",
    "Scratch",
    "agents_section",
    "all_agent_workloads",
    "build_agent_workload",
    "check_agent_agreement",
    "time_agent_workload",
]

AGENT_ENGINES: tuple[str, ...] = ("stargraph", "langgraph")
"""Engine names, in table order."""

MODES: tuple[str, ...] = ("invoke", "stream")
"""How each workload is run: ``invoke``, and ``stream`` in ``updates`` mode."""

AGENT_TARGET = 10.0
"""stargraph must be at least this many times faster per run than LangGraph where a workload
has a target (``mapreduce``, ``skill``)."""

MAP_ITEMS = 8
"""Items the map-reduce sends to its worker."""

THREAD_TURNS = 5
"""Turns per thread in the ``thread`` workload."""

Answer = Any
"""What a run must agree on across engines and modes (hashable, comparable)."""


@dataclass
class Built:
    """One workload built on one engine: a runner per mode (each returns the run's answer),
    and what to close afterwards."""

    runners: Mapping[str, Callable[[], Answer]]
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        """Close what the build opened (stores, clients, connections), last opened first."""
        for closer in reversed(self.closers):
            closer()


@dataclass(frozen=True)
class AgentWorkload:
    """One agent workload: how to build it on each engine, in a shared scratch context."""

    name: str
    description: str
    target: float | None
    builders: Mapping[str, Callable[[Scratch], Built]]


@dataclass
class Scratch:
    """What builders share: a temporary directory and the scripted model server."""

    directory: Path
    server_url: Callable[[], str]


# ---------------------------------------------------------------------- stream folding


def _fold(state: dict[str, Any], updates: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """Apply node writes as the benchmark states reduce them: lists append, the rest replace."""
    for writes in updates:
        for key, value in (writes or {}).items():
            if isinstance(value, list):
                state[key] = [*state.get(key, []), *value]
            else:
                state[key] = value
    return state


def _node_writes(items: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any] | None]:
    """Each node's writes from ``updates`` items (``{node: writes}``); interrupts skipped."""
    for item in items:
        for node, writes in item.items():
            if node != "__interrupt__":
                yield writes


def _counter_items(state: Any) -> Answer:
    """``(counter, sorted items)``: parallel workers may merge in either engine's order, so
    the items are compared as a multiset (the core table checks the order)."""
    if isinstance(state, Mapping):
        return int(state["counter"]), tuple(sorted(state["items"]))
    return int(state.counter), tuple(sorted(state.items))


# ---------------------------------------------------------------------- mapreduce


def _mapreduce_stargraph(scratch: Scratch) -> Built:
    app = send_graph(MAP_ITEMS).compile(max_steps=10)
    start = {"counter": MAP_ITEMS}

    def stream() -> Answer:
        state = _fold(
            {"counter": MAP_ITEMS, "items": []}, _node_writes(app.stream(start, mode="updates"))
        )
        return _counter_items(state)

    return Built({"invoke": lambda: _counter_items(app.invoke(start)), "stream": stream})


def _mapreduce_langgraph(scratch: Scratch) -> Built:
    app = send_state_graph()

    def start() -> LGState:
        return {"counter": MAP_ITEMS, "items": []}

    def stream() -> Answer:
        items = app.stream(start(), stream_mode="updates")
        return _counter_items(_fold(dict(start()), _node_writes(items)))

    return Built({"invoke": lambda: _counter_items(app.invoke(start())), "stream": stream})


# ---------------------------------------------------------------------- skill subgraph


def _skill_stargraph(scratch: Scratch) -> Built:
    app = subgraph_graph().compile()

    def stream() -> Answer:
        updates = _node_writes(app.stream({}, mode="updates"))
        return _counter_items(_fold({"counter": 0, "items": []}, updates))

    return Built({"invoke": lambda: _counter_items(app.invoke({})), "stream": stream})


def _skill_langgraph(scratch: Scratch) -> Built:
    app = subgraph_state_graph()

    def stream() -> Answer:
        items = app.stream({"counter": 0, "items": []}, stream_mode="updates")
        return _counter_items(_fold({"counter": 0, "items": []}, _node_writes(items)))

    invoke = lambda: _counter_items(app.invoke({"counter": 0, "items": []}))  # noqa: E731
    return Built({"invoke": invoke, "stream": stream})


# ---------------------------------------------------------------------- thread (multi-turn)


class Chat(BaseModel):
    """The conversation of the ``thread`` workload (stargraph)."""

    messages: Annotated[list[str], reducers.append] = []


class LGChat(TypedDict):
    """The same conversation as LangGraph state."""

    messages: Annotated[list[str], operator.add]


def _reply_to(messages: Sequence[str]) -> list[str]:
    return [f"bot: {messages[-1]!r} is message {len(messages)}"]


def reply(chat: Chat) -> dict[str, Any]:
    """Answer the last message, naming how long the conversation is (so a turn that lost
    the thread's earlier turns answers differently)."""
    return {"messages": _reply_to(chat.messages)}


def lg_reply(chat: LGChat) -> dict[str, Any]:
    """:func:`reply` over the LangGraph state."""
    return {"messages": _reply_to(chat["messages"])}


def _turns() -> list[str]:
    return [f"user says {i}" for i in range(THREAD_TURNS)]


def _sqlite_saver(path: Path, built: Built) -> Any:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("PRAGMA synchronous = NORMAL")
    built.closers.append(conn.close)
    saver = SqliteSaver(conn)
    saver.setup()
    return saver


def _thread_stargraph(scratch: Scratch) -> Built:
    from stargraph.checkpoint import SqliteStore

    store = SqliteStore(scratch.directory / "thread-stargraph.db", synchronous="NORMAL")
    graph = (
        Graph("chat", state=Chat)
        .with_node("reply", reply)
        .with_edge(START, "reply")
        .with_edge("reply", END)
    )
    app = graph.compile(store=store)
    threads = (f"thread-{i}" for i in itertools.count())

    def invoke() -> Answer:
        thread, final = next(threads), Chat()
        for said in _turns():
            final = app.invoke({"messages": [said]}, thread_id=thread)
        return tuple(final.messages)

    def stream() -> Answer:
        thread, said_so_far = next(threads), []
        for said in _turns():
            said_so_far.append(said)
            for writes in _node_writes(
                app.stream({"messages": [said]}, mode="updates", thread_id=thread)
            ):
                said_so_far.extend((writes or {}).get("messages", []))
        return tuple(said_so_far)

    return Built({"invoke": invoke, "stream": stream}, [store.close])


def _thread_langgraph(scratch: Scratch) -> Built:
    from langgraph.graph import StateGraph

    built = Built({})
    saver = _sqlite_saver(scratch.directory / "thread-langgraph.db", built)
    builder = StateGraph(LGChat)
    builder.add_node("reply", lg_reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    app = builder.compile(checkpointer=saver)
    threads = (f"thread-{i}" for i in itertools.count())

    def invoke() -> Answer:
        config: Any = {"configurable": {"thread_id": next(threads)}}
        final: Any = {"messages": []}
        for said in _turns():
            final = app.invoke({"messages": [said]}, config, durability="sync")
        return tuple(final["messages"])

    def stream() -> Answer:
        config: Any = {"configurable": {"thread_id": next(threads)}}
        said_so_far: list[str] = []
        for said in _turns():
            said_so_far.append(said)
            items = app.stream(
                {"messages": [said]}, config, stream_mode="updates", durability="sync"
            )
            for writes in _node_writes(items):
                said_so_far.extend((writes or {}).get("messages", []))
        return tuple(said_so_far)

    built.runners = {"invoke": invoke, "stream": stream}
    return built


# ---------------------------------------------------------------------- human in the loop


class Refund(BaseModel):
    """The ``hitl`` state (stargraph): a refund a person approves."""

    order: str = ""
    approved: bool = False
    done: str = ""


class LGRefund(TypedDict, total=False):
    """The same state for LangGraph."""

    order: str
    approved: bool
    done: str


def approve(state: Refund, ctx: RunContext) -> dict[str, Any]:
    """Ask a person; the run stops here until it is resumed with the answer."""
    return {"approved": bool(ctx.interrupt({"question": f"refund {state.order}?"}))}


def pay(state: Refund) -> dict[str, Any]:
    """Refund, or not, as the person decided."""
    return {"done": f"{state.order}: {'refunded' if state.approved else 'refused'}"}


def lg_approve(state: LGRefund) -> dict[str, Any]:
    """:func:`approve` with LangGraph's ``interrupt``."""
    from langgraph.types import interrupt

    return {"approved": bool(interrupt({"question": f"refund {state['order']}?"}))}


def lg_pay(state: LGRefund) -> dict[str, Any]:
    """:func:`pay` over the LangGraph state."""
    return {"done": f"{state['order']}: {'refunded' if state.get('approved') else 'refused'}"}


def _hitl_stargraph(scratch: Scratch) -> Built:
    from stargraph import interrupt_of
    from stargraph.checkpoint import SqliteStore

    store = SqliteStore(scratch.directory / "hitl-stargraph.db", synchronous="NORMAL")
    graph = (
        Graph("refund", state=Refund)
        .with_node("approve", approve)
        .with_node("pay", pay)
        .with_edge(START, "approve")
        .with_edge("approve", "pay")
        .with_edge("pay", END)
    )
    app = graph.compile(store=store)
    runs = (f"refund-{i}" for i in itertools.count())

    def invoke() -> Answer:
        run_id = next(runs)
        asked = interrupt_of(app.invoke({"order": "A-17"}, run_id=run_id))
        payload = asked.payload if asked is not None else None
        return payload, app.resume(run_id, response=True).done

    def stream() -> Answer:
        run_id, payload, done = next(runs), None, None
        for item in app.stream({"order": "A-17"}, mode="updates", run_id=run_id):
            for marker in item.get("__interrupt__", ()):
                payload = marker.payload
        for writes in _node_writes(app.resume_stream(run_id, response=True, mode="updates")):
            done = (writes or {}).get("done", done)
        return payload, done

    return Built({"invoke": invoke, "stream": stream}, [store.close])


def _hitl_langgraph(scratch: Scratch) -> Built:
    from langgraph.graph import StateGraph
    from langgraph.types import Command

    built = Built({})
    saver = _sqlite_saver(scratch.directory / "hitl-langgraph.db", built)
    builder = StateGraph(LGRefund)
    builder.add_node("approve", lg_approve)
    builder.add_node("pay", lg_pay)
    builder.add_edge(START, "approve")
    builder.add_edge("approve", "pay")
    builder.add_edge("pay", END)
    app = builder.compile(checkpointer=saver)
    threads = (f"refund-{i}" for i in itertools.count())

    def invoke() -> Answer:
        config: Any = {"configurable": {"thread_id": next(threads)}}
        first = app.invoke({"order": "A-17"}, config, durability="sync")
        payload = first["__interrupt__"][0].value
        return payload, app.invoke(Command(resume=True), config, durability="sync")["done"]

    def stream() -> Answer:
        config: Any = {"configurable": {"thread_id": next(threads)}}
        payload, done = None, None
        for item in app.stream({"order": "A-17"}, config, stream_mode="updates", durability="sync"):
            for marker in item.get("__interrupt__", ()):
                payload = marker.value
        resumed = app.stream(Command(resume=True), config, stream_mode="updates", durability="sync")
        for writes in _node_writes(resumed):
            done = (writes or {}).get("done", done)
        return payload, done

    built.runners = {"invoke": invoke, "stream": stream}
    return built


# ---------------------------------------------------------------------- ReAct over HTTP

ADD = "bench.add@1.0.0"
MUL = "bench.mul@1.0.0"


@tool(id=ADD)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(id=MUL)
def mul(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def _tool_value(content: Any) -> int:
    """A tool result from a tool message: stargraph sends ``{"payload": ...}`` JSON,
    LangGraph's ``ToolNode`` the result's ``str``."""
    value = json.loads(content)
    return int(value["payload"] if isinstance(value, dict) else value)


def react_script(request: Any) -> Any:
    """The server's script, the same for both engines: ``add(2, 3)``, then ``mul(4, 5)``,
    then an answer quoting both results as the tools returned them."""
    from stargraph.testing import Reply

    tools = {t["function"]["name"] for t in request.body.get("tools", ())}
    # stargraph offers ``bench__add__v1_0_0``, LangGraph ``bench_add``.
    named = {verb: next(n for n in tools if verb in n) for verb in ("add", "mul")}
    results = [_tool_value(m["content"]) for m in request.messages if m["role"] == "tool"]
    if not results:
        return Reply.tool_calls([(named["add"], {"a": 2, "b": 3})])
    if len(results) == 1:
        return Reply.tool_calls([(named["mul"], {"a": 4, "b": 5})])
    return Reply.text(f"sum {results[0]}, product {results[1]}")


def _react_stargraph(scratch: Scratch) -> Built:
    from stargraph.llm import OpenAIChatModel
    from stargraph.skills.react import react_graph
    from stargraph.tools import Arbiter, ToolRegistry

    built = Built({})
    model = OpenAIChatModel("scripted-model", base_url=scratch.server_url(), api_key="sk-bench")
    built.closers.append(model.close)
    workspace = scratch.directory / "react-ws"
    workspace.mkdir(exist_ok=True)
    arbiter = Arbiter(ToolRegistry.build(builtins=[add, mul]), workspace=workspace)
    built.closers.append(arbiter.close)
    app = react_graph(tools=[ADD, MUL], max_steps=5).compile(
        services={"model": model, "arbiter": arbiter}
    )
    task = {"task": "add 2 and 3, then multiply 4 by 5"}

    def stream() -> Answer:
        answer = None
        for writes in _node_writes(app.stream(task, mode="updates")):
            answer = (writes or {}).get("final_answer", answer)
        return answer

    built.runners = {"invoke": lambda: app.invoke(task).final_answer, "stream": stream}
    return built


def _openai_chat_model(client: Any) -> Any:
    """A minimal LangChain chat model over an ``openai.OpenAI`` client: what ``ChatOpenAI``
    does, without its extras (``langchain_openai`` is not installed)."""
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.utils.function_calling import convert_to_openai_tool

    def as_openai(message: BaseMessage) -> dict[str, Any]:
        if isinstance(message, ToolMessage):
            return {
                "role": "tool",
                "tool_call_id": message.tool_call_id,
                "content": message.content,
            }
        if isinstance(message, AIMessage):
            calls = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": json.dumps(c["args"])},
                }
                for c in message.tool_calls
            ]
            return {
                "role": "assistant",
                "content": message.content or None,
                **({"tool_calls": calls} if calls else {}),
            }
        role = {"human": "user", "system": "system"}[message.type]
        return {"role": role, "content": message.content}

    class OpenAIModel(BaseChatModel):
        tools: list[dict[str, Any]] = []

        @property
        def _llm_type(self) -> str:
            return "openai-client"

        def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
            return OpenAIModel(tools=[convert_to_openai_tool(t) for t in tools])

        def _generate(
            self,
            messages: list[BaseMessage],
            stop: list[str] | None = None,
            run_manager: Any = None,
            **kwargs: Any,
        ) -> ChatResult:
            response = client.chat.completions.create(
                model="scripted-model",
                messages=[as_openai(m) for m in messages],
                tools=self.tools,
            )
            choice = response.choices[0].message
            calls = [
                {"id": c.id, "name": c.function.name, "args": json.loads(c.function.arguments)}
                for c in choice.tool_calls or ()
            ]
            message = AIMessage(content=choice.content or "", tool_calls=calls)
            return ChatResult(generations=[ChatGeneration(message=message)])

    return OpenAIModel()


def _react_langgraph(scratch: Scratch) -> Built:
    import openai
    from langchain_core.tools import tool as lc_tool

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated in langgraph 1.x
        from langgraph.prebuilt import create_react_agent

    @lc_tool
    def bench_add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @lc_tool
    def bench_mul(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    client = openai.OpenAI(base_url=scratch.server_url(), api_key="sk-bench")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = create_react_agent(_openai_chat_model(client), [bench_add, bench_mul])
    task = {"messages": [("user", "add 2 and 3, then multiply 4 by 5")]}

    def invoke() -> Answer:
        return agent.invoke(task)["messages"][-1].content

    def stream() -> Answer:
        answer = None
        for writes in _node_writes(agent.stream(task, stream_mode="updates")):
            for message in (writes or {}).get("messages", ()):
                if message.type == "ai" and not message.tool_calls:
                    answer = message.content
        return answer

    return Built({"invoke": invoke, "stream": stream}, [client.close])


def _prebuilt_step(results: Sequence[Any]) -> tuple[str, dict[str, int]] | str:
    """The in-process model of ``prebuilt``, on both engines: ``add(2, 3)``, ``mul(4, 5)``,
    then an answer quoting the tools' results (plain values on both engines)."""
    if not results:
        return "add", {"a": 2, "b": 3}
    if len(results) == 1:
        return "mul", {"a": 4, "b": 5}
    return f"sum {results[0]}, product {results[1]}"


def _prebuilt_stargraph(scratch: Scratch) -> Built:
    from stargraph.llm import ChatMessage, ChatResponse, ScriptedChatModel, ToolCall
    from stargraph.skills.agent import create_agent

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    def mul(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    def script(request: Any) -> ChatResponse:
        results = [m.content for m in request.messages if m.role == "tool"]
        step = _prebuilt_step(results)
        if isinstance(step, str):
            return ChatResponse(message=ChatMessage.assistant(step), finish_reason="stop")
        call = ToolCall(id=f"call-{len(results)}", name=step[0], arguments=json.dumps(step[1]))
        return ChatResponse(message=ChatMessage.assistant(None, [call]), finish_reason="tool_calls")

    workspace = scratch.directory / "prebuilt-ws"
    workspace.mkdir(exist_ok=True)
    agent = create_agent(ScriptedChatModel(script), [add, mul], workspace=workspace)
    task = {"messages": [{"role": "user", "content": "add 2 and 3, then multiply 4 by 5"}]}

    def stream() -> Answer:
        answer = None
        for writes in _node_writes(agent.stream(task, mode="updates")):
            # The updates stream carries each write as JSON data.
            for message in (writes or {}).get("messages", ()):
                answer = message["content"] if message["role"] == "assistant" else answer
        return answer

    return Built({"invoke": lambda: agent.invoke(task).messages[-1].content, "stream": stream})


def _prebuilt_langgraph(scratch: Scratch) -> Built:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated in langgraph 1.x
        from langgraph.prebuilt import create_react_agent

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    def mul(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    class ScriptedModel(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
            return self

        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> ChatResult:
            results = [m.content for m in messages if m.type == "tool"]
            step = _prebuilt_step(results)
            if isinstance(step, str):
                return ChatResult(generations=[ChatGeneration(message=AIMessage(step))])
            call = {"name": step[0], "args": step[1], "id": f"call-{len(results)}"}
            message = AIMessage("", tool_calls=[call])
            return ChatResult(generations=[ChatGeneration(message=message)])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = create_react_agent(ScriptedModel(), [add, mul])
    task = {"messages": [{"role": "user", "content": "add 2 and 3, then multiply 4 by 5"}]}

    def stream() -> Answer:
        answer = None
        for writes in _node_writes(agent.stream(task, stream_mode="updates")):
            for message in (writes or {}).get("messages", ()):
                answer = message.content if message.type == "ai" else answer
        return answer

    return Built({"invoke": lambda: agent.invoke(task)["messages"][-1].content, "stream": stream})


# ---------------------------------------------------------------------- registry and timing

_RUNS_PER_ROUND: Mapping[str, int] = {
    "react": 20,
    "mapreduce": 100,
    "skill": 200,
    "thread": 20,
    "hitl": 40,
    "prebuilt": 100,
}
"""Runs per timed round at full scale; ``--quick`` runs a fifth of them."""


def all_agent_workloads() -> list[AgentWorkload]:
    """The six agent workloads, in report order."""
    return [
        AgentWorkload(
            "react",
            "ReAct, 2 tools + answer, openai over HTTP",
            None,
            {"stargraph": _react_stargraph, "langgraph": _react_langgraph},
        ),
        AgentWorkload(
            "mapreduce",
            f"Send map-reduce, {MAP_ITEMS} items",
            AGENT_TARGET,
            {"stargraph": _mapreduce_stargraph, "langgraph": _mapreduce_langgraph},
        ),
        AgentWorkload(
            "skill",
            f"3-node parent, a {SKILL_NODES}-node skill",
            AGENT_TARGET,
            {"stargraph": _skill_stargraph, "langgraph": _skill_langgraph},
        ),
        AgentWorkload(
            "thread",
            f"{THREAD_TURNS} turns on a thread, SQLite",
            None,
            {"stargraph": _thread_stargraph, "langgraph": _thread_langgraph},
        ),
        AgentWorkload(
            "hitl",
            "interrupt + resume, SQLite",
            None,
            {"stargraph": _hitl_stargraph, "langgraph": _hitl_langgraph},
        ),
        AgentWorkload(
            "prebuilt",
            "create_agent vs create_react_agent, in-process",
            AGENT_TARGET,
            {"stargraph": _prebuilt_stargraph, "langgraph": _prebuilt_langgraph},
        ),
    ]


@dataclass(frozen=True)
class AgentResult:
    """µs per run of one workload, one figure per round, per ``(engine, mode)``."""

    workload: AgentWorkload
    runs: int
    per_run_us: Mapping[tuple[str, str], Sequence[float]]

    def median(self, engine: str, mode: str) -> float:
        """Median µs per run of ``engine`` in ``mode``."""
        return statistics.median(self.per_run_us[engine, mode])

    def ratio(self, mode: str) -> float:
        """LangGraph / stargraph in ``mode`` (higher is better)."""
        return self.median("langgraph", mode) / self.median("stargraph", mode)


def check_agent_agreement(
    workload: AgentWorkload, built: Mapping[str, Built]
) -> dict[tuple[str, str], Answer]:
    """Run every (engine, mode) once; raise :class:`StateMismatch` unless all answers agree."""
    answers = {(engine, mode): built[engine].runners[mode]() for engine in built for mode in MODES}
    if len(set(map(repr, answers.values()))) != 1:
        lines = [f"agents workload {workload.name!r}: engines or modes disagree on the answer"]
        lines.extend(f"  {e:<10} {m:<7}: {a!r}" for (e, m), a in answers.items())
        raise StateMismatch("\n".join(lines))
    return answers


def build_agent_workload(
    workload: AgentWorkload, scratch: Scratch, stack: ExitStack
) -> dict[str, Built]:
    """``workload`` built on every engine; each build is closed when ``stack`` closes."""
    built = {}
    for engine, builder in workload.builders.items():
        built[engine] = builder(scratch)
        stack.callback(built[engine].close)
    return built


def time_agent_workload(
    workload: AgentWorkload, scratch: Scratch, *, rounds: int, runs: int
) -> AgentResult:
    """Build on both engines, check they agree, then time ``rounds`` rounds of ``runs``."""
    per_run: dict[tuple[str, str], list[float]] = {
        (e, m): [] for e in workload.builders for m in MODES
    }
    with ExitStack() as stack:
        built = build_agent_workload(workload, scratch, stack)
        check_agent_agreement(workload, built)  # also the warm-up
        for _ in range(rounds):
            for (engine, mode), figures in per_run.items():
                runner = built[engine].runners[mode]
                gc.collect()
                start = time.perf_counter_ns()
                for _ in range(runs):
                    runner()
                figures.append((time.perf_counter_ns() - start) / 1000 / runs)
    return AgentResult(workload, runs, per_run)


def render_agents(results: Sequence[AgentResult], rounds: int) -> tuple[str, list[str]]:
    """The ``agents`` table, and the missed targets."""
    header = (
        f"{'workload':<10} {'description':<42} {'mode':<7} {'stargraph':>10} "
        f"{'LangGraph':>10}  ratio"
    )
    lines = [
        f"agents: median µs per run over {rounds} round(s); stream = stream(updates); "
        f"targets: LangGraph/stargraph >= {AGENT_TARGET:.0f}x on mapreduce, skill and prebuilt, "
        "report-only on react, thread and hitl",
        "  react: both engines on one ScriptedOpenAIServer through the openai client "
        "(LangGraph: create_react_agent over a BaseChatModel on openai.OpenAI)",
        "  thread, hitl: stargraph SqliteStore vs LangGraph SqliteSaver, temp files, WAL, "
        "synchronous=NORMAL, durability sync",
        "",
        header,
        "-" * (len(header) + 20),
    ]
    misses: list[str] = []
    for r in results:
        for i, mode in enumerate(MODES):
            ratio = r.ratio(mode)
            target = r.workload.target
            verdict = ""
            if target is not None:
                verdict = f"  {'ok' if ratio >= target else 'MISS'} (>= {target:.0f}x)"
                if ratio < target:
                    misses.append(
                        f"agents {r.workload.name} {mode}: stargraph only {ratio:.1f}x faster "
                        f"than LangGraph (target {target:.0f}x)"
                    )
            first = i == 0
            lines.append(
                f"{r.workload.name if first else '':<10} "
                f"{r.workload.description if first else '':<42} {mode:<7} "
                f"{r.median('stargraph', mode):>10.0f} {r.median('langgraph', mode):>10.0f}  "
                f"{ratio:6.1f}x{verdict}"
            )
    return "\n".join(lines), misses


def agents_section(*, quick: bool, rounds: int) -> tuple[str, list[str]]:
    """The ``agents`` report section of ``python -m benchmarks``."""
    from stargraph.testing import ScriptedOpenAIServer

    results = []
    with (
        tempfile.TemporaryDirectory(prefix="stargraph-agents-") as tmp,
        ScriptedOpenAIServer(react_script) as server,
    ):
        scratch = Scratch(Path(tmp), lambda: server.base_url)
        for workload in all_agent_workloads():
            runs = _RUNS_PER_ROUND[workload.name]
            runs = max(1, runs // 5) if quick else runs
            results.append(time_agent_workload(workload, scratch, rounds=rounds, runs=runs))
    return render_agents(results, rounds)


SECTIONS = {"agents": agents_section}
"""The report sections of this module, by ``--only`` name."""
