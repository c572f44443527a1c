"""Nested schemas: state machines that spawn state machines.

A :class:`Schema` is a prompt, states and a termination guard (``max_steps``); a state is a
prompt, transitions (with descriptions), tools and the sub-schemas it may spawn. At run
time the active schemas form a stack; every LLM step is prompted with the master prompt, then
for each level top to bottom its schema prompt and current-state prompt, then the user
message and the execution context (:class:`PromptBuilder`, masks and positions
configurable). Only the innermost level's tools, transitions and spawns are offered.

A parent state that spawns a child completes only when the child exits: reaching a terminal
state exits a schema with that state's name as its status, which the spawn maps to a parent
event. Every level has ``max_steps``; exhausting it exits to the parent with status
``max_steps_exceeded`` or, at the root, hands control back to the user. Only declared
sub-schemas can be spawned and spawn cycles are compile errors. The agent loop itself
is the root schema, and :class:`SchemaSession` swaps it between turns on a user command,
keeping the session log.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Annotated, Any, Final

from pydantic import ConfigDict, Field, JsonValue

from stargraph import fathom, reducers
from stargraph._typed import TypedModel
from stargraph.errors import (
    InvalidInputError,
    Problem,
    SkillValidationError,
    ToolError,
)
from stargraph.graph import END, START, Graph
from stargraph.llm import ChatModel, ChatRequest, ChatResponse, RequestOptions
from stargraph.runtime import RunContext
from stargraph.skills import DEFAULT_NESTING, NestingProfile
from stargraph.skills._files import SkillModel
from stargraph.skills._services import ToolDispatcher, options_config, request_fields
from stargraph.skills.machine._compile import REJECTED, StepNote, once_json, service_models
from stargraph.skills.machine._prompt import MaskPart, PromptBuilder, PromptLevel
from stargraph.skills.machine._proposals import (
    Rejection,
    RejectionCode,
    classify,
    event_function,
    offered_tools,
)
from stargraph.skills.machine._spec import ToolAllowlist
from stargraph.skills.machine._validate import MachineShape, StateShape, validate_machine
from stargraph.tools import Arbiter, ToolCall, ToolResult, failure_of

# What stargraph.skills.machine re-exports (it star-imports this module).
__all__ = [
    "Frame",
    "Schema",
    "SchemaLibrary",
    "SchemaRunState",
    "SchemaSession",
    "SchemaState",
    "SchemaTransition",
    "Spawn",
    "schema_graph",
]

_FROZEN: Final = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
MAX_STEPS_EXCEEDED: Final = "max_steps_exceeded"
"""Exit status of a schema whose ``max_steps`` ran out."""
ERROR: Final = "error"
"""Exit status of a schema whose retry budget ran out."""
SPAWN_PREFIX: Final = "spawn_"
_STEP_LIMIT_CAP: Final = 2**53 - 1
"""The largest ``max_steps`` a graph takes. A bound of the LLM steps grows like the product
of ``max_steps`` along the spawn chain; beyond this it can never be reached anyway."""
STAY: Final = "__stay__"
END_EVENT: Final = "__end__"


class SchemaTransition(SkillModel):
    """A transition with the description the model is shown."""

    model_config = _FROZEN

    on: str
    """The event."""
    to: str
    """The target state."""
    description: str = ""
    """What the event means (the function's description)."""


class Spawn(SkillModel):
    """A sub-schema a state may start, and how the child's exit status maps to an event of
    the spawning state."""

    model_config = _FROZEN

    schema_name: str = Field(alias="schema")
    """The sub-schema's name."""
    description: str = ""
    """When to spawn it (the function's description)."""
    exits: dict[str, str]
    """Child exit status (a terminal state name, or ``max_steps_exceeded`` / ``error``) ->
    parent event. An unmapped ``max_steps_exceeded`` / ``error`` propagates upwards."""


class SchemaState(SkillModel):
    """A state: prompt, transitions, tools and spawnable sub-schemas."""

    model_config = _FROZEN

    prompt: str = ""
    """The state's objective."""
    transitions: tuple[SchemaTransition, ...] = ()
    """Its exits."""
    tools: ToolAllowlist = ()
    """Tools allowed here (their descriptions come from the tool registry). Empty (or
    ``None``) admits no tool: a call is refused as ``tool_not_allowed``."""
    spawns: tuple[Spawn, ...] = ()
    """Sub-schemas this state may spawn."""
    terminal: bool = False
    """Reaching it exits the schema with this state's name as status."""


class Schema(SkillModel):
    """A schema: prompt + states + termination guard."""

    model_config = _FROZEN

    name: str
    """Unique name."""
    prompt: str = ""
    """The schema's overall objective."""
    initial_state: str
    """Where it starts."""
    states: dict[str, SchemaState]
    """State name -> state."""
    max_steps: int = Field(ge=1)
    """LLM steps allowed while this schema is the innermost level."""
    mask: tuple[MaskPart, ...] = ()
    """Prompt parts hidden while this schema is an ancestor."""


class SchemaLibrary(SkillModel):
    """Every schema an agent can run, validated as one set (spawn targets declared and
    acyclic)."""

    model_config = _FROZEN

    schemas: dict[str, Schema]
    """Name -> schema."""

    @classmethod
    def build(
        cls,
        documents: Mapping[str, Any] | list[Any],
        *,
        source: str = "schemas",
        nesting: NestingProfile | None = None,
    ) -> SchemaLibrary:
        """Parse and validate schema documents (a list, or a mapping name -> document);
        raises one :class:`~stargraph.errors.SkillValidationError` with every problem.

        ``nesting`` bounds the spawn depth (default
        :data:`~stargraph.skills.DEFAULT_NESTING`): a schema the root loop spawns is level 1,
        one it spawns in turn level 2 ... Under :data:`~stargraph.skills.CHOIR_NESTING`
        (depth 1) a spawned schema cannot spawn (no skill starts a skill)."""
        items = list(documents.values()) if isinstance(documents, Mapping) else list(documents)
        problems: list[Problem] = []
        schemas: dict[str, Schema] = {}
        for i, doc in enumerate(items):
            try:
                schema = Schema.model_validate(doc)
            except SkillValidationError as exc:
                problems.extend(
                    Problem(f"{source}#/{i}{p.pointer}", p.message, p.hint) for p in exc.problems
                )
                continue
            if schema.name in schemas:
                problems.append(Problem(f"{source}#/{i}/name", f"duplicate schema {schema.name!r}"))
            schemas[schema.name] = schema
        for schema in schemas.values():
            problems.extend(_schema_problems(schema, schemas, source))
        cycles = _cycle_problems(schemas, source)
        problems.extend(cycles)
        if not cycles:
            chain = _deepest_spawn_chain(schemas)
            # The chain's first schema is the loop that spawns; the levels below it count.
            too_deep = (nesting or DEFAULT_NESTING).depth_problem(
                chain[1:], f"{source}#/{chain[0]}" if chain else f"{source}#"
            )
            if too_deep is not None:
                problems.append(
                    Problem(
                        too_deep.pointer,
                        f"spawn chain {' -> '.join(chain)}: {too_deep.message}",
                        too_deep.hint,
                    )
                )
        if problems:
            raise SkillValidationError(problems, subject=f"schema library {source}")
        return cls(schemas=schemas)

    def bound(self, name: str) -> int:
        """An upper bound of the LLM steps one run of ``name`` can take (finite: acyclic).

        A schema's bound is its ``max_steps`` times one plus the largest bound among the
        schemas it spawns. Each schema is looked at once (spawn graphs that share children
        would otherwise cost exponential time in their depth) and without recursion, so any
        spawn depth works. A library made without :meth:`build` may name unknown schemas or
        spawn in a cycle: that is a :class:`~stargraph.errors.SkillValidationError`.
        """
        bounds: dict[str, int] = {}
        shapes: dict[str, tuple[int, tuple[str, ...]]] = {}  # max_steps, spawned schemas
        open_: list[str] = []  # the path being expanded, for naming a cycle
        stack: list[tuple[str, bool]] = [(name, False)]
        while stack:
            current, expanded = stack.pop()
            if current in bounds:
                continue
            if expanded:  # every child is done: post-order
                steps, children = shapes[current]
                bounds[current] = steps * (1 + max((bounds[c] for c in children), default=0))
                open_.pop()
                continue
            if current in shapes:  # reached again from its own descendants
                cycle = [*open_[open_.index(current) :], current]
                raise SkillValidationError.at(
                    f"schemas#/{current}",
                    "spawn cycle: " + " -> ".join(cycle),
                    "build the library with SchemaLibrary.build, which refuses cycles",
                    subject="schema library",
                )
            if current not in self.schemas:
                raise SkillValidationError.at(
                    f"schemas#/{current}",
                    f"no schema {current!r}" + (f" (spawned by {open_[-1]!r})" if open_ else ""),
                    f"use one of {sorted(self.schemas)}",
                    subject="schema library",
                )
            schema = self.schemas[current]
            children = _spawned(schema)
            shapes[current] = (schema.max_steps, children)
            open_.append(current)
            stack.append((current, True))
            stack.extend((c, False) for c in children if c not in bounds)
        return bounds[name]


def _spawned(schema: Schema) -> tuple[str, ...]:
    """The distinct schemas ``schema`` may spawn, in a stable order."""
    return tuple(sorted({sp.schema_name for st in schema.states.values() for sp in st.spawns}))


def _schema_problems(schema: Schema, schemas: Mapping[str, Schema], source: str) -> list[Problem]:
    where = f"{source}#/{schema.name}"
    shape = MachineShape(
        schema.initial_state,
        {
            n: StateShape([(t.on, t.to) for t in s.transitions], s.terminal)
            for n, s in schema.states.items()
        },
        where=where,
    )
    problems = validate_machine(shape)
    for name, state in schema.states.items():
        events = {t.on for t in state.transitions}
        for i, spawn in enumerate(state.spawns):
            at = f"{where}/states/{name}/spawns/{i}"
            child = schemas.get(spawn.schema_name)
            if child is None:
                problems.append(
                    Problem(at, f"state {name!r} spawns unknown schema {spawn.schema_name!r}")
                )
                continue
            if state.terminal:
                problems.append(Problem(at, f"terminal state {name!r} cannot spawn"))
            terminals = {n for n, s in child.states.items() if s.terminal}
            for status in sorted(terminals - set(spawn.exits)):
                problems.append(
                    Problem(
                        f"{at}/exits",
                        f"exit {status!r} of schema {spawn.schema_name!r} maps to no event",
                        f"map it to one of {sorted(events)}",
                    )
                )
            for status, event in sorted(spawn.exits.items()):
                if status not in terminals | {MAX_STEPS_EXCEEDED, ERROR}:
                    problems.append(
                        Problem(f"{at}/exits/{status}", f"{status!r} is not an exit status")
                    )
                if event not in events:
                    problems.append(
                        Problem(
                            f"{at}/exits/{status}",
                            f"exit {status!r} maps to {event!r}, not an event of {name!r}",
                        )
                    )
    return problems


def _deepest_spawn_chain(schemas: Mapping[str, Schema]) -> tuple[str, ...]:
    """The longest spawn chain (schema names, spawner first) of an acyclic library. Each
    schema is expanded once, with an explicit stack: chains may be deeper than Python's
    recursion limit."""
    graph = {name: tuple(c for c in _spawned(s) if c in schemas) for name, s in schemas.items()}
    longest: dict[str, tuple[str, ...]] = {}
    for root in sorted(graph):
        stack: list[tuple[str, bool]] = [(root, False)]
        while stack:
            name, expanded = stack.pop()
            if name in longest:
                continue
            if not expanded:
                stack.append((name, True))
                stack.extend((c, False) for c in graph[name] if c not in longest)
                continue
            below = max((longest[c] for c in graph[name]), key=len, default=())
            longest[name] = (name, *below)
    return max(longest.values(), key=len, default=())


def _cycle_problems(schemas: Mapping[str, Schema], source: str) -> list[Problem]:
    """Every spawn cycle, once each. A depth-first search with an explicit stack: spawn
    chains may be deeper than Python's recursion limit."""
    graph = {name: _spawned(s) for name, s in schemas.items()}
    problems: list[Problem] = []
    seen_cycles: set[tuple[str, ...]] = set()
    color: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in sorted(graph):
        if root in color:
            continue
        color[root] = 1
        path = [root]
        pending = [iter(graph[root])]  # the children left to visit, one iterator per level
        while pending:
            child = next(pending[-1], None)
            if child is None:
                pending.pop()
                color[path.pop()] = 2
            elif color.get(child) == 1:
                cycle = [*path[path.index(child) :], child]
                key = tuple(sorted(cycle[:-1]))
                if key not in seen_cycles:
                    seen_cycles.add(key)
                    problems.append(
                        Problem(
                            f"{source}#/{child}",
                            "spawn cycle: " + " -> ".join(cycle),
                            "schemas nest like function calls without recursion; break the cycle",
                        )
                    )
            elif child in graph and child not in color:
                color[child] = 1
                path.append(child)
                pending.append(iter(graph[child]))
    return problems


# --------------------------------------------------------------------------- run time


class Frame(TypedModel):
    """One active level: which schema, in which state, how many LLM steps it took."""

    typed_error = SkillValidationError

    model_config = _FROZEN

    schema_name: str
    """The schema."""
    state: str
    """Its current state."""
    steps: int = 0
    """LLM steps taken while this level was innermost."""
    retries: int = 0
    """Consecutive invalid proposals."""


class SchemaRunState(TypedModel):
    """The state of one turn of a schema session."""

    typed_error = InvalidInputError

    user_message: str = ""
    """The user's message for this turn."""
    stack: list[Frame] = []
    """Active levels, root first (empty before the first step)."""
    status: Annotated[str, fathom.Fact()] = "running"
    """``running``, ``exited`` (the root reached a terminal state) or ``yielded`` (control
    handed back to the user)."""
    reason: str | None = None
    """The root's exit status, or why control was handed back."""
    done: Annotated[bool, fathom.Fact()] = False
    """True once the turn ended."""
    llm_steps: Annotated[int, fathom.Fact()] = 0
    """LLM calls in this turn."""
    last_event: str | None = None
    """``__stay__`` or ``__end__`` (routing)."""
    notes: list[StepNote] = []
    """Structured context of the innermost level: tool results and rejections."""
    log: Annotated[list[dict[str, JsonValue]], reducers.append] = []
    """What happened: spawns, transitions, exits, tool calls, rejections."""


def _library(config: Mapping[str, Any]) -> SchemaLibrary:
    return SchemaLibrary.model_validate(config["library"])


def schema_graph(
    library: SchemaLibrary,
    root: str,
    *,
    builder: PromptBuilder | None = None,
    retry_budget: int = 2,
    temperature: float | None = None,
    request: RequestOptions | None = None,
) -> Graph[SchemaRunState]:
    """One turn of the agent loop as a graph: a ``step`` node (one LLM step over the whole
    stack) looping on itself until the rules halt it. The library, root and prompt layout
    are node config, hence in the graph hash, as are ``temperature`` and ``request``
    (:class:`~stargraph.llm.RequestOptions`: ``max_tokens``, ``seed`` ...), the fields fixed
    for every model call."""
    builder = builder or PromptBuilder()
    config = {
        "root": root,
        "library": library.model_dump(mode="json", by_alias=True),
        "builder": builder.model_dump(mode="json"),
        "retry_budget": retry_budget,
        **options_config(temperature, request, subject=f"schema graph {root!r}"),
    }
    mapping: dict[Hashable, str] = {STAY: "step", END_EVENT: END}
    pack = fathom.RulePack.from_spec(
        {
            "id": "schemas",
            "version": "1",
            "rules": [
                {"name": s, "when": [{"state.status": s}], "then": {"halt": s}}
                for s in ("exited", "yielded")
            ],
        }
    )
    return (
        Graph(f"schema-{root}", state=SchemaRunState)
        .with_node("step", schema_step, config=config, must_stub=True)
        .with_conditional_edges("step", _route, mapping)
        .with_edge(START, "step")
        .with_rules(pack)
    )


def _route(state: SchemaRunState) -> str:
    return state.last_event or STAY


class _Turn:
    """Bookkeeping of one schema step."""

    def __init__(self, state: SchemaRunState, ctx: RunContext) -> None:
        self.ctx = ctx
        self.library = _library(ctx.config)
        root = self.library.schemas[ctx.config["root"]]
        self.stack = list(state.stack) or [Frame(schema_name=root.name, state=root.initial_state)]
        self.notes = list(state.notes)
        self.log: list[dict[str, JsonValue]] = []
        self.out: dict[str, Any] = {"log": self.log, "last_event": STAY}

    @property
    def top(self) -> Frame:
        return self.stack[-1]

    def schema(self, frame: Frame) -> Schema:
        return self.library.schemas[frame.schema_name]

    def current(self) -> SchemaState:
        return self.schema(self.top).states[self.top.state]

    def record(self, kind: str, **data: JsonValue) -> None:
        self.log.append(
            {"kind": kind, "schema": self.top.schema_name, "state": self.top.state, **data}
            if self.stack
            else {"kind": kind, **data}
        )

    def move(self, to: str, on: str) -> None:
        if self._enter(to, on):
            self.exit(to)

    def _enter(self, to: str, on: str) -> bool:
        """Move the innermost level to ``to``; whether that state is terminal."""
        frame = self.top
        self.record("transition", to=to, on=on)
        self.stack[-1] = frame.model_copy(update={"state": to, "retries": 0})
        self.notes = []
        return self.schema(frame).states[to].terminal

    def exit(self, status: str) -> None:
        """Pop the innermost level with ``status``; fire the parent's mapped event. A loop,
        not recursion: one exit may cascade through every level of a deep stack."""
        while True:
            frame = self.stack.pop()
            self.log.append({"kind": "exit", "schema": frame.schema_name, "status": status})
            self.notes = []
            if not self.stack:
                kind = "exited" if self.schema(frame).states.get(status) else "yielded"
                self.out.update(status=kind, reason=status, done=True, last_event=END_EVENT)
                return
            parent_state = self.current()
            spawn = next(s for s in parent_state.spawns if s.schema_name == frame.schema_name)
            event = spawn.exits.get(status)
            if event is None:  # unmapped max_steps_exceeded / error propagates upwards
                continue
            target = next(t for t in parent_state.transitions if t.on == event)
            if not self._enter(target.to, event):
                return
            status = target.to  # the parent reached a terminal state: it exits too

    def reject(self, code: RejectionCode, proposed: str, budget: int) -> None:
        state = self.current()
        retries = self.top.retries + 1
        self.stack[-1] = self.top.model_copy(update={"retries": retries})
        rejection = Rejection(
            code=code,
            state=self.top.state,
            proposed=proposed,
            allowed_tools=state.tools,
            valid_transitions=tuple(
                {"on": t.on, "to": t.to}
                for t in state.transitions
                if t.on not in _child_events(state)
            ),
            retries_left=max(budget + 1 - retries, 0),
        )
        self.record("rejected", **rejection.to_json())
        self.notes.append(StepNote(llm_step=0, kind="rejection", data=rejection.to_json()))
        if retries > budget:
            self.exit(ERROR)


def _child_events(state: SchemaState) -> frozenset[str]:
    """The events only a spawned child's exit fires: those its spawns map exits to. The
    model is never offered them, so a spawning state cannot complete without its child."""
    return frozenset(event for spawn in state.spawns for event in spawn.exits.values())


def _functions(turn: _Turn, arbiter: ToolDispatcher) -> list[dict[str, Any]]:
    state = turn.current()
    reserved = _child_events(state)
    functions = list(offered_tools(arbiter, state.tools))
    functions += [
        event_function(t.on, t.description) for t in state.transitions if t.on not in reserved
    ]
    functions += [
        {
            "type": "function",
            "function": {
                "name": SPAWN_PREFIX + s.schema_name,
                "description": s.description or f"Start the sub-schema {s.schema_name!r}.",
                "parameters": {"type": "object", "properties": {}},
            },
        }
        for s in state.spawns
    ]
    return functions


def _messages(turn: _Turn, state: SchemaRunState) -> Any:
    builder = PromptBuilder.model_validate(turn.ctx.config["builder"])
    levels = [
        PromptLevel(
            schema_name=f.schema_name,
            schema_prompt=turn.schema(f).prompt,
            state=f.state,
            state_prompt=turn.schema(f).states[f.state].prompt,
            mask=turn.schema(f).mask,
        )
        for f in turn.stack
    ]
    context = {
        "stack": [f"{f.schema_name}:{f.state}" for f in turn.stack],
        "steps_left": turn.schema(turn.top).max_steps - turn.top.steps,
        "notes": [n.model_dump(mode="json") for n in turn.notes],
    }
    return builder.messages(levels, user=state.user_message, context=context)


def schema_step(state: SchemaRunState, ctx: RunContext) -> dict[str, Any]:
    """One LLM step of the innermost level (or, with its ``max_steps`` spent, its exit)."""
    turn = _Turn(state, ctx)
    budget = int(ctx.config["retry_budget"])
    if turn.top.steps >= turn.schema(turn.top).max_steps:
        turn.exit(MAX_STEPS_EXCEEDED)
        return _result(turn)
    model, arbiter = service_models(ctx)
    request = ChatRequest(
        messages=_messages(turn, state),
        tools=tuple(_functions(turn, arbiter)),
        parallel_tool_calls=False,
        **request_fields(ctx.config),
    )
    response = ChatResponse.model_validate(
        once_json(ctx, "llm", lambda: model.complete(request).model_dump(mode="json"), by=model)
    )
    turn.out["llm_steps"] = state.llm_steps + 1
    turn.stack[-1] = turn.top.model_copy(update={"steps": turn.top.steps + 1})
    current = turn.current()
    calls = response.message.tool_calls
    if not calls:
        turn.reject("no_proposal", (response.message.content or "")[:80], budget)
        return _result(turn)
    call = calls[0]
    spawns = [SPAWN_PREFIX + s.schema_name for s in current.spawns]
    reserved = _child_events(current)
    events = [t.on for t in current.transitions if t.on not in reserved]
    kind = classify(call.name, events=events, spawns=spawns)
    if call.name in reserved:
        turn.reject("awaiting_child", call.name, budget)
    elif kind == "transition":
        target = next(t for t in current.transitions if t.on == call.name)
        turn.move(target.to, target.on)
    elif kind == "spawn":
        child = turn.library.schemas[call.name[len(SPAWN_PREFIX) :]]
        turn.record("spawn", child=child.name)
        turn.stack.append(Frame(schema_name=child.name, state=child.initial_state))
        turn.notes = []
    elif call.name.startswith(SPAWN_PREFIX):
        turn.reject("spawn_not_declared", call.name, budget)
    elif kind == "tool":
        _tool(turn, arbiter, call, budget)
    else:
        turn.reject(
            "finish_not_terminal" if kind == "finish" else "invalid_transition", call.name, budget
        )
    return _result(turn)


def _tool(turn: _Turn, arbiter: ToolDispatcher, call: Any, budget: int) -> None:
    allowed = turn.current().tools

    def run() -> dict[str, Any]:
        try:
            tool_call = ToolCall.from_openai(
                call, node=turn.ctx.node, state=turn.top.state, allowed=allowed, strict=False
            )
            return {"result": arbiter.dispatch(tool_call).model_dump(mode="json")}
        except ToolError as exc:
            # Only a tool the state may not call (or no tool at all) is a rejection: a
            # workspace or policy refusal in an allowed tool is that tool's result, which
            # says what was refused and why.
            if failure_of(exc).code in REJECTED:
                return {"rejected": True}
            return {"result": ToolResult.from_error(exc, call_id=call.id).model_dump(mode="json")}

    outcome = once_json(turn.ctx, f"tool:{call.id}", run, by=arbiter)
    if "rejected" in outcome:
        turn.reject("tool_not_allowed", call.name, budget)
        return
    result = ToolResult.model_validate(outcome["result"])
    turn.stack[-1] = turn.top.model_copy(update={"retries": 0})
    turn.record("tool", tool=result.tool, status=result.status)
    data: dict[str, JsonValue] = {
        "tool": result.tool,
        "status": result.status,
        "summary": result.summary,
    }
    turn.notes.append(StepNote(llm_step=0, kind="tool_result", data=data))


def _result(turn: _Turn) -> dict[str, Any]:
    turn.out.update(stack=turn.stack, notes=turn.notes)
    return turn.out


class SchemaSession:
    """The agent loop as a schema: each user message is one turn of the root schema;
    a user command (``/loop <schema>``, handled without the model) swaps the root between
    turns. The session log keeps every turn and command."""

    def __init__(
        self,
        library: SchemaLibrary,
        *,
        model: ChatModel,
        arbiter: Arbiter,
        root: str = "main",
        builder: PromptBuilder | None = None,
        retry_budget: int = 2,
        temperature: float | None = None,
        request: RequestOptions | None = None,
    ) -> None:
        # Checked now, not at the first turn.
        options_config(temperature, request, subject="schema session")
        if root not in library.schemas:
            raise SkillValidationError(
                [Problem("/root", f"no schema {root!r}", f"use one of {sorted(library.schemas)}")],
                subject="schema session",
            )
        self.library = library
        self.root = root
        self.builder = builder or PromptBuilder()
        self.retry_budget = retry_budget
        self.temperature = temperature
        self.request = request
        self.services = {"model": model, "arbiter": arbiter}
        self.log: list[dict[str, JsonValue]] = []
        """Every turn's events and every command, in order."""

    def command(self, text: str) -> None:
        """Run a user command: ``/loop <schema>`` swaps the root schema."""
        verb, _, arg = text.strip().partition(" ")
        if verb != "/loop" or arg.strip() not in self.library.schemas:
            raise SkillValidationError.at(
                "/command",
                f"unknown command {text!r}",
                f"use '/loop <schema>' with one of {sorted(self.library.schemas)}",
                subject="schema session",
            )
        previous, self.root = self.root, arg.strip()
        self.log.append({"kind": "command", "command": text, "from": previous, "to": self.root})

    def send(self, message: str) -> SchemaRunState:
        """One turn: a ``/`` command, or a run of the root schema on ``message``."""
        if message.startswith("/"):
            self.command(message)
            return SchemaRunState(status="command", reason=message, done=True)
        graph = schema_graph(
            self.library,
            self.root,
            builder=self.builder,
            retry_budget=self.retry_budget,
            temperature=self.temperature,
            request=self.request,
        )
        limit = min(2 * self.library.bound(self.root) + 2, _STEP_LIMIT_CAP)
        app = graph.compile(services=self.services, max_steps=limit)
        final = app.invoke({"user_message": message})
        self.log.append({"kind": "turn", "root": self.root, "message": message})
        self.log.extend(final.log)
        return final
