"""A prebuilt agent over plain Python functions and a message list: :func:`create_agent`.

    def get_weather(city: str) -> str:
        '''The weather in a city.'''
        return f"sunny in {city}"

    agent = create_agent(model, [get_weather], prompt="Be brief.")
    final = agent.invoke({"messages": ["What is the weather in Paris?"]})
    final.messages[-1].content

It is the ReAct loop of :mod:`stargraph.skills.react` (``think`` -> ``act`` -> ``observe``,
ended only by rules: a final answer, or the step and error budgets) over a
:class:`~stargraph.messages.MessagesState` conversation instead of a task string:

* a plain function becomes a tool: its name is the function's name, its argument schema
  comes from its signature, its description from its docstring, and its canonical id is
  derived (``agent.<module>.<name>@0.0.0``); a ``@tool`` declared one keeps its own id;
* the model is offered the tools, in the order given, under their plain names (the
  agent's name map is node config, so it is in the graph hash) and sees a tool's return
  value as the tool message (a string as it is, anything else as JSON); the arbiter still
  validates, authorises, locks, records the canonical id in its commit log and journals
  the full result, so a run resumes and replays exactly as a ReAct run does;
* a tool that raises, or a call the arbiter refuses, becomes a tool message starting
  ``Error:`` that the model sees (and costs one unit of the error budget);
* input and output are the ``messages`` list (``{"messages": ["hi"]}`` in, the state with
  its ``messages`` out).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import re
import tempfile
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Final, cast

from pydantic import BaseModel, JsonValue

from stargraph import fathom
from stargraph.errors import Problem, RegistryError, SkillValidationError, ToolError
from stargraph.graph import END, START, Graph, Send
from stargraph.llm import ChatModel, ChatRequest, ChatResponse, RequestOptions, Usage
from stargraph.llm._history import Message
from stargraph.messages import MessagesState
from stargraph.runtime import RunContext
from stargraph.runtime._plan import Command
from stargraph.skills._react_rules import exit_pack, termination_pack
from stargraph.skills._services import (
    ARBITER_WHAT,
    MODEL_WHAT,
    is_chat_model,
    is_tool_dispatcher,
    options_config,
)
from stargraph.skills.react import (
    _REQUEST_FIELDS,
    _REQUEST_VALUES,
    _act_arbiter,
    _check_answer,
    _head,
    _output_ref,
    _read_reply,
    _service,
    _system_prompt,
)
from stargraph.tools import Arbiter, PythonTool, ToolCall, ToolRegistry, ToolResult, ToolSpec, tool
from stargraph.tools._command import command_of
from stargraph.tools._langchain import LangChainToolLike, from_langchain, is_langchain_tool
from stargraph.tools._result import built
from stargraph.tools._spec import llm_name_for

if TYPE_CHECKING:
    from stargraph.checkpoint import CheckpointStore
    from stargraph.runtime import CompiledGraph
    from stargraph.tools import Tool

__all__ = ["AgentState", "agent_graph", "agent_tools", "create_agent"]

_LANE: Final = "core"
_VERSION: Final = "0.0.0"
_BAD: Final = re.compile(r"[^a-z0-9]+")
_LLM_NAME: Final = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_LLM_NAME_MAX: Final = 64


class AgentState(MessagesState):
    """The agent's state: the conversation plus what the rules that end the loop read.

    Subclass it to add channels (``create_agent(..., state=MyState)``).
    """

    llm_steps: Annotated[int, fathom.Fact()] = 0
    """Model calls so far; rule ``max_steps`` compares it with the limit."""
    done: Annotated[bool, fathom.Fact()] = False
    """Whether the last step ended with a valid final answer."""
    error_count: int = 0
    """Failed tool calls, refusals and rejected answers so far; rule ``error_budget``."""
    last_event: str | None = None
    """What the last node saw (``tool_calls``, ``final_answer``, ``tool_success``,
    ``tool_error``, ``refusal``, ``invalid_answer``, ``empty_answer``, ``truncated``)."""
    usage: Usage = Usage()
    """Token usage of every model call of the run, summed."""
    structured_response: dict[str, JsonValue] | None = None
    """With ``response_format``: the final answer validated against it, as JSON data."""


# --------------------------------------------------------------------------- tools


def _segment(text: str, fallback: str) -> str:
    """``text`` as one segment of a canonical tool name (lower case, ``_`` between parts)."""
    cleaned = _BAD.sub("_", text.lower()).strip("_")
    if not cleaned or not cleaned[0].isalpha():
        cleaned = f"{fallback}_{cleaned}".strip("_")
    return cleaned


def _plain_name(candidate: Tool) -> str:
    """The name the model sees: the function's own (a ``@tool`` function's too), else the
    last part of the tool's name."""
    source = getattr(candidate, "source", None)
    if isinstance(candidate, PythonTool) and isinstance(source, str):
        return source.rpartition(":")[2].rpartition(".")[2]
    return candidate.spec.name.rpartition(".")[2]


def agent_tools(tools: Sequence[Callable[..., Any] | Tool | LangChainToolLike]) -> tuple[Tool, ...]:
    """The tools of an agent, in the order given: a ``Tool`` (``@tool(...)``) as it is, a
    LangChain tool made one by :func:`~stargraph.tools.from_langchain`, a
    plain function made one with a derived id (``agent.<module>.<name>@0.0.0``) and the
    defaults of :func:`~stargraph.tools.tool` (``side_effect="none"``: it runs inline, with
    no locks and no audit record; declare a function that writes or reaches the outside
    world with ``@tool(id=..., side_effect=..., locks=...)`` instead). The same functions
    give the same tools in every process.

    >>> def add(a: int, b: int) -> int:
    ...     '''Add two integers.'''
    ...     return a + b
    >>> [t.spec.id for t in agent_tools([add])]
    ['agent.stargraph_skills_agent.add@0.0.0']
    """
    made: list[Tool] = []
    problems: list[Problem] = []
    for index, given in enumerate(tools):
        if isinstance(getattr(given, "spec", None), ToolSpec):
            made.append(cast("Tool", given))
        elif is_langchain_tool(given):
            made.append(from_langchain(given))
        elif inspect.isfunction(given) or inspect.ismethod(given):
            made.append(tool(id=_derived_id(given))(given))
        else:
            problems.append(
                Problem(
                    f"/tools/{index}",
                    f"expected a function or a @tool, got {type(given).__name__} {given!r:.60}",
                    "pass a def with type hints and a docstring, or a @tool(id=...) function",
                )
            )
    if problems:
        raise SkillValidationError(problems, subject="agent tools")
    return tuple(made)


def _derived_id(fn: Callable[..., Any]) -> str:
    """``agent.<module>.<name>@0.0.0`` for a plain function. A module path too long for
    the id's LLM name (64 characters) is cut to its last part and a hash of the whole, so
    the id stays the same in every process and two modules never share one."""
    dotted = fn.__module__ or "main"
    name = _segment(fn.__name__, "f")
    module = _segment(dotted.replace(".", "_"), "m")
    ident = f"agent.{module}.{name}@{_VERSION}"
    if len(llm_name_for(ident)) <= _LLM_NAME_MAX:
        return ident
    digest = hashlib.sha256(dotted.encode()).hexdigest()[:8]
    module = f"{_segment(dotted.rpartition('.')[2], 'm')[:16]}_{digest}"
    return f"agent.{module}.{name}@{_VERSION}"


def _names(tools: Sequence[Tool]) -> dict[str, str]:
    """Plain name -> canonical id; two tools of one plain name are refused, both named."""
    by_name: dict[str, list[str]] = {}
    for one in tools:
        by_name.setdefault(_plain_name(one), []).append(one.spec.id)
    problems = [
        Problem(
            f"/tools/{name}",
            f"{len(ids)} tools would reach the model as {name!r}: {ids}",
            "rename one of the functions",
        )
        for name, ids in sorted(by_name.items())
        if len(ids) > 1
    ]
    problems += [
        Problem(
            f"/tools/{name}",
            f"{name!r} is not a function name a model accepts (^[a-zA-Z0-9_-]{{1,64}}$)",
            "rename the function",
        )
        for name in sorted(by_name)
        if not _LLM_NAME.match(name)
    ]
    if problems:
        raise RegistryError(problems, subject="agent tools")
    return {name: ids[0] for name, ids in by_name.items()}


# --------------------------------------------------------------------------- the graph


def agent_graph(
    tools: Sequence[Callable[..., Any] | Tool | LangChainToolLike] = (),
    *,
    prompt: str | None = None,
    state: type[AgentState] = AgentState,
    response_format: type[BaseModel] | None = None,
    name: str = "agent",
    model: str | None = None,
    max_steps: int = 10,
    error_budget: int = 3,
    temperature: float | None = None,
    request: RequestOptions | None = None,
) -> Graph[AgentState]:
    """The agent as a :class:`~stargraph.graph.Graph`, to compile with
    ``services={"model": <ChatModel>, "arbiter": <Arbiter over agent_tools(tools)>}``;
    :func:`create_agent` does both. ``model`` names the model (``None``: the chat model's
    default); ``temperature`` and ``request`` (:class:`~stargraph.llm.RequestOptions`:
    ``max_tokens``, ``seed`` ...) fix those fields of every model call, as in
    :func:`~stargraph.skills.react.react_graph` (node config, so in the graph hash).

    >>> def add(a: int, b: int) -> int:
    ...     '''Add two integers.'''
    ...     return a + b
    >>> sorted(n.id for n in agent_graph([add]).to_ir().nodes if n.must_stub)
    ['think']
    """
    made = agent_tools(tools)
    names = _names(made)
    if not (isinstance(state, type) and issubclass(state, AgentState)):
        raise SkillValidationError(
            [
                Problem(
                    "/state",
                    f"expected a subclass of AgentState, got {state!r}",
                    "declare class MyState(AgentState): ... and pass state=MyState",
                )
            ],
            subject=f"agent {name!r}",
        )
    config: dict[str, Any] = {
        # The user's order, which is the order the model is offered them in.
        "tools": [t.spec.id for t in made],
        "tool_names": names,
        "error_budget": error_budget,
        "max_steps": max_steps,
    }
    if prompt is not None:
        config["system_prompt"] = prompt
    if model is not None:
        config["model"] = model
    # Only what is given: an agent without options hashes as before.
    config.update(options_config(temperature, request, subject=f"agent {name!r}"))
    if response_format is not None:
        config["output_model"] = _output_ref(response_format)
        config["output_schema"] = response_format.model_json_schema()
    # A tool's Command(goto=END) finishes the run through the done_flag rule: termination
    # stays with the rules, which the run record names.
    own = sorted(set(state.model_fields) - set(AgentState.model_fields))
    if own:
        config["tool_writes"] = own
    packs = [termination_pack(max_steps, error_budget), exit_pack(done_flag=True)]
    return (
        Graph(name, state=state)
        .with_node(
            "think",
            think,
            config=config,
            must_stub=True,
            writes=(
                "messages",
                "llm_steps",
                "error_count",
                "done",
                "last_event",
                "usage",
                "structured_response",
            ),
        )
        .with_node(
            "act", act, config=config, writes=("messages", "error_count", "last_event", *own)
        )
        .with_node("observe", observe, rules=packs, writes=())
        .with_edge(START, "think")
        .with_conditional_edges("think", after_think, {"act": "act", "observe": "observe"})
        .with_edge("act", "observe")
        .with_conditional_edges("observe", after_observe, {"think": "think", END: END})
    )


def create_agent(
    model: ChatModel,
    tools: Sequence[Callable[..., Any] | Tool | LangChainToolLike] = (),
    *,
    prompt: str | None = None,
    state: type[AgentState] = AgentState,
    response_format: type[BaseModel] | None = None,
    name: str = "agent",
    max_steps: int = 10,
    error_budget: int = 3,
    store: CheckpointStore | None = None,
    workspace: str | os.PathLike[str] | None = None,
    temperature: float | None = None,
    request: RequestOptions | None = None,
) -> CompiledGraph[AgentState]:
    """A compiled tool-calling agent: ``agent.invoke({"messages": [...]})``.

    ``tools`` are plain functions (typed parameters, a docstring) or ``@tool`` tools;
    ``prompt`` is the system prompt; ``state`` a subclass of :class:`AgentState`;
    ``response_format`` a pydantic model the final answer must be a JSON object of (it
    lands in ``structured_response``); ``max_steps`` bounds the model calls and
    ``error_budget`` the failed tool calls, both as rules (the run record's
    ``stopped_by`` names the one that ended it); ``temperature`` and ``request``
    (:class:`~stargraph.llm.RequestOptions`: ``max_tokens``, ``seed`` ...) fix those fields
    of every model call. The tools run through an
    :class:`~stargraph.tools.Arbiter` built for them, in ``workspace`` (default: a new
    temporary directory); ``store`` makes runs durable and resumable.
    """
    made = agent_tools(tools)
    graph = agent_graph(
        made,
        prompt=prompt,
        state=state,
        response_format=response_format,
        name=name,
        max_steps=max_steps,
        error_budget=error_budget,
        temperature=temperature,
        request=request,
    )
    arbiter = Arbiter(
        ToolRegistry.build(builtins=made),
        workspace=workspace if workspace is not None else tempfile.mkdtemp(prefix="sg-agent-"),
    )
    return graph.compile(store=store, services={"model": model, "arbiter": arbiter})


# --------------------------------------------------------------------------- nodes

# The tools offered per arbiter and tool list, under their plain names (llm_view() copies
# each schema; an arbiter's registry is frozen, so this is computed once).
_OFFERED: weakref.WeakKeyDictionary[Any, dict[Any, tuple[dict[str, Any], ...]]]
_OFFERED = weakref.WeakKeyDictionary()


def _offered(arbiter: Arbiter, ids: tuple[str, ...], names: Mapping[str, str]) -> Any:
    per_arbiter = _OFFERED.setdefault(getattr(arbiter, "arbiter", arbiter), {})
    key = (ids, tuple(sorted(names.items())))
    offered = per_arbiter.get(key)
    if offered is None:
        plain = {tool_id: name for name, tool_id in names.items()}
        views = []
        for tool_id in ids:
            view = arbiter.registry.resolve(tool_id).spec.llm_view()
            view["function"]["name"] = plain[tool_id]
            views.append(view)
        offered = per_arbiter[key] = tuple(views)
    return offered


def think(state: AgentState, ctx: RunContext) -> dict[str, Any]:
    """Ask the model for the next message; take its answer or leave its tool calls to
    ``act``."""
    config = ctx.config
    model: ChatModel = _service(ctx, "model", is_chat_model, MODEL_WHAT)
    arbiter: Arbiter = _service(ctx, "arbiter", is_tool_dispatcher, ARBITER_WHAT)
    system = _system_prompt(config)
    history = tuple(state.messages)
    messages = (Message.system(system), *history) if system else history
    offered = _offered(arbiter, tuple(config["tools"]), config["tool_names"])
    head = _head(config, offered, ctx.conversation)
    values = dict(zip(_REQUEST_FIELDS, _REQUEST_VALUES(head), strict=True))
    # The messages unvalidated: they are the state's messages (validated when written).
    values["messages"] = messages
    request = built(ChatRequest, values, head.model_fields_set)
    response: ChatResponse = model.complete(request)
    reply = response.message
    notes: list[str] = []
    out: dict[str, Any] = {}
    read = _read_reply(response)
    if read is not None:
        event, notes = read
    else:
        output, problem = _check_answer(config, reply.content or "")
        if problem is not None:
            notes.append(problem)
            event = "invalid_answer"
        else:
            event = "final_answer"
            if output is not None:
                out["structured_response"] = output.model_dump(mode="json")
    # A run's first step starts its budgets afresh: the next turn of a thread is a new run
    # over the conversation so far, and its limits are its own (LangGraph's recursion limit
    # is per invocation too).
    fresh = ctx.step == 1
    errors = (0 if fresh else state.error_count) + len(notes)
    out.update(
        messages=[Message.from_chat(reply), *(Message.user(note) for note in notes)],
        llm_steps=1 if fresh else state.llm_steps + 1,
        error_count=errors,
        done=event == "final_answer",
        last_event=event,
        usage=state.usage + response.usage,
    )
    return out


def _content(result: ToolResult, tool_id: str, plain: str) -> str:
    """What the model reads of a result: the tool's return value (text as it is, anything
    else as JSON), or ``Error: ...`` naming the tool as the model knows it. A result the
    lane may not see, or a masked one, stays the arbiter's restricted view."""
    if not result.visible_to(_LANE) or result.prompt_mask:
        content: str = result.to_tool_message(_LANE)["content"]
        return content
    if result.status == "success":
        payload = result.payload
        if payload is None:
            return result.summary
        # JSON as LangGraph's ToolNode writes it, so a ported agent's messages read the same.
        return payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    failure = result.error
    message = failure.message if failure is not None else result.summary
    hint = failure.hint if failure is not None else ""
    message = message.replace(repr(tool_id), repr(plain)).replace(tool_id, plain)
    return f"Error: {message}" + (f" (fix: {hint})" if hint and hint not in message else "")


def _command_problem(command: Mapping[str, Any], plain: str, own: frozenset[str]) -> str | None:
    """Why the agent cannot apply a tool's Command (``None``: it can). ``own`` are the
    channels a tool may update: the state's own fields, beyond the agent's."""
    update = command["update"]
    bad = sorted(k for k in update if k != "messages" and k not in own)
    if bad:
        return (
            f"tool {plain!r} returned a Command updating {bad}, which are not channels of "
            f"the agent's state a tool may write (those are {sorted(own) or 'none'}; "
            "declare them on a subclass of AgentState and pass state=)"
        )
    if command["graph"] is not None:
        return None  # the parent graph checks where it goes
    for target in command["goto"]:
        if target not in (END, "think"):
            return (
                f"tool {plain!r} returned Command(goto={target!r}); in the agent's own graph "
                "a tool may go to END (finish the run) or 'think'; to route the graph the "
                "agent is a skill of, return Command(graph=Command.PARENT, goto=...)"
            )
    return None


def _applied(
    command: Mapping[str, Any], call_id: str, plain: str
) -> tuple[list[Message], dict[str, Any]]:
    """The messages a tool's Command adds (a tool message answering the call first, unless
    the update holds one) and the other channels it updates."""
    update = dict(command["update"])
    given = [Message.model_validate(m) for m in update.pop("messages", ())]
    answered = any(m.role == "tool" and m.tool_call_id == call_id for m in given)
    if answered:
        return given, update
    content = json.dumps(update, ensure_ascii=False) if update else "ok"
    return [Message.tool(call_id, content, name=plain), *given], update


def act(state: AgentState, ctx: RunContext) -> dict[str, Any] | Command | None:
    """Run every tool call of the last reply through the arbiter, in the model's order,
    and answer each with a tool message. A tool that returned a ``Command`` updates the
    state's own channels with it (its messages after the call's answer), finishes the run
    with ``goto=END`` (through the ``done_flag`` rule), or with ``graph=Command.PARENT``
    hands the turn to the graph the agent is a skill of."""
    reply = state.messages[-1] if state.messages else None
    if reply is None or not reply.tool_calls:
        return None
    arbiter = _act_arbiter(ctx)
    config = ctx.config
    names: Mapping[str, str] = config["tool_names"]
    allowed = tuple(config["tools"])
    own = frozenset(config.get("tool_writes", ()))
    answers: list[Message] = []
    updates: dict[str, Any] = {}
    handoff: list[Any] | None = None
    failed = 0
    finished = False
    for call in reply.tool_calls:
        tool_id = names.get(call.name, call.name)
        # The canonical id goes to the arbiter (which records it); an unknown name goes as
        # it is, for the allowlist to refuse before anything runs.
        dispatched = ToolCall.from_openai(
            {"id": call.id, "name": tool_id, "arguments": call.arguments},
            lane=_LANE,
            node=ctx.node,
            allowed=allowed,
            strict=False,
        )
        try:
            result = arbiter.dispatch(dispatched)
        except ToolError as exc:
            result = ToolResult.from_error(exc, call_id=call.id)
        command = command_of(result.payload) if result.status == "success" else None
        if command is not None:
            problem = _command_problem(command, call.name, own)
            if problem is not None:
                failed += 1
                answers.append(Message.tool(call.id, f"Error: {problem}", name=call.name))
                continue
            if command["graph"] is not None:
                # A handoff (LangGraph's Command.PARENT from a tool): the turn ends after
                # this reply, whose other calls still run; the parent checks the update
                # and routes by the goto.
                handoff = [*(handoff or ()), *command["goto"]]
            added, update = _applied(command, call.id, call.name)
            answers.extend(added)
            updates.update(update)
            finished = finished or END in command["goto"]
            continue
        if result.status != "success":
            failed += 1
        content = _content(result, tool_id, call.name)
        answers.append(Message.tool(call.id, content, name=call.name))
    if handoff is not None:
        # The parent takes the conversation with every call of the reply answered, in the
        # model's order (what LangGraph's ToolNode applies), and the tools' updates.
        goto = [Send(t["node"], t["payload"]) if isinstance(t, dict) else t for t in handoff]
        update = {**updates, "messages": [*state.messages, *answers]}
        return Command(graph=Command.PARENT, goto=goto, update=update)
    errors = state.error_count + failed
    event = "tool_done" if finished else "tool_error" if failed else "tool_success"
    return {**updates, "messages": answers, "error_count": errors, "last_event": event}


def observe(state: AgentState) -> None:
    """Where every step ends and the rules decide (a final answer, the budgets)."""
    del state


def after_think(state: AgentState) -> str:
    """``act`` when the reply called tools, else ``observe``."""
    return "act" if state.last_event == "tool_calls" else "observe"


def after_observe(state: AgentState) -> str:
    """``think``, always: only the rules on ``observe`` end the loop (the ``END`` branch
    is their way out)."""
    del state
    return "think"
