"""Compile a SkillSpec to IR: one step node per state, labelled edges, a rule pack.

* Each state is a ``must_stub`` node running :func:`machine_step`; its config carries the
  state's objective, allowlist and transitions, so all of them are in the graph hash.
* Each node has one conditional edge routed on the ``last_event`` channel: the event of an
  accepted transition maps to the target state's node, ``__stay__`` (a tool ran or a
  proposal was rejected: another LLM step here) to the node itself, ``__end__`` to ``END``.
* A rule pack (id ``machine``) terminates: ``max_steps`` sends the run to the ``_stop`` node
  once the ``llm_steps`` fact reaches the limit; ``done`` finishes the run (status ``done``)
  and ``error`` / ``cancelled`` / ``max_steps_exceeded`` halt it (status ``halted``), the
  rule recorded as the run's ``stopped_by`` and the reason as its ``stop_reason``.

:func:`compile_skillspec` packages the graph as a ``kind=agent``
:class:`~stargraph.skills.Skill`, mountable with ``SubgraphNode.from_skill``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Annotated, Any, Final

from pydantic import ConfigDict, JsonValue

from stargraph import fathom, reducers
from stargraph._typed import TypedModel
from stargraph.errors import (
    InvalidInputError,
    SkillValidationError,
    ToolError,
)
from stargraph.graph import END, START, Graph
from stargraph.llm import ChatModel, ChatRequest, ChatResponse, RequestOptions
from stargraph.runtime import RunContext
from stargraph.skills._services import (
    ToolDispatcher,
    arbiter_service,
    model_service,
    options_config,
    request_fields,
)
from stargraph.skills.machine._prompt import PromptBuilder, PromptLevel
from stargraph.skills.machine._proposals import (
    Rejection,
    RejectionCode,
    classify,
    commit_transition,
    event_function,
    finish_function,
    json_problems,
    offered_tools,
)
from stargraph.skills.machine._spec import SkillSpec, StateSpec
from stargraph.tools import ToolCall, ToolResult, failure_of

if TYPE_CHECKING:
    from stargraph.skills import Skill

__all__ = [
    "MachineControl",
    "MachineEvent",
    "MachineOutput",
    "MachineState",
    "StepNote",
    "compile_skillspec",
    "machine_pack",
    "skillspec_graph",
]

STAY: Final = "__stay__"
END_EVENT: Final = "__end__"
STOP_NODE: Final = "_stop"
ERROR_STATE: Final = "error"
DEFAULT_RETRY_BUDGET: Final = 2
_FROZEN: Final = ConfigDict(frozen=True, extra="forbid")
# Arbiter refusals that reject the proposal (and spend the retry budget): the state may not
# call that tool, or there is no such tool. Every other refusal is the tool's own result.
REJECTED: Final = frozenset({"tool_not_allowed", "unknown_tool"})


class StepNote(TypedModel):
    """One entry of the structured step context: a tool result or a rejection."""

    typed_error = SkillValidationError

    model_config = _FROZEN

    llm_step: int
    """The LLM step that produced it."""
    kind: str
    """``tool_result`` or ``rejection``."""
    data: dict[str, JsonValue]
    """The result (``tool``, ``status`` and ``summary``, or a ``note`` instead of the summary
    when the result's ``exposure`` hides it from the lane) or the rejection's JSON."""


class MachineEvent(TypedModel):
    """One thing that happened in a skill, with its full lineage: session > lane >
    skill > step."""

    typed_error = SkillValidationError

    model_config = _FROZEN

    session: str
    """The session the skill runs in."""
    lane: str
    """The lane (``edge``/``core``)."""
    skill: str
    """The skill's name."""
    step: int
    """The graph step (one LLM step per step node execution)."""
    llm_step: int
    """LLM steps taken so far, this one included."""
    state: str
    """The machine state the event happened in."""
    kind: str
    """``proposal``, ``tool``, ``rejected``, ``transition``, ``finished``, ``error``,
    ``cancelled``, ``cancel_deferred``."""
    data: dict[str, JsonValue] = {}
    """Details of the event."""


class MachineState(TypedModel):
    """The state of a compiled SkillSpec run.

    Start a run with ``{"input": {...}}`` (and optionally ``session``, ``lane``,
    ``context``, ``memory``); the results are ``status``, ``reason``, ``output``,
    ``transitions`` and ``events``.
    """

    typed_error = InvalidInputError

    input: dict[str, JsonValue] = {}
    """The skill input, validated against ``input_schema`` at start."""
    session: str = "session"
    """Session id (lineage)."""
    lane: str = "core"
    """Lane name (lineage; the arbiter's calling lane)."""
    context: str = ""
    """Global context, first in every prompt."""
    memory: str = ""
    """Compacted memory, after the global context."""
    state: str = ""
    """The current machine state."""
    status: Annotated[str, fathom.Fact()] = "running"
    """``running``, ``done``, ``error`` or ``cancelled``."""
    reason: Annotated[str | None, fathom.Fact()] = None
    """Why it ended: ``done``, ``retry_budget_exhausted``, ``max_steps_exceeded``,
    ``cancelled``, ``invalid_input``."""
    done: Annotated[bool, fathom.Fact()] = False
    """True once the run has ended, whatever the reason."""
    llm_steps: Annotated[int, fathom.Fact()] = 0
    """LLM calls so far; the ``max_steps`` rule reads it."""
    retries: int = 0
    """Consecutive invalid proposals in the current step."""
    last_event: str | None = None
    """The accepted event (routing), ``__stay__`` or ``__end__``."""
    output: dict[str, JsonValue] | None = None
    """The validated output of ``finish``."""
    step_context: list[StepNote] = []
    """Structured context of the current state: its tool results and rejections."""
    transitions: Annotated[list[dict[str, JsonValue]], reducers.append] = []
    """``{skill, from, to, on, step}`` of every transition taken."""
    events: Annotated[list[MachineEvent], reducers.append] = []
    """Every event, with lineage."""


class MachineOutput(TypedModel):
    """The declared outputs of a compiled SkillSpec (what a parent graph gets back)."""

    typed_error = InvalidInputError

    status: str = "running"
    """See :attr:`MachineState.status`."""
    reason: str | None = None
    """See :attr:`MachineState.reason`."""
    output: dict[str, JsonValue] | None = None
    """See :attr:`MachineState.output`."""
    state: str = ""
    """See :attr:`MachineState.state`."""
    llm_steps: int = 0
    """See :attr:`MachineState.llm_steps`."""
    transitions: Annotated[list[dict[str, JsonValue]], reducers.append] = []
    """See :attr:`MachineState.transitions`."""
    events: Annotated[list[MachineEvent], reducers.append] = []
    """See :attr:`MachineState.events`."""


class MachineControl:
    """Cancellation requests by lane, read by step nodes at each step boundary.

    Pass one as ``services["machine.control"]``; :class:`MachineRuntime` does.
    """

    def __init__(self) -> None:
        self._lanes: set[str] = set()

    def request_cancel(self, lane: str) -> None:
        """Ask the skill running on ``lane`` to stop at its next step boundary."""
        self._lanes.add(lane)

    def clear(self, lane: str) -> None:
        """Forget a request (the lane's skill ended)."""
        self._lanes.discard(lane)

    def cancel_requested(self, lane: str) -> bool:
        """Whether a cancel is pending for ``lane``."""
        return lane in self._lanes


# --------------------------------------------------------------------------- building


def machine_pack(spec: SkillSpec) -> fathom.RulePack:
    """The ``machine`` rule pack: ``max_steps`` (goto ``_stop``), ``done`` (finish), then
    halts naming why."""
    nodes = sorted(spec.states)
    rules: list[dict[str, Any]] = [
        {
            "name": "max_steps",
            "when": [
                {"node": {"in": nodes}},
                {"state.llm_steps": {">=": spec.max_steps}},
                {"state.status": "running"},
            ],
            "then": {"goto": STOP_NODE},
        },
        {
            "name": "max_steps_exceeded",
            "when": [{"node": STOP_NODE}],
            "then": {"halt": "max_steps_exceeded"},
        },
    ]
    rules.append({"name": "done", "when": [{"state.status": "done"}], "then": {"finish": "done"}})
    rules.append(
        {
            "name": "cancelled",
            "when": [{"state.status": "cancelled"}],
            "then": {"halt": "cancelled"},
        }
    )
    for reason in ("retry_budget_exhausted", "invalid_input"):
        rules.append(
            {
                "name": reason,
                "when": [{"state.status": "error"}, {"state.reason": reason}],
                "then": {"halt": reason},
            }
        )
    return fathom.RulePack.from_spec({"id": "machine", "version": "2", "rules": rules})


def skillspec_graph(
    spec: SkillSpec,
    *,
    retry_budget: int = DEFAULT_RETRY_BUDGET,
    model: str | None = None,
    master: str = "",
    temperature: float | None = None,
    request: RequestOptions | None = None,
) -> Graph[MachineState]:
    """The SkillSpec as a graph over :class:`MachineState`; compile it with
    ``services={"model": ChatModel, "arbiter": Arbiter}`` (and optionally
    ``"machine.control": MachineControl``), with or without a checkpoint store: a durable
    run hands the steps the journaled model and arbiter, which they take alike.
    ``temperature`` and ``request`` (:class:`~stargraph.llm.RequestOptions`: ``max_tokens``,
    ``seed`` ...) fix those fields of every model call, in place of the spec's own
    ``temperature`` and ``request``; they are node config, so in the graph hash.

    >>> from stargraph.skills.machine import parse_skillspec
    >>> spec = parse_skillspec({"name": "t", "description": "d", "initial_state": "a",
    ...     "input_schema": {"type": "object"}, "output_schema": {"type": "object"},
    ...     "states": {"a": {"objective": "x", "transitions": [{"on": "go", "to": "b"}]},
    ...                "b": {"terminal": True}}, "max_steps": 3, "interruptible": True})
    >>> sorted(n.id for n in skillspec_graph(spec).to_ir().nodes)
    ['_stop', 'a', 'b']
    """
    graph: Graph[MachineState] = Graph(spec.name, state=MachineState)
    shared = {
        "skill": spec.name,
        "description": spec.description,
        "initial": spec.initial_state,
        "input_schema": spec.input_schema,
        "output_schema": spec.output_schema,
        "interruptible": spec.interruptible,
        "max_steps": spec.max_steps,
        "retry_budget": retry_budget,
        "master": master,
    }
    if model is not None:
        shared["model"] = model
    shared.update(
        options_config(
            spec.temperature if temperature is None else temperature,
            spec.request if request is None else request,
            subject=f"SkillSpec graph {spec.name!r}",
        )
    )
    for name, state in sorted(spec.states.items()):
        config = {**shared, "state": name, "spec": state.model_dump(mode="json")}
        graph = graph.with_node(name, machine_step, config=config, must_stub=True)
        mapping: dict[Hashable, str] = {t.on: t.to for t in state.transitions}
        mapping.update({STAY: name, END_EVENT: END, "__max_steps__": STOP_NODE})
        graph = graph.with_conditional_edges(name, route_event, mapping)
    return (
        graph.with_node(STOP_NODE, machine_stop, config={"skill": spec.name})
        .with_edge(STOP_NODE, END)
        .with_edge(START, spec.initial_state)
        .with_rules(machine_pack(spec))
    )


def skill_slug(name: str) -> str:
    """A SkillSpec name as a :class:`~stargraph.skills.Skill` slug (``build_feature`` ->
    ``build-feature``)."""
    slug = "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")
    return slug if len(slug) > 1 else f"skill-{slug}"


def compile_skillspec(
    spec: SkillSpec,
    *,
    version: str = "1.0.0",
    retry_budget: int = DEFAULT_RETRY_BUDGET,
    model: str | None = None,
    temperature: float | None = None,
    request: RequestOptions | None = None,
) -> Skill:
    """The SkillSpec as a ``kind=agent`` Skill whose declared outputs are
    :class:`MachineOutput`'s fields; mount it with ``SubgraphNode.from_skill(skill,
    max_steps=spec.max_steps + 2)`` (one graph step per LLM step, plus the stop node)."""
    from stargraph.skills import Skill, SkillKind

    tools = sorted(
        {t for s in spec.states.values() for t in s.allowed_tools if "@" in t and "*" not in t}
    )
    return Skill.from_graph(
        skillspec_graph(
            spec, retry_budget=retry_budget, model=model, temperature=temperature, request=request
        ),
        name=skill_slug(spec.name),
        version=version,
        kind=SkillKind.AGENT,
        description=spec.description,
        tools=tuple(tools),
        state_schema=MachineOutput,
    )


# --------------------------------------------------------------------------- run time


def service_models(ctx: RunContext) -> tuple[ChatModel, ToolDispatcher]:
    """``ctx.services["model"]`` and ``["arbiter"]``, checked by what the step calls (a
    durable run hands over their journaled forms); a clear NodeError when one is missing."""
    return model_service(ctx, who="skill node"), arbiter_service(ctx, who="skill node")


def once_json(ctx: RunContext, key: str, compute: Callable[[], Any], *, by: Any = None) -> Any:
    """``compute()`` journaled through ``ctx.once`` in durable runs.

    ``by`` is the service ``compute`` calls. A durable run hands nodes the model and arbiter
    bound to the task's journal, which record each call themselves (with its request, so a
    replay can diff it); wrapping that in ``ctx.once`` too would store every response twice
    and serve replay from the copy that never looks at the request.
    """
    if ctx.journal is None or (by is not None and getattr(by, "journal", None) is ctx.journal):
        return compute()
    return ctx.once(key, compute)


def route_event(state: MachineState) -> str:
    """The routing key: the accepted event, ``__stay__`` or ``__end__``."""
    return state.last_event or STAY


def machine_stop(state: MachineState, ctx: RunContext) -> dict[str, Any]:
    """Reached only through the ``max_steps`` rule: end with ``max_steps_exceeded``."""
    event = MachineEvent(
        session=state.session,
        lane=state.lane,
        skill=str(ctx.config["skill"]),
        step=ctx.step,
        llm_step=state.llm_steps,
        state=state.state,
        kind="error",
        data={"reason": "max_steps_exceeded"},
    )
    return {
        "status": "error",
        "reason": "max_steps_exceeded",
        "done": True,
        "last_event": END_EVENT,
        "events": [event],
    }


class _Step:
    """The bookkeeping of one step node execution."""

    def __init__(self, state: MachineState, ctx: RunContext, spec: StateSpec) -> None:
        self.state = state
        self.ctx = ctx
        self.spec = spec
        self.config = ctx.config
        self.name = str(ctx.config["state"])
        self.skill = str(ctx.config["skill"])
        self.llm_step = state.llm_steps
        self.events: list[MachineEvent] = []
        self.out: dict[str, Any] = {"state": self.name, "events": self.events}
        self.notes = list(state.step_context) if state.state == self.name else []
        self.retries = state.retries if state.state == self.name else 0

    def event(self, kind: str, **data: JsonValue) -> None:
        self.events.append(
            MachineEvent(
                session=self.state.session,
                lane=self.state.lane,
                skill=self.skill,
                step=self.ctx.step,
                llm_step=self.llm_step,
                state=self.name,
                kind=kind,
                data=data,
            )
        )

    def end(self, status: str, reason: str, **extra: Any) -> dict[str, Any]:
        self.event(status if status != "done" else "finished", reason=reason)
        self.out.update(status=status, reason=reason, done=True, last_event=END_EVENT, **extra)
        return self.out

    def record(self, to: str, on: str) -> dict[str, JsonValue]:
        record: dict[str, JsonValue] = {
            "skill": self.skill,
            "from": self.name,
            "to": to,
            "on": on,
            "step": self.ctx.step,
            "llm_step": self.llm_step,
            "session": self.state.session,
            "lane": self.state.lane,
        }
        arbiter = arbiter_service(self.ctx, who="skill node")
        once_json(self.ctx, f"commit:{on}", lambda: commit_transition(arbiter, record))
        self.out.setdefault("transitions", []).append(record)
        self.event("transition", **{"from": self.name, "to": to, "on": on})
        return record

    def reject(self, code: RejectionCode, proposed: str) -> bool:
        """Record a rejection; True when the retry budget is now exhausted."""
        self.retries += 1
        left = int(self.config["retry_budget"]) + 1 - self.retries
        rejection = Rejection(
            code=code,
            state=self.name,
            proposed=proposed,
            allowed_tools=self.spec.allowed_tools,
            valid_transitions=tuple({"on": t.on, "to": t.to} for t in self.spec.transitions),
            retries_left=max(left, 0),
        )
        self.event("rejected", **rejection.to_json())
        self.notes.append(
            StepNote(llm_step=self.llm_step, kind="rejection", data=rejection.to_json())
        )
        return left <= 0


def _request(step: _Step, arbiter: ToolDispatcher) -> ChatRequest:
    state, spec, config = step.state, step.spec, step.config
    master = "\n\n".join(
        part
        for part in (
            str(config.get("master") or ""),
            state.context,
            f"## Memory\n{state.memory}" if state.memory else "",
        )
        if part
    )
    level = PromptLevel(
        schema_name=step.skill,
        schema_prompt=str(config["description"]),
        state=step.name,
        state_prompt=spec.objective,
    )
    context = {
        "skill": step.skill,
        "state": step.name,
        "llm_step": step.llm_step + 1,
        "max_steps": config["max_steps"],
        "notes": [note.model_dump(mode="json") for note in step.notes],
    }
    user = "## Input\n" + _json(state.input)
    messages = PromptBuilder(master=master).messages([level], user=user, context=context)
    functions = list(offered_tools(arbiter, spec.allowed_tools))
    functions += [
        event_function(t.on, f"Event {t.on!r}: leave state {step.name!r} for {t.to!r}.")
        for t in spec.transitions
    ]
    if spec.terminal:
        functions.append(finish_function(config["output_schema"]))
    return ChatRequest(
        messages=messages,
        model=config.get("model"),
        tools=tuple(functions),
        parallel_tool_calls=False,
        **request_fields(config),
    )


def _json(value: Any) -> str:
    import orjson

    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _args(raw: str) -> dict[str, Any] | None:
    import orjson

    try:
        value = orjson.loads(raw or "{}")
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def machine_step(state: MachineState, ctx: RunContext) -> dict[str, Any]:
    """One LLM step in one state: offer the state's moves, judge what the model proposes."""
    spec = StateSpec.model_validate(ctx.config["spec"])
    step = _Step(state, ctx, spec)
    control = ctx.services.get("machine.control")
    if isinstance(control, MachineControl) and control.cancel_requested(state.lane):
        if ctx.config["interruptible"]:
            return step.end("cancelled", "cancelled")
        if not any(e.kind == "cancel_deferred" for e in state.events):
            step.event("cancel_deferred", reason="skill is not interruptible")
    if state.llm_steps == 0 and state.state == "":
        problems = json_problems(ctx.config["input_schema"], state.input, what="input")
        if problems:
            return step.end("error", "invalid_input", output={"problems": list(problems)})
    model, arbiter = service_models(ctx)
    request = _request(step, arbiter)
    response = ChatResponse.model_validate(
        once_json(ctx, "llm", lambda: model.complete(request).model_dump(mode="json"), by=model)
    )
    step.llm_step = state.llm_steps + 1
    step.out["llm_steps"] = step.llm_step
    step.out["last_event"] = STAY
    calls = response.message.tool_calls
    step.event("proposal", functions=[c.name for c in calls], text=response.message.content)
    exhausted = False
    if not calls:
        exhausted = step.reject("no_proposal", (response.message.content or "")[:80])
    events = [t.on for t in spec.transitions]
    for index, call in enumerate(calls):
        kind = classify(call.name, events=events)
        if kind == "finish":
            if not spec.terminal:
                exhausted = step.reject("finish_not_terminal", call.name)
                break
            output = _args(call.arguments)
            problems = json_problems(ctx.config["output_schema"], output, what="output")
            if problems:
                exhausted = step.reject("invalid_output", call.name)
                step.notes[-1] = step.notes[-1].model_copy(
                    update={"data": {**step.notes[-1].data, "problems": list(problems)}}
                )
                break
            step.out.update(retries=0, step_context=step.notes)
            return step.end("done", "done", output=output)
        if kind == "transition":
            target = spec.transition_for(call.name)
            assert target is not None
            step.record(target.to, target.on)
            step.out.update(last_event=target.on, retries=0, step_context=[])
            return step.out
        if kind == "unknown":
            exhausted = step.reject("invalid_transition", call.name)
            break
        result = _dispatch(step, arbiter, call, index)
        if isinstance(result, Rejection):
            exhausted = step.reject(result.code, call.name)
            break
        step.retries = 0
        seen = _lane_view(result, step.state.lane)
        step.event("tool", **seen)
        step.notes.append(StepNote(llm_step=step.llm_step, kind="tool_result", data=seen))
    if exhausted:
        step.record(ERROR_STATE, "error")
        step.out["retries"] = step.retries
        return step.end("error", "retry_budget_exhausted", state=ERROR_STATE)
    step.out.update(retries=step.retries, step_context=step.notes)
    return step.out


def _lane_view(result: ToolResult, lane: str) -> dict[str, JsonValue]:
    """What ``lane`` may know of a tool result: its summary only when the result's
    ``exposure`` lets that lane see it (errors always go back to the caller); else, as in
    ``ToolResult.to_tool_message``, the status and a note that the result is withheld."""
    view: dict[str, JsonValue] = {"tool": result.tool, "status": result.status}
    if result.visible_to(lane):
        view["summary"] = result.summary
    else:
        view["note"] = f"result withheld from {lane} lane"
    return view


def _dispatch(
    step: _Step, arbiter: ToolDispatcher, call: Any, index: int
) -> ToolResult | Rejection:
    """Run one tool call through the arbiter with the state's allowlist; a refusal by the
    allowlist (or an unknown tool) is a rejection, any other failure a tool result."""

    def run() -> dict[str, Any]:
        try:
            tool_call = ToolCall.from_openai(
                call,
                lane=step.state.lane,
                node=step.ctx.node,
                state=step.name,
                allowed=step.spec.allowed_tools,
                # Argument text that is no JSON object goes to the arbiter, which checks the
                # allowlist first: a forbidden tool is refused as forbidden, however called.
                strict=False,
            )
            return {"result": arbiter.dispatch(tool_call).model_dump(mode="json")}
        except ToolError as exc:
            # Only a tool the state may not call (or no tool at all) is a rejection: a
            # workspace or policy refusal in an allowed tool is that tool's result, which
            # says what was refused and why.
            if failure_of(exc).code in REJECTED:
                return {"rejected": "tool_not_allowed"}
            return {"result": ToolResult.from_error(exc, call_id=call.id).model_dump(mode="json")}

    outcome = once_json(step.ctx, f"tool:{index}:{call.id}", run, by=arbiter)
    if "rejected" in outcome:
        return Rejection(
            code="tool_not_allowed",
            state=step.name,
            proposed=call.name,
            allowed_tools=step.spec.allowed_tools,
            valid_transitions=(),
            retries_left=0,
        )
    return ToolResult.model_validate(outcome["result"])
