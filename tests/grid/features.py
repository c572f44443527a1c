"""The features of the combination grid: one small graph each, its input, its services.

Every graph is a module attribute (``tests.grid.features:<name>_graph``) so that a worker
can import it by reference and a killed child process can build it again. The scripted
models answer from the request's content, never from a count of earlier calls, so that a
model made in another process (a worker, a resumed run) answers a request the same way.
"""

from __future__ import annotations

import functools
import json
import operator
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Final, Literal, TypedDict

from pydantic import BaseModel

from stargraph import END, START, Command, Graph, Send, reducers
from stargraph.graph import Private, RemainingSteps
from stargraph.llm import (
    ChatMessage,
    ChatRequest,
    ChatResponse,
    RequestOptions,
    ScriptedChatModel,
    ToolCall,
)
from stargraph.messages import Message, MessagesState, RemoveMessage
from stargraph.nodes import SubgraphNode
from stargraph.runtime import RunContext
from stargraph.skills import Skill
from stargraph.skills.agent import AgentState
from stargraph.skills.machine import parse_skillspec, skillspec_graph
from stargraph.skills.markdown import parse_skill_md
from stargraph.skills.react import react_graph
from stargraph.tools import Arbiter, ToolRegistry, builtin_tools, llm_name_for, tool

# ----------------------------------------------------------------------------- tools

LOOKUP: Final = "grid.lookup@1.0.0"
MULTIPLY: Final = "grid.multiply@1.0.0"


LEDGER: Final = "SG_GRID_LEDGER"
"""The environment variable naming the file each tool body's run is appended to: the
effects a cell made, counted across the processes it ran in."""


def _effect(line: str) -> None:
    path = os.environ.get(LEDGER)
    if path:
        with open(path, "a", encoding="utf-8") as ledger:
            ledger.write(line + "\n")


@tool(id=LOOKUP, side_effect="read")
def lookup(query: str) -> str:
    """Look ``query`` up in a fixed table."""
    _effect(f"lookup {query}")
    return f"nothing is known about {query}"


@tool(id=MULTIPLY, side_effect="read")
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    _effect(f"multiply {a} {b}")
    return a * b


def registry() -> ToolRegistry:
    """The grid's tools and the built-ins (``choir.fs.*`` for the SKILL.md workflow)."""
    return ToolRegistry.build(builtins=[lookup, multiply, *builtin_tools()])


def _call(name: str, args: dict[str, Any], call_id: str) -> ChatResponse:
    message = ChatMessage.assistant(
        None, [ToolCall(id=call_id, name=name, arguments=json.dumps(args))]
    )
    return ChatResponse(message=message, finish_reason="tool_calls", id=f"resp-{call_id}")


def _text(content: str, call_id: str) -> ChatResponse:
    return ChatResponse(
        message=ChatMessage.assistant(content), finish_reason="stop", id=f"resp-{call_id}"
    )


def react_script(request: ChatRequest) -> ChatResponse:
    """Multiply once, then answer with the tool's result."""
    results = [m.content for m in request.messages if m.role == "tool"]
    if not results:
        return _call(llm_name_for(MULTIPLY), {"a": 3, "b": 4.5}, "react-1")
    return _text(f"3 items cost {results[-1]} EUR", "react-2")


def options_script(request: ChatRequest) -> ChatResponse:
    """As :func:`react_script`, answering with the request options it was sent: a cell that
    lost them on resume, replay or in a worker would answer otherwise."""
    results = [m.content for m in request.messages if m.role == "tool"]
    if not results:
        return _call(llm_name_for(MULTIPLY), {"a": 3, "b": 4.5}, "options-1")
    sent = (request.temperature, request.max_tokens, request.seed)
    return _text(f"3 items cost {results[-1]} EUR {sent}", "options-2")


def looping_script(request: ChatRequest) -> ChatResponse:
    """Never answer: call the tool again and again (the run's rules must stop it)."""
    done = sum(1 for m in request.messages if m.role == "tool")
    return _call(llm_name_for(MULTIPLY), {"a": 2, "b": done}, f"loop-{done + 1}")


def machine_script(request: ChatRequest) -> ChatResponse:
    """In ``work``: look up, then ``complete``; in ``done``: ``finish`` with the answer."""
    text = "\n".join(m.content or "" for m in request.messages)
    if "### State: done" in text:
        return _call("finish", {"answer": "42"}, "machine-3")
    if '"kind": "tool_result"' in text:
        return _call("complete", {}, "machine-2")
    return _call(llm_name_for(LOOKUP), {"query": "the answer"}, "machine-1")


@contextmanager
def model_and_arbiter(
    script: Callable[[ChatRequest], ChatResponse], workspace: Path
) -> Iterator[dict[str, Any]]:
    """The services of a model-driven feature: a scripted model and a real arbiter."""
    with Arbiter(registry(), workspace=workspace) as arbiter:
        yield {"model": ScriptedChatModel(script), "arbiter": arbiter}


@contextmanager
def arbiter_only(workspace: Path) -> Iterator[dict[str, Any]]:
    """The services of the SKILL.md workflow: a real arbiter, no model."""
    with Arbiter(registry(), workspace=workspace) as arbiter:
        yield {"arbiter": arbiter}


@contextmanager
def no_services(workspace: Path) -> Iterator[dict[str, Any]]:
    """Plain graphs need no services."""
    del workspace
    yield {}


# ----------------------------------------------------------------------------- graphs


class Flow(BaseModel):
    """The state of the plain graphs: a log, a total, a category, a report."""

    text: str = ""
    log: Annotated[list[str], reducers.append] = []
    total: Annotated[int, reducers.add] = 0
    category: str = ""
    words: list[str] = ["kettle", "toaster", "mug"]
    word: str = ""
    lengths: Annotated[dict[str, int], reducers.merge] = {}
    report: str = ""


def _step(name: str) -> Callable[[Flow], dict[str, Any]]:
    def node(state: Flow) -> dict[str, Any]:
        return {"log": [name], "total": len(state.log) + 1}

    node.__name__ = name
    node.__qualname__ = name
    return node


a = _step("a")
b = _step("b")
c = _step("c")


def grid_extra(state: Any) -> dict[str, Any]:
    """The unrelated node a later version of every graph adds (it writes nothing)."""
    return {}


def chain_graph() -> Graph[Flow]:
    """a -> b -> c."""
    return (
        Graph("grid-chain", state=Flow)
        .with_node("a", a)
        .with_node("b", b)
        .with_node("c", c)
        .with_edge(START, "a")
        .with_edge("a", "b")
        .with_edge("b", "c")
        .with_edge("c", END)
    )


def classify(state: Flow) -> dict[str, Any]:
    """Pick the category the router reads."""
    return {"category": "spam" if "win" in state.text else "ham", "log": ["classify"]}


def route(state: Flow) -> Literal["discard", "investigate"]:
    """Spam is discarded, the rest investigated."""
    return "discard" if state.category == "spam" else "investigate"


def discard(state: Flow) -> dict[str, Any]:
    """Drop the message."""
    return {"report": f"discarded {state.text!r}", "log": ["discard"]}


def investigate(state: Flow) -> dict[str, Any]:
    """Look into the message."""
    return {"report": f"investigated {state.text!r}", "log": ["investigate"]}


def route_graph() -> Graph[Flow]:
    """classify -> (discard | investigate) by a router."""
    return (
        Graph("grid-route", state=Flow)
        .with_node("classify", classify)
        .with_node("discard", discard)
        .with_node("investigate", investigate)
        .with_edge(START, "classify")
        .with_conditional_edges("classify", route)
        .with_edge("discard", END)
        .with_edge("investigate", END)
    )


def plan(state: Flow) -> dict[str, Any]:
    """The node the fan-out starts from."""
    return {"log": ["plan"]}


def fan_out(state: Flow) -> list[Send]:
    """One ``measure`` task per word."""
    return [Send("measure", {"word": w}) for w in state.words]


def measure(state: Flow) -> dict[str, Any]:
    """Measure one word (from its ``Send`` payload)."""
    return {"lengths": {state.word: len(state.word)}, "total": len(state.word)}


def collect(state: Flow) -> dict[str, Any]:
    """The join after the fan-out."""
    return {"report": ",".join(f"{k}={v}" for k, v in sorted(state.lengths.items()))}


def send_graph() -> Graph[Flow]:
    """plan -> Send(measure) per word -> collect."""
    return (
        Graph("grid-send", state=Flow)
        .with_node("plan", plan)
        .with_node("measure", measure)
        .with_node("collect", collect)
        .with_edge(START, "plan")
        .with_conditional_edges("plan", fan_out, ["measure"])
        .with_edge("measure", "collect")
        .with_edge("collect", END)
    )


class Counter(BaseModel):
    """The state of the mounted skill and of its host."""

    x: int = 0
    log: Annotated[list[str], reducers.append] = []


def bump(state: Counter) -> dict[str, Any]:
    """Add one (inside the skill)."""
    return {"x": state.x + 1, "log": [f"bump {state.x}"]}


def before(state: Counter) -> dict[str, Any]:
    """The host's node before the skill."""
    return {"x": state.x + 10, "log": ["before"]}


def after(state: Counter) -> dict[str, Any]:
    """The host's node after the skill."""
    return {"log": [f"after {state.x}"]}


def _inc_skill() -> Skill:
    inner = (
        Graph("grid-inner", state=Counter)
        .with_node("bump", bump)
        .with_node("bump2", bump)
        .with_edge(START, "bump")
        .with_edge("bump", "bump2")
        .with_edge("bump2", END)
        .to_ir()
    )
    return Skill(
        name="inc",
        version="1.0.0",
        kind="utility",
        description="adds two",
        state_schema=Counter,
        subgraph=inner,
    )


def skill_graph() -> Graph[Counter]:
    """before -> the ``inc`` skill mounted as a subgraph -> after."""
    return (
        Graph("grid-skill", state=Counter)
        .with_node("before", before)
        .with_node(SubgraphNode.from_skill(_inc_skill(), site="inc"))
        .with_node("after", after)
        .with_edge(START, "before")
        .with_edge("before", "inc")
        .with_edge("inc", "after")
        .with_edge("after", END)
    )


def react_agent_graph() -> Any:
    """The ReAct loop over the multiply tool."""
    return react_graph(name="grid-react", tools=[MULTIPLY], max_steps=4)


def options_agent_graph() -> Any:
    """The ReAct loop over the multiply tool, with request options on every model call."""
    return react_graph(
        name="grid-options",
        tools=[MULTIPLY],
        max_steps=4,
        temperature=0.0,
        request=RequestOptions(max_tokens=64, seed=7),
    )


def halting_agent_graph() -> Any:
    """A ReAct loop whose model never answers: its ``max_steps`` rule halts it."""
    return react_graph(name="grid-halt", tools=[MULTIPLY], max_steps=2)


SPEC: Final[dict[str, Any]] = {
    "name": "small",
    "description": "A small skill.",
    "initial_state": "work",
    "input_schema": {"type": "object"},
    "output_schema": {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
    },
    "states": {
        "work": {
            "objective": "Do the work.",
            "allowed_tools": [LOOKUP],
            "transitions": [{"on": "complete", "to": "done"}],
        },
        "done": {"objective": "Report the answer.", "terminal": True},
    },
    "max_steps": 6,
    "interruptible": True,
}


def machine_graph() -> Any:
    """The two-state SkillSpec machine: look up, ``complete``, ``finish``."""
    return skillspec_graph(parse_skillspec(SPEC, tools=registry()))


ARCHIVE: Final = """\
---
name: archive-notes
description: Copy the notes into the archive and check the copy.
version: 1.0.0
tools: [choir.fs.read@1.0.0, choir.fs.write@1.0.0]
workflow:
  - {step: read the notes, tool: choir.fs.read@1.0.0, params: {path: notes.txt}}
  - step: write the archive
    tool: choir.fs.write@1.0.0
    params: {path: archive/notes.txt, content: "archived: hello"}
verification:
  - {check: notes read, step: 1, contains: hello}
  - {check: archive written, tool: choir.fs.read@1.0.0, params: {path: archive/notes.txt},
     contains: "archived: hello"}
---
Archive carefully.
"""


def skillmd_graph() -> Any:
    """The SKILL.md workflow: read the notes, write the archive, verify."""
    skill = parse_skill_md(ARCHIVE, source="archive/SKILL.md")
    return Graph(skill.subgraph, impls=skill.impls)  # type: ignore[arg-type]


class Refund(BaseModel):
    """The interrupt feature's state."""

    order: str = ""
    amount: float = 0.0
    approved: bool = False
    done: str = ""


def approve(state: Refund, ctx: RunContext) -> dict[str, Any]:
    """Ask a person; their answer decides."""
    answer = ctx.interrupt({"question": f"refund {state.amount:.2f} EUR on {state.order}?"})
    return {"approved": bool(answer)}


def pay(state: Refund) -> dict[str, Any]:
    """Pay, or not."""
    return {"done": "refunded" if state.approved else "refused"}


def interrupt_graph() -> Graph[Refund]:
    """approve (asks) -> pay."""
    return (
        Graph("grid-interrupt", state=Refund)
        .with_node("approve", approve)
        .with_node("pay", pay)
        .with_edge(START, "approve")
        .with_edge("approve", "pay")
        .with_edge("pay", END)
    )


class Chat(BaseModel):
    """The thread feature's state."""

    messages: Annotated[list[str], reducers.append] = []
    user: str = ""


def reply(chat: Chat, ctx: RunContext) -> dict[str, Any]:
    """Answer the last message, naming the thread (``ctx.thread_id``: the run's, resumed
    and replayed too)."""
    text = f"bot: {chat.messages[-1]!r}, message {len(chat.messages)} on {ctx.thread_id}"
    return {"messages": [text]}


def thread_graph() -> Graph[Chat]:
    """One reply per turn."""
    return (
        Graph("grid-thread", state=Chat)
        .with_node("reply", reply)
        .with_edge(START, "reply")
        .with_edge("reply", END)
    )


# ----------------------------------------------------------------------------- command


def triage(state: Flow) -> Command:
    """Write the category and go, by Command, to its handler and to one measure per word
    (on top of the static edge to ``a``)."""
    target = "discard" if "win" in state.text else "investigate"
    sends = [Send("measure", {"word": word}) for word in state.words]
    return Command(update={"category": target, "log": ["triage"]}, goto=[target, *sends])


def command_graph() -> Graph[Flow]:
    """triage -> a (edge), and by Command -> discard | investigate, measure x3; all end."""
    return (
        Graph("grid-command", state=Flow)
        .with_node("triage", triage, destinations=["discard", "investigate", "measure"])
        .with_node("a", a)
        .with_node("discard", discard)
        .with_node("investigate", investigate)
        .with_node("measure", measure)
        .with_edge(START, "triage")
        .with_edge("triage", "a")
    )


def escalate(counter: Counter) -> Command:
    """Inside the skill: send the parent on to ``after`` with the count doubled; the
    skill's last node does not run."""
    return Command(graph=Command.PARENT, update={"x": counter.x * 2}, goto="after")


def _escalating_skill() -> Skill:
    inner = (
        Graph("grid-escalating", state=Counter)
        .with_node("bump", bump)
        .with_node("escalate", escalate)
        .with_node("bump2", bump)
        .with_edge(START, "bump")
        .with_edge("bump", "escalate")
        .with_edge("escalate", "bump2")
        .to_ir()
    )
    return Skill(
        name="escalating",
        version="1.0.0",
        kind="utility",
        description="bumps, then hands the parent on",
        state_schema=Counter,
        subgraph=inner,
    )


def parent_command_graph() -> Graph[Counter]:
    """before -> a skill whose child routes the parent by Command to ``after``."""
    return (
        Graph("grid-parent-command", state=Counter)
        .with_node("before", before)
        .with_node(SubgraphNode.from_skill(_escalating_skill(), site="esc", destinations=["after"]))
        .with_node("after", after)
        .with_edge(START, "before")
        .with_edge("before", "esc")
    )


# ----------------------------------------------------------------------------- messages


class Talk(MessagesState):
    """The messages feature's state: a conversation merged by ``add_messages``."""

    turns: Annotated[int, reducers.add] = 0


def greet(talk: Talk) -> dict[str, Any]:
    """The host's first reply, then a correction of it under the same id."""
    first = Message(role="assistant", content="helo", id="greeting")
    return {"messages": [first, first.model_copy(update={"content": "hello"})], "turns": 1}


def echo(talk: Talk) -> dict[str, Any]:
    """Inside the skill: return the whole history plus one message (ids make it idempotent)."""
    said = Message.assistant(f"child saw {len(talk.messages)}")
    return {"messages": [*talk.messages, said], "turns": 1}


def prune(talk: Talk) -> dict[str, Any]:
    """The host's last node: drop the first user message by id, add a closing word."""
    return {"messages": [RemoveMessage(id=talk.messages[0].id or ""), "thanks"], "turns": 1}


def _echo_skill() -> Skill:
    inner = (
        Graph("grid-echo", state=Talk)
        .with_node("echo", echo)
        .with_edge(START, "echo")
        .with_edge("echo", END)
        .to_ir()
    )
    return Skill(
        name="echo",
        version="1.0.0",
        kind="utility",
        description="answers with the whole history",
        state_schema=Talk,
        subgraph=inner,
    )


def messages_graph() -> Graph[Talk]:
    """greet -> the ``echo`` skill (returns the whole history) -> prune."""
    return (
        Graph("grid-messages", state=Talk)
        .with_node("greet", greet)
        .with_node(SubgraphNode.from_skill(_echo_skill(), site="echo"))
        .with_node("prune", prune)
        .with_edge(START, "greet")
        .with_edge("greet", "echo")
        .with_edge("echo", "prune")
        .with_edge("prune", END)
    )


# ----------------------------------------------------------------------------- agent


def area(width: float, height: float) -> float:
    """The area of a rectangle (a plain function: the agent makes it a tool)."""
    _effect(f"area {width} {height}")
    return width * height


def agent_script(request: ChatRequest) -> ChatResponse:
    """Under plain names: the area, then a lookup, then an answer quoting both results."""
    results = [m.content for m in request.messages if m.role == "tool"]
    if not results:
        return _call("area", {"width": 3, "height": 4.5}, "agent-1")
    if len(results) == 1:
        return _call("lookup", {"query": "rooms"}, "agent-2")
    return _text(f"{results[0]} square metres; {results[1]}", "agent-3")


def agent_feature_graph() -> Any:
    """The prebuilt agent over a plain function and a ``@tool``."""
    from stargraph.skills.agent import agent_graph

    return agent_graph([area, lookup], name="grid-agent", max_steps=4)


@contextmanager
def agent_services(workspace: Path) -> Iterator[dict[str, Any]]:
    """The agent's scripted model and an arbiter over its tools."""
    from stargraph.skills.agent import agent_tools

    registry = ToolRegistry.build(builtins=agent_tools([area, lookup]))
    with Arbiter(registry, workspace=workspace) as arbiter:
        yield {"model": ScriptedChatModel(agent_script), "arbiter": arbiter}


class Room(AgentState):
    """The Command agent's state: a channel its tools update."""

    room: str = ""


def name_room(name: str) -> Command:
    """Name the room (a tool returning a Command that updates the state)."""
    _effect(f"name_room {name}")
    return Command(update={"room": name})


def close_room(summary: str) -> Command:
    """End the conversation (a tool returning Command(goto=END))."""
    _effect(f"close_room {summary}")
    return Command(update={"messages": [Message.assistant(summary)]}, goto=END)


def room_script(request: ChatRequest) -> ChatResponse:
    """Name the room, then close the conversation quoting the tool's answer."""
    results = [m.content for m in request.messages if m.role == "tool"]
    if not results:
        return _call("name_room", {"name": "study"}, "room-1")
    return _call("close_room", {"summary": f"named: {results[0]}"}, "room-2")


def agent_command_graph() -> Any:
    """The prebuilt agent over tools that return ``Command``."""
    from stargraph.skills.agent import agent_graph

    return agent_graph([name_room, close_room], state=Room, name="grid-rooms", max_steps=4)


@contextmanager
def agent_command_services(workspace: Path) -> Iterator[dict[str, Any]]:
    """The Command agent's scripted model and an arbiter over its tools."""
    from stargraph.skills.agent import agent_tools

    registry = ToolRegistry.build(builtins=agent_tools([name_room, close_room]))
    with Arbiter(registry, workspace=workspace) as arbiter:
        yield {"model": ScriptedChatModel(room_script), "arbiter": arbiter}


class Desk(AgentState):
    """A front-desk agent's state, shared with the parent graph it hands off to."""

    handed_to: str = ""
    billing_saw: int = 0


def to_billing() -> Command:
    """Hand the conversation to the parent's billing node."""
    _effect("to_billing")
    return Command(graph=Command.PARENT, goto="billing", update={"handed_to": "billing"})


def desk_script(request: ChatRequest) -> ChatResponse:
    """One reply: hand off first, then measure the room (both calls run)."""
    calls = [
        ToolCall(id="desk-1", name="to_billing", arguments="{}"),
        ToolCall(id="desk-2", name="area", arguments=json.dumps({"width": 2, "height": 3})),
    ]
    message = ChatMessage.assistant(None, calls)
    return ChatResponse(message=message, finish_reason="tool_calls", id="resp-desk-1")


def billing(state: Desk) -> dict[str, Any]:
    """The parent's node the agent hands off to: counts the conversation it got."""
    return {"billing_saw": len(state.messages)}


def agent_handoff_graph() -> Graph[Desk]:
    """A parent whose agent skill hands off to ``billing`` in a reply with another call."""
    from stargraph.skills.agent import agent_graph

    front = Skill.from_graph(
        agent_graph([to_billing, area], state=Desk, name="grid-desk", max_steps=4),
        name="grid-desk",
        version="1.0.0",
        kind="utility",
        description="the front desk agent",
        state_schema=Desk,
    )
    return (
        Graph("grid-handoff", state=Desk)
        .with_node(SubgraphNode.from_skill(front, site="front", destinations=["billing"]))
        .with_node("billing", billing)
        .with_edge(START, "front")
        .with_edge("billing", END)
    )


@contextmanager
def agent_handoff_services(workspace: Path) -> Iterator[dict[str, Any]]:
    """The desk agent's scripted model and an arbiter over its tools."""
    from stargraph.skills.agent import agent_tools

    registry = ToolRegistry.build(builtins=agent_tools([to_billing, area]))
    with Arbiter(registry, workspace=workspace) as arbiter:
        yield {"model": ScriptedChatModel(desk_script), "arbiter": arbiter}


# ----------------------------------------------------------------------------- managed


class Countdown(BaseModel):
    """A loop that reads the steps left (a managed value)."""

    log: Annotated[list[int], reducers.append] = []
    left: Annotated[int, RemainingSteps] = 0


def count(state: Countdown) -> dict[str, Any]:
    """Log the steps left."""
    return {"log": [state.left]}


def three_times(state: Countdown) -> Literal["count", "__end__"]:
    """Three counts, then the end; never with no step left (the router sees the managed
    value as the node before it did: with its default, 0, it would stop at once)."""
    return "count" if len(state.log) < 3 and state.left > 0 else END


def managed_graph() -> Graph[Countdown]:
    """count -> count -> count: each sees one step fewer left."""
    return (
        Graph("grid-managed", state=Countdown)
        .with_node("count", count)
        .with_edge(START, "count")
        .with_conditional_edges("count", three_times, {"count": "count", END: END})
    )


# ----------------------------------------------------------------------------- closures


def make_greeter(name: str) -> Callable[[Flow], dict[str, Any]]:
    """A per-agent node, built by a factory: the name is captured, not configured."""

    def greet(state: Flow) -> dict[str, Any]:
        return {"log": [f"{name} greets {state.text}"], "total": len(name)}

    return greet


def _suffixer(mark: str) -> Callable[[Flow], dict[str, Any]]:
    def close(state: Flow) -> dict[str, Any]:
        return {"report": " / ".join(state.log) + mark}

    return close


def closure_graph() -> Graph[Flow]:
    """Two products of one factory (rebuilt from the IR anywhere) -> a closure built in place."""
    return (
        Graph("grid-closure", state=Flow)
        .with_node("bob", factory=(make_greeter, {"name": "bob"}))
        .with_node("ada", factory=(make_greeter, {"name": "ada"}))
        .with_node("close", _suffixer("!"))
        .with_edge(START, "bob")
        .with_edge("bob", "ada")
        .with_edge("ada", "close")
        .with_edge("close", END)
    )


# ----------------------------------------------------------------------------- cache


def tally(state: Flow) -> dict[str, Any]:
    """A cached node: its writes are served again when the text repeats."""
    return {"log": [f"tally {state.text}"], "total": len(state.text)}


def text_key(state: Flow) -> str:
    """The cache key of ``tally``: the text alone."""
    return state.text


def once_more(state: Flow) -> Literal["tally", "__end__"]:
    """Back to ``tally`` once: its second run, on the same text, is a cache hit."""
    return "tally" if len(state.log) < 3 else END


def cache_graph() -> Graph[Flow]:
    """tally (cached by text) -> again -> tally (a hit) -> again -> END."""
    from stargraph.ir import CachePolicyIR

    return (
        Graph("grid-cache", state=Flow)
        .with_node("tally", tally, cache=CachePolicyIR(key=text_key))
        .with_node("again", factory=(make_greeter, {"name": "again"}))
        .with_edge(START, "tally")
        .with_edge("tally", "again")
        .with_conditional_edges("again", once_more, {"tally": "tally", END: END})
    )


# ----------------------------------------------------------------------------- boundary


class Memo(BaseModel):
    """A state with a private channel: ``scratch`` never crosses the graph's boundary."""

    text: str = ""
    scratch: Annotated[str, Private] = ""
    report: str = ""
    peeked: str = ""


class MemoIn(BaseModel):
    """What a run of the boundary graph is given."""

    text: str


class MemoOut(BaseModel):
    """What it hands back."""

    report: str
    peeked: str


class Scratching(BaseModel):
    """The input of the node that declares the private channel."""

    scratch: str = ""


def jot(state: Memo) -> dict[str, Any]:
    """Writes the private scratch (declared through writes=)."""
    return {"scratch": f"notes on {state.text}"}


def glance(state: Memo) -> dict[str, Any]:
    """Declares nothing private: sees the scratch at its default."""
    return {"peeked": repr(state.scratch)}


def summarise(item: Scratching) -> dict[str, Any]:
    """Reads the private scratch through its input model."""
    return {"report": item.scratch.upper()}


def boundary_graph() -> Graph[Memo]:
    """jot -> glance -> summarise, behind input and output models."""
    return (
        Graph("grid-boundary", state=Memo, input=MemoIn, output=MemoOut)
        .with_node("jot", jot, writes=["scratch"])
        .with_node("glance", glance)
        .with_node("summarise", summarise, input=Scratching)
        .with_edge(START, "jot")
        .with_edge("jot", "glance")
        .with_edge("glance", "summarise")
        .with_edge("summarise", END)
    )


# ----------------------------------------------------------------------------- langgraph


class LGTicket(TypedDict):
    """A LangGraph-style state, as ``stargraph.langgraph`` takes it."""

    text: str
    queue: str
    log: Annotated[list[str], operator.add]


def lg_classify(ticket: LGTicket) -> dict[str, Any]:
    """Pick the queue the router reads."""
    return {"queue": "billing" if "invoice" in ticket["text"] else "support", "log": ["classify"]}


def lg_route(ticket: LGTicket) -> Literal["lg_approve", "lg_answer"]:
    """Billing needs an approval."""
    return "lg_approve" if ticket["queue"] == "billing" else "lg_answer"


def lg_approve(ticket: LGTicket) -> dict[str, Any]:
    """Ask a human (the layer's ``interrupt``)."""
    from stargraph.langgraph import interrupt

    return {"log": [f"approved={interrupt({'question': 'refund?'})}"]}


def lg_answer(ticket: LGTicket) -> dict[str, Any]:
    """Answer the ticket."""
    return {"log": ["answer"]}


def langgraph_graph() -> Graph[Any]:
    """A graph written with ``stargraph.langgraph``'s builder, as the native graph it makes."""
    from stargraph.langgraph import END as LG_END
    from stargraph.langgraph import START as LG_START
    from stargraph.langgraph import StateGraph

    builder = StateGraph(LGTicket)
    builder.add_node(lg_classify)
    builder.add_node(lg_approve)
    builder.add_node(lg_answer)
    builder.add_edge(LG_START, "lg_classify")
    builder.add_conditional_edges("lg_classify", lg_route)
    builder.add_edge("lg_approve", "lg_answer")
    builder.add_edge("lg_answer", LG_END)
    return builder.to_graph("grid-langgraph")


# ----------------------------------------------------------------------------- langchain


@functools.cache
def _langchain_area() -> Any:
    """A LangChain ``@tool`` (made at first use: importing the grid does not import
    ``langchain_core``)."""
    from langchain_core.tools import tool as langchain_tool

    @langchain_tool
    def room_area(width: float, height: float) -> float:
        """The area of a rectangle."""
        _effect(f"room_area {width} {height}")
        return width * height

    return room_area


def _langchain_model() -> Any:
    """A LangChain chat model that binds tools as providers do and answers from what the
    conversation holds (so a resumed run's next call gets the reply it needs)."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class Scripted(BaseChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self.bind(tools=list(tools), **kwargs)

        @property
        def _llm_type(self) -> str:
            return "grid-scripted"

        def _generate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            results = [m.content for m in messages if isinstance(m, ToolMessage)]
            if not results:
                name = kwargs["tools"][0]["function"]["name"]
                call = {"name": name, "args": {"width": 2, "height": 5}, "id": "lc-1"}
                reply = AIMessage(content="", tool_calls=[call])
            else:
                reply = AIMessage(content=f"{results[0]} square metres")
            return ChatResult(generations=[ChatGeneration(message=reply)])

    return Scripted()


def langchain_feature_graph() -> Any:
    """The prebuilt agent over a LangChain tool, served by a LangChain model."""
    from stargraph.skills.agent import agent_graph

    return agent_graph([_langchain_area()], name="grid-langchain", max_steps=4)


@contextmanager
def langchain_services(workspace: Path) -> Iterator[dict[str, Any]]:
    """The LangChain model, wrapped, and an arbiter over the LangChain tool."""
    from stargraph.llm.langchain import LangChainChatModel
    from stargraph.skills.agent import agent_tools

    registry = ToolRegistry.build(builtins=agent_tools([_langchain_area()]))
    with Arbiter(registry, workspace=workspace) as arbiter:
        yield {"model": LangChainChatModel(_langchain_model()), "arbiter": arbiter}


# ----------------------------------------------------------------------------- MCP

_MCP_DIR: Final = Path(__file__).resolve().parent


def _mcp_server() -> Any:
    """The grid's MCP server (``mcp_server.py``, over stdio), its listing pinned: the graph
    is built without starting it, and a replay never does."""
    import sys

    from stargraph.tools import McpListing, McpServer

    listing = McpListing.model_validate_json((_MCP_DIR / "mcp_listing.json").read_text())
    env = {LEDGER: os.environ[LEDGER]} if LEDGER in os.environ else {}
    return McpServer(
        command=[sys.executable, str(_MCP_DIR / "mcp_server.py")], env=env, listing=listing
    )


def mcp_script(request: ChatRequest) -> ChatResponse:
    """The room's area from the MCP tool (under its own name), then the answer quoting it."""
    results = [m.content for m in request.messages if m.role == "tool"]
    if not results:
        return _call("room_area", {"width": 3, "height": 4.5}, "mcp-1")
    return _text(f"{results[0]} square metres", "mcp-2")


def mcp_feature_graph() -> Any:
    """The prebuilt agent over a tool of an MCP server."""
    from stargraph.skills.agent import agent_graph

    return agent_graph(list(_mcp_server().tools()), name="grid-mcp", max_steps=3)


@contextmanager
def mcp_services(workspace: Path) -> Iterator[dict[str, Any]]:
    """The scripted model and an arbiter over the MCP server (closed with it)."""
    with Arbiter(ToolRegistry.build(mcp=[_mcp_server()]), workspace=workspace) as arbiter:
        yield {"model": ScriptedChatModel(mcp_script), "arbiter": arbiter}


# ----------------------------------------------------------------------------- the table


NO_ANSWER: Final[Any] = object()
"""A feature whose run never waits for an answer."""


def _notes(workspace: Path) -> None:
    (workspace / "notes.txt").write_text("hello world\n", encoding="utf-8")


@dataclass(frozen=True)
class Feature:
    """One feature of the grid: how to build, feed and serve its graph."""

    name: str
    graph: str
    """``module:attr`` of a function returning the graph (what a worker imports)."""
    input: dict[str, Any]
    services: Callable[[Path], Any] = no_services
    """A context manager factory: the services mapping, given the cell's workspace."""
    answer: Any = NO_ANSWER
    """The response an interrupted run is resumed with (a callable: made from the pending
    interrupts the run's record holds, for answers keyed by interrupt id)."""
    second: dict[str, Any] | None = None
    """The second turn's input, for a feature run as two turns of one thread."""
    journaled: str | None = None
    """The kind of journaled call (``tool``, ``interrupt``) the ``sigkill_journaled`` cell
    dies right after, mid-step; None: the graph makes none."""
    storeless: bool = True
    """Whether the graph runs without a checkpoint store (interrupts and threads need one)."""
    prepare: Callable[[Path], None] = field(default=lambda workspace: None)
    """What the workspace must hold before the run (files a tool reads)."""

    def response(self, app: Any, run_id: str) -> Any:
        """The answer to give the interrupted ``run_id``: :attr:`answer`, or what it makes."""
        if not callable(self.answer):
            return self.answer
        from stargraph.runtime import Interrupt

        waiting = Interrupt.read(app.get_run(run_id).interrupt, run_id=run_id)
        assert waiting is not None, app.get_run(run_id)
        return self.answer(waiting.pending)

    def build(self) -> Any:
        """The graph, imported as a worker imports it."""
        from stargraph.workers import load_graph

        return load_graph(self.graph)

    @contextmanager
    def serve(self, workspace: Path) -> Iterator[dict[str, Any]]:
        """The services, open for the duration of the block."""
        with ExitStack() as stack:
            yield stack.enter_context(self.services(workspace))


def _models(script: Callable[[ChatRequest], ChatResponse]) -> Callable[[Path], Any]:
    def services(workspace: Path) -> Any:
        return model_and_arbiter(script, workspace)

    return services


_M = "tests.grid.features"

FEATURES: Final[dict[str, Feature]] = {
    f.name: f
    for f in (
        Feature("chain", f"{_M}:chain_graph", {"text": "hi"}),
        Feature("route", f"{_M}:route_graph", {"text": "win a prize"}),
        Feature("send", f"{_M}:send_graph", {"text": "fan"}),
        Feature("skill", f"{_M}:skill_graph", {"x": 1}),
        Feature(
            "react",
            f"{_M}:react_agent_graph",
            {"task": "What do 3 items at 4.50 EUR cost?"},
            services=_models(react_script),
            journaled="tool",
        ),
        Feature(
            "options",
            f"{_M}:options_agent_graph",
            {"task": "What do 3 items at 4.50 EUR cost?"},
            services=_models(options_script),
            journaled="tool",
        ),
        Feature(
            "halt",
            f"{_M}:halting_agent_graph",
            {"task": "Multiply forever."},
            services=_models(looping_script),
            journaled="tool",
        ),
        Feature(
            "machine",
            f"{_M}:machine_graph",
            {"input": {"topic": "x"}},
            services=_models(machine_script),
            journaled="tool",
        ),
        Feature(
            "skillmd",
            f"{_M}:skillmd_graph",
            {},
            services=arbiter_only,
            prepare=_notes,
            journaled="tool",
        ),
        Feature(
            "interrupt",
            f"{_M}:interrupt_graph",
            {"order": "A-17", "amount": 12.5},
            answer=True,
            journaled="interrupt",
            storeless=False,
        ),
        Feature(
            "thread",
            f"{_M}:thread_graph",
            {"messages": ["hello"], "user": "ada"},
            second={"messages": ["bye"]},
            storeless=False,
        ),
        Feature("command", f"{_M}:command_graph", {"text": "win a prize"}),
        Feature("parent_command", f"{_M}:parent_command_graph", {"x": 1}),
        Feature("messages", f"{_M}:messages_graph", {"messages": ["hi", "hi"]}),
        Feature(
            "agent",
            f"{_M}:agent_feature_graph",
            {"messages": ["How large is a 3 by 4.5 room?"]},
            services=agent_services,
            journaled="tool",
        ),
        Feature(
            "agent_command",
            f"{_M}:agent_command_graph",
            {"messages": ["Name this room."]},
            services=agent_command_services,
            journaled="tool",
        ),
        Feature(
            "agent_handoff",
            f"{_M}:agent_handoff_graph",
            {"messages": ["Bill me for a 2 by 3 room."]},
            services=agent_handoff_services,
            journaled="tool",
        ),
        Feature("managed", f"{_M}:managed_graph", {}),
        Feature(
            "mcp",
            f"{_M}:mcp_feature_graph",
            {"messages": ["How large is a 3 by 4.5 room?"]},
            services=mcp_services,
            journaled="tool",
        ),
        Feature("closure", f"{_M}:closure_graph", {"text": "you"}),
        Feature("cache", f"{_M}:cache_graph", {"text": "cached"}),
        Feature("boundary", f"{_M}:boundary_graph", {"text": "memo"}),
        Feature(
            "langgraph",
            f"{_M}:langgraph_graph",
            {"text": "my invoice"},
            answer=True,
            journaled="interrupt",
            storeless=False,
        ),
        Feature(
            "langchain",
            f"{_M}:langchain_feature_graph",
            {"messages": ["How large is a 2 by 5 room?"]},
            services=langchain_services,
            journaled="tool",
        ),
        Feature(
            "interrupts",
            f"{_M}:interrupts_graph",
            {"order": "B-9"},
            answer=lambda pending: answer_each(pending),  # noqa: PLW0108 - defined below, after the table
            journaled="interrupt",
            storeless=False,
        ),
    )
}
"""Every feature of the grid, by name (the first part of a cell id)."""


# ----------------------------------------------------------------------------- interrupts


class Sign(BaseModel):
    """The several-interrupts feature's state: two people sign in parallel."""

    order: str = ""
    signed: Annotated[list[str], reducers.append] = []
    verdict: str = ""


def sign_legal(state: Sign, ctx: RunContext) -> dict[str, Any]:
    """Legal signs when its person answers."""
    return {"signed": [f"legal:{ctx.interrupt({'who': 'legal', 'order': state.order})}"]}


def sign_finance(state: Sign, ctx: RunContext) -> dict[str, Any]:
    """Finance signs when its person answers."""
    return {"signed": [f"finance:{ctx.interrupt({'who': 'finance', 'order': state.order})}"]}


def stamp(state: Sign) -> dict[str, Any]:
    """A sibling that asks nobody: it finishes while the others wait."""
    return {"signed": [f"stamp:{state.order}"]}


def verdict(state: Sign) -> dict[str, Any]:
    """Join: every signature in."""
    return {"verdict": " ".join(sorted(state.signed))}


def answer_each(pending: tuple[Any, ...]) -> dict[str, Any]:
    """One answer per pending interrupt, by its id."""
    assert len(pending) == 2, pending
    return {q.id: f"yes-{q.payload['who']}" for q in pending}


def interrupts_graph() -> Graph[Sign]:
    """legal, finance (both ask) and stamp in parallel -> verdict."""
    graph = Graph("grid-interrupts", state=Sign).with_node("verdict", verdict)
    for name, fn in (("legal", sign_legal), ("finance", sign_finance), ("stamp", stamp)):
        graph = graph.with_node(name, fn).with_edge(START, name).with_edge(name, "verdict")
    return graph.with_edge("verdict", END)
