"""The ReAct primitive: a think -> act -> observe tool loop that only rules can stop.

``react_graph(tools=[...])`` builds the loop as an ordinary :class:`~stargraph.graph.Graph`
over :class:`ReactState`; ``react_skill(...)`` packages it as a ``kind=agent``
:class:`~stargraph.skills.Skill` for ``SubgraphNode.from_skill``. The nodes:

* ``think`` (``must_stub``: replay serves its recorded writes) sends the conversation and the
  allowlisted tools' ``llm_view()`` to the chat model (native function calling, never regex
  parsing). A reply without tool calls is the final answer - once it validates against the
  optional pydantic ``output_model``; an invalid answer, a refusal or an empty reply goes
  back to the model as an observation and costs one unit of the error budget.
* ``act`` dispatches every tool call of the reply through the tool arbiter with the skill's
  allowlist, in the model's order. The arbiter validates arguments and checks the allowlist
  *before* any body runs; a refused or failed call becomes a structured ``tool`` message
  (``ToolResult.from_error``) and costs one unit of the error budget.
* ``observe`` appends the observations to the trajectory (each ``tool`` message carries the
  ``tool_call_id`` it answers) and sets the ``tool_result`` / ``last_event`` channels rules
  can read. The state after it ranks every tool observation (:attr:`ReactState.salience`):
  with ``react_graph(context_budget=N)`` the next ``think`` elides the least salient old
  observations first to keep the request within ``N`` characters.

The edges form a cycle (think -> act -> observe -> think; a reply without tool calls goes
from think straight to observe) that the edges never leave: only rules end the loop, and
the run record's ``stopped_by`` names the rule that did. Every ReAct step ends at
``observe``, where two packs are mounted (one decision per step, at the point where
everything of the step - the reply, its tool calls, their observations - is in the state):

* ``exit`` (:func:`exit_pack`, replaceable with ``react_graph(rules=[...])``): the success
  rules, ``finish`` decisions that end the run ``done``. ``exit/final_answer`` ends the
  loop on a valid final answer (``last_event`` ``final_answer``); ``exit/done_flag``,
  mounted with ``react_graph(done_field="done")``, ends it when a successful tool result
  is a JSON object whose ``done`` field is ``true`` (``act`` sets ``last_event`` to
  ``tool_done``; that result's summary becomes ``final_answer``). Without a
  ``final_answer`` rule an answer does not end the loop: the next ``think`` tells the model
  so and it goes on.
* ``termination`` (:func:`termination_pack`, always mounted): the budgets,
  ``termination/error_budget`` and ``termination/max_steps``, ``halt`` decisions that end
  the run ``halted`` (``stop_reason`` says why). ``max_steps`` counts *LLM
  steps* (``think`` calls, the seed's meaning), kept in the ``llm_steps`` fact; it halts
  after the observe of the last allowed step, so a model that never stops makes exactly
  ``max_steps`` model calls and every call it made has run and been observed.

The chat model and the arbiter are live objects, which the IR cannot hold: they reach the
nodes as ``compile(services={"model": ChatModel, "arbiter": Arbiter})``. Everything that
changes behaviour (model name, prompt, allowlist, temperature, output schema, limits, the
request fields of :class:`~stargraph.llm.RequestOptions`) is in the node config and so in the
graph hash::

    graph = react_graph(tools=["demo.calc@1.0.0"], system_prompt="Be brief.")
    app = graph.compile(services={"model": OpenAIChatModel("gpt-4o-mini"), "arbiter": arbiter})
    final = app.invoke({"task": "What is 6*7?"})
    final.final_answer, app.get_run(run_id).stopped_by   # with a store: "exit/final_answer"

Model calls and tool dispatches go through the run's record (the executor binds the
``model`` and ``arbiter`` services to each task's journal), so a step re-executed after a
crash (in a run with a checkpoint store) reuses the recorded reply and tool results instead
of calling the model or repeating a side effect, and ``replay`` never calls either (it needs
neither service: a graph compiled without them replays from the record alone). A model
that fails for good (retries exhausted) raises :class:`~stargraph.errors.LLMError` out of
``invoke``; the run is saved as failed at the last completed step and ``resume(run_id)``
continues from there.

A reply cut off by the token limit (``finish_reason="length"``) is never taken as the final
answer: the model is told so, and it costs one unit of the error budget. A tool call whose
arguments are not a JSON object goes to the arbiter like any other, which refuses it before
anything runs (logged, in the commit log, under the canonical tool id).
"""

from __future__ import annotations

import functools
import itertools
import operator
import re
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, TypeVar, cast

import orjson
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    JsonValue,
    ValidationError,
    create_model,
)

from stargraph import fathom, reducers
from stargraph._typed import TypedModel, validate_json_raw
from stargraph.errors import (
    InvalidInputError,
    NodeError,
    Problem,
    SkillValidationError,
    ToolError,
)
from stargraph.graph import END, START, Graph
from stargraph.llm import (
    ChatMessage,
    ChatModel,
    ChatRequest,
    ChatResponse,
    RequestOptions,
    ResponseFormat,
    Usage,
)
from stargraph.llm import ToolCall as LlmToolCall
from stargraph.refs import resolve_ref, try_ref_of
from stargraph.runtime import RunContext
from stargraph.skills._react_rules import exit_pack, termination_pack
from stargraph.skills._react_salience import salience as _salience
from stargraph.skills._react_salience import within_budget as _within_budget
from stargraph.skills._services import (
    ARBITER_WHAT,
    MODEL_WHAT,
    is_chat_model,
    is_tool_dispatcher,
    options_config,
    request_problems,
    require_service,
)
from stargraph.tools._names import short_names
from stargraph.tools._recorded import JournaledArbiter
from stargraph.tools._result import ToolResult, built

if TYPE_CHECKING:
    from stargraph.runtime._context import Conversation
    from stargraph.skills import Skill
    from stargraph.tools import Arbiter, ToolCall

__all__ = [
    "ReactOutput",
    "ReactState",
    "ReactStep",
    "ToolCallRecord",
    "exit_pack",
    "react_graph",
    "react_skill",
    "react_state",
    "termination_pack",
]

_FROZEN: Final = ConfigDict(frozen=True, extra="forbid")
_LANE: Final = "core"
_NODES: Final = ("think", "act", "observe")
# A code fence around a JSON answer is common model behaviour, not a schema violation.
_FENCE: Final = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n(?P<body>.*)\n\s*```\s*$", re.DOTALL)

_NO_OPTIONS: Final[Mapping[str, Any]] = {}

StepKind = Literal["task", "reply", "observation"]
"""What a :class:`ReactStep` is: the user's task, a model reply, or an observation."""


class ReactStep(TypedModel):
    """One message of the agent's conversation, tagged with the LLM step it belongs to.

    The trajectory is the whole conversation except the system prompt (which is node
    config): replaying its messages in order rebuilds the request of the next ``think``.
    """

    typed_error = SkillValidationError

    model_config = _FROZEN

    llm_step: int
    """The ``think`` call this message belongs to (0 for the task)."""
    kind: StepKind
    """``task`` (user turn), ``reply`` (assistant) or ``observation`` (tool results and
    notes about what the model got wrong)."""
    message: ChatMessage
    """The message exactly as sent to the model."""
    usage: Usage | None = None
    """Token counts of a ``reply``."""
    finish_reason: str | None = None
    """Why the model stopped, for a ``reply``: ``stop``, ``tool_calls``, ``length`` (cut
    off by the token limit) ..., as the endpoint said."""


class ToolCallRecord(TypedModel):
    """One tool call the model made and what came of it (refused calls included)."""

    typed_error = SkillValidationError

    model_config = _FROZEN

    llm_step: int
    """The ``think`` call whose reply asked for it."""
    call_id: str
    """The model's ``tool_call_id``; the observation answering it carries the same id."""
    name: str
    """The function name the model used (possibly not a tool at all)."""
    arguments: str
    """The raw argument text the model sent (possibly not JSON)."""
    tool: str
    """The canonical tool id the arbiter resolved, or the unknown name."""
    status: str
    """``success``, ``error``, ``timeout``, ``denied`` or ``invalid`` (``ToolStatus``)."""
    summary: str
    """The result summary, or why the call was refused or failed."""
    error_code: str | None = None
    """The ``ToolFailure.code`` of a refused or failed call."""
    artifact_ref: str | None = None
    """``sha256:`` reference of a stored payload."""


class ReactState(TypedModel):
    """The ReAct loop's state: the seed's channels plus the ones the rules read.

    Start a run with ``{"task": "..."}`` (or with a ``trajectory`` holding a conversation).
    ``done``, ``final_answer``, ``final_output``, ``trajectory`` and ``tool_calls`` are the
    results; ``done``, ``llm_steps`` (rule facts), ``error_count`` and ``last_event`` /
    ``tool_result`` are what the rules that end the loop see.
    """

    typed_error = InvalidInputError

    task: str = ""
    """The user's request; the first user message when the trajectory is empty."""
    trajectory: Annotated[list[ReactStep], reducers.append] = []
    """The conversation so far (without the system prompt), in order."""
    tool_calls: Annotated[list[ToolCallRecord], reducers.append] = []
    """Every tool call the model made, in order, with its outcome."""
    done: Annotated[bool, fathom.Fact()] = False
    """Whether the last ReAct step signalled success: a valid final answer (``last_event``
    ``final_answer``) or a tool result that set the declared done field (``tool_done``).
    With the default rules that ends the loop; whether it did is the run record's
    ``stopped_by``."""
    error_budget: int = 3
    """Errors the loop may still make: the configured budget minus ``error_count``
    (informational; the rules read ``error_count``)."""
    final_answer: str | None = None
    """The last valid final answer the model gave (with an output model: its canonical
    JSON), or, when a tool result set the done field, that result's summary (a tool
    returning a dict: its JSON)."""
    if TYPE_CHECKING:
        # What a type checker sees: the field holds the output model's instance, a class
        # known only when the graph is built.
        final_output: Any = None
    else:
        # What pydantic sees, and the graph hash: unchanged for graphs without an output
        # model, whose field stays None.
        final_output: dict[str, JsonValue] | None = None
    """With an output model: the validated answer, an instance of that model (the state of
    such a graph is :func:`react_state` of the model, which declares this field as it)."""
    llm_steps: Annotated[int, fathom.Fact()] = 0
    """``think`` calls so far; rule ``max_steps`` compares it with the limit."""
    error_count: int = 0
    """Failed tool calls, refusals and rejected answers so far; rule ``error_budget``."""
    last_event: str | None = None
    """What the last node saw: ``tool_calls``, ``final_answer``, ``refusal``,
    ``invalid_answer``, ``empty_answer``, ``truncated`` (cut off by the token limit),
    ``tools_ran``, ``tool_error``, ``tool_success``, ``observed``. After ``observe`` (where
    the rules read it): ``final_answer`` (rule ``final_answer``), ``tool_done`` (a tool result
    set the declared done field; rule ``done_flag``), the tool status of the step
    (``tool_success`` / ``tool_error``), or ``observed``."""
    tool_result: str | None = None
    """Status of the last tool call of the last step (``success``, ``denied`` ...)."""
    usage: Usage = Usage.model_construct()  # all zeros: nothing to validate at import
    """Token usage of every model call of the run, summed."""
    pending: list[ChatMessage] = []
    """Observations ``think``/``act`` produced that ``observe`` has not yet appended."""

    @property
    def salience(self) -> tuple[float, ...]:
        """How much each tool call's observation still matters, one score per
        :attr:`tool_calls` record, in order; ``think`` under a context budget elides the
        lowest first.

        Derived from the state alone (so ``observe`` updates every score when it appends a
        step, and a replay or a reloaded checkpoint reproduces them exactly): a failed or
        refused call starts at 1.0, a success at 0.5; a call repeated by a later step (same
        tool, same arguments), or a failure a later step's success of the same tool made
        good, counts a quarter; every LLM step since the call multiplies it by 0.8.
        """
        return _salience(self.tool_calls, self.llm_steps)


def _as_json(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


class ReactOutput(TypedModel):
    """The declared output channels of the ReAct skill (the seed's list plus the answer
    data): the only channels it writes back into a parent graph."""

    typed_error = InvalidInputError

    trajectory: Annotated[list[ReactStep], reducers.append] = []
    """See :attr:`ReactState.trajectory`."""
    tool_calls: Annotated[list[ToolCallRecord], reducers.append] = []
    """See :attr:`ReactState.tool_calls`."""
    done: bool = False
    """See :attr:`ReactState.done`."""
    error_budget: int = 3
    """See :attr:`ReactState.error_budget`."""
    final_answer: str | None = None
    """See :attr:`ReactState.final_answer`."""
    final_output: Annotated[dict[str, JsonValue] | None, BeforeValidator(_as_json)] = None
    """:attr:`ReactState.final_output` as JSON-able data: what a parent graph's channel
    holds, whichever output model the loop had."""


# --------------------------------------------------------------------------- building

# Output models by the reference stored in the node config. Filled when a graph is built, so
# a model without an import path (defined in a function, in a test) still works in-process;
# another process resolves the reference by import.
_OUTPUT_MODELS: dict[str, type[BaseModel]] = {}


# The state class of each output model, by the model's reference. Its import path is
# ``stargraph.skills.react:ReactState__<hex of the reference>``, which the module's
# ``__getattr__`` rebuilds in any process that can import the output model: the IR of a
# graph (and of a parent graph holding it as a subgraph) references its state by import path.
_STATES: dict[str, type[ReactState]] = {}
_STATES_LOCK = threading.Lock()
_STATE_PREFIX: Final = "ReactState__"


def _output_ref(output_model: type[BaseModel]) -> str:
    """The reference an output model is stored under (and remembered by, in-process)."""
    found = try_ref_of(output_model)
    ref = found if isinstance(found, str) else f"{output_model.__module__}:"
    ref = ref if isinstance(found, str) else ref + output_model.__qualname__
    _OUTPUT_MODELS.setdefault(ref, output_model)
    return ref


def react_state(output_model: type[BaseModel]) -> type[ReactState]:
    """:class:`ReactState` whose ``final_output`` is an ``output_model`` (or ``None``): the
    state of ``react_graph(output_model=...)``, so the final answer comes back as the model,
    and checkpoints and replays, which hold it as JSON, validate it back into the model.
    One class per output model.

    >>> class Answer(BaseModel):
    ...     total: float
    >>> react_state(Answer).model_validate({"final_output": {"total": 1}}).final_output
    Answer(total=1.0)
    """
    return _state_for(_output_ref(output_model), output_model)


def _state_for(ref: str, output_model: type[BaseModel]) -> type[ReactState]:
    with _STATES_LOCK:
        found = _STATES.get(ref)
        if found is None:
            name = _STATE_PREFIX + ref.encode().hex()
            found = create_model(
                name,
                __base__=ReactState,
                __module__=ReactState.__module__,
                __doc__=f"{ReactState.__doc__}\n\nWith output model ``{ref}``.",
                final_output=(cast(Any, output_model | None), None),
            )
            found.__qualname__ = name
            _STATES[ref] = found
    return found


def __getattr__(name: str) -> Any:
    if name.startswith(_STATE_PREFIX):
        try:
            ref = bytes.fromhex(name.removeprefix(_STATE_PREFIX)).decode()
        except ValueError:
            ref = ""
        if ref:
            return _state_for(ref, _output_model(ref))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def react_graph(
    *,
    name: str = "react",
    model: str | None = None,
    tools: Sequence[str],
    system_prompt: str | None = None,
    max_steps: int = 10,
    error_budget: int = 3,
    output_model: type[BaseModel] | None = None,
    temperature: float | None = None,
    request: RequestOptions | None = None,
    done_field: str | None = None,
    rules: Sequence[fathom.RulePack] | None = None,
    context_budget: int | None = None,
) -> Graph[ReactState]:
    """The ReAct loop as a graph over :class:`ReactState`; compile it with
    ``services={"model": <ChatModel>, "arbiter": <Arbiter>}``.

    ``tools`` is the allowlist (tool ids, names or ``ns.*``), both what the model is offered
    and what the arbiter lets through. The model is offered them in the order given (each
    once; a wildcard's tools at its place, in id order), each under a short name it can
    read: the last segment of the tool's name (``calc`` for ``demo.calc@1.0.0``), or, when
    two tools share it, the shortest tail of each name no other tool has (``a_fs_read``,
    ``b_fs_read``); a tool only a wildcard covers keeps its reversible function name. The
    model's call maps back to the tool: records, the commit log and the journal hold the
    canonical id. A tool result reaches the model as the tool's payload (text as it is,
    anything else as compact JSON) or ``Error: ...``; its status, summary and artifact ref
    stay in :attr:`ReactState.tool_calls`. ``model=None`` uses the chat model's own default.
    ``max_steps`` bounds the model calls, ``error_budget`` the failed tool calls, refusals
    and rejected answers. With ``output_model`` the final answer must be a JSON object that
    validates against it (the system prompt names its fields and their types, never the
    raw schema, and the request asks the endpoint for it as ``response_format``, which the
    endpoint profile sends as that server takes it or, where a reply held to a schema
    could not call a tool, leaves out); it lands in
    ``final_output`` as an ``output_model`` instance (the graph's state is
    :func:`react_state` of it) and, as canonical JSON, in ``final_answer``. A parent graph
    mounting the loop receives that instance in its ``final_output`` channel: declare the
    channel as the model, or as :class:`ReactOutput`'s field, which holds it as JSON data.

    ``request`` fixes request fields of every model call (``tool_choice``, ``max_tokens``,
    ``response_format``, ``extra``: ``{"seed": 7}`` ...); like everything else here it is
    part of the graph hash. A ``response_format`` given there replaces the output model's.

    Only rules end the loop, after ``observe``; the edges always go on to ``think``. The
    budgets (:func:`termination_pack`) are always mounted. ``rules`` are the packs that end
    it on success, by default :func:`exit_pack`: rule ``final_answer`` ends it on a valid
    final answer, and, with ``done_field="done"``, rule ``done_flag`` ends it once a
    successful tool result is a JSON object whose ``done`` field is ``true`` (the tool's
    ``return {"done": True, ...}``; read from the result's inline payload). That result is
    kept in ``tool_calls`` and the trajectory, and its summary becomes ``final_answer``
    (``final_output`` is set by a final answer only). Given packs without a
    ``final_answer`` rule, an answer does not end the loop: the next ``think`` tells the
    model so (a user note, no error) and asks it to go on with its tools, until another
    rule or a budget stops it.

    ``context_budget`` bounds the characters of message text each ``think`` sends: over
    it, the least salient tool observations of earlier steps (:attr:`ReactState.salience`;
    the oldest first among equals) are replaced by a short marker naming the tool and the
    call id, until the request fits or only the last step's observations are left. The
    state keeps every observation whole; only the request is shortened.

    >>> graph = react_graph(tools=["demo.calc@1.0.0"], max_steps=4)
    >>> sorted(node.id for node in graph.to_ir().nodes if node.must_stub)
    ['think']
    """
    problems: list[Problem] = []
    # The user's order, de-duplicated: the order decides how (and whether) a small model
    # calls the tools at all.
    allowed = list(dict.fromkeys(tools)) if not isinstance(tools, str) else []
    if isinstance(tools, str) or not all(isinstance(t, str) and t for t in tools):
        problems.append(
            Problem("/tools", f"expected a list of tool ids, got {tools!r}", "pass ['ns.x@1.0.0']")
        )
    problems += request_problems(temperature, request)
    if done_field is not None and (not isinstance(done_field, str) or not done_field):
        problems.append(
            Problem(
                "/done_field",
                f"expected the name of a field of a tool's result, got {done_field!r}",
                'pass done_field="done"',
            )
        )
    if context_budget is not None and (type(context_budget) is not int or context_budget < 1):
        problems.append(
            Problem(
                "/context_budget",
                f"expected a positive number of characters, got {context_budget!r}",
                "pass context_budget=20000, or leave it out for no budget",
            )
        )
    packs: tuple[fathom.RulePack, ...] = ()
    if rules is None:
        packs = (exit_pack(done_flag=done_field is not None),)
    elif isinstance(rules, fathom.RulePack) or not all(
        isinstance(p, fathom.RulePack) for p in rules
    ):
        problems.append(
            Problem(
                "/rules",
                f"expected a list of RulePacks, got {rules!r}",
                "pass rules=[exit_pack(...)] or rules=[RulePack.from_spec({...})]",
            )
        )
    else:
        packs = tuple(rules)
    try:
        packs = (termination_pack(max_steps, error_budget), *packs)
    except SkillValidationError as exc:
        problems.extend(exc.problems)
    if problems:
        raise SkillValidationError(problems, subject=f"ReAct graph {name!r}")
    config: dict[str, Any] = {
        "tools": allowed,
        "error_budget": error_budget,
        "max_steps": max_steps,
    }
    if done_field is not None:
        config["done_field"] = done_field
    if context_budget is not None:
        # Only when set: a graph without a budget hashes as before.
        config["context_budget"] = context_budget
    if model is not None:
        config["model"] = model
    if system_prompt is not None:
        config["system_prompt"] = system_prompt
    if output_model is not None:
        request = _with_schema(request, output_model)
    # Only what differs from the defaults: a graph without options hashes as before.
    config.update(options_config(temperature, request))
    if output_model is not None:
        ref = _output_ref(output_model)
        _OUTPUT_MODELS[ref] = output_model
        # The schema, not just the reference, goes into the hash: editing the model's
        # fields changes what the agent is asked to produce.
        config["output_model"] = ref
        config["output_schema"] = output_model.model_json_schema()
    return (
        Graph(name, state=ReactState if output_model is None else react_state(output_model))
        .with_node(
            "think",
            think,
            config=config,
            must_stub=True,
            writes=(
                "trajectory",
                "llm_steps",
                "pending",
                "error_count",
                "error_budget",
                "done",
                "final_answer",
                "final_output",
                "last_event",
                "usage",
            ),
        )
        .with_node(
            "act",
            act,
            config=config,
            writes=(
                "tool_calls",
                "pending",
                "error_count",
                "error_budget",
                "last_event",
                "done",
                "final_answer",
            ),
        )
        .with_node(
            "observe",
            observe,
            # Every ReAct step ends here (a reply without tool calls skips act), so one
            # decision per step sees all of it: the reply, the tool calls, the observations.
            rules=list(packs),
            writes=("trajectory", "pending", "tool_result", "last_event"),
        )
        .with_edge(START, "think")
        .with_conditional_edges("think", after_think, {"act": "act", "observe": "observe"})
        .with_edge("act", "observe")
        .with_conditional_edges("observe", after_observe, {"think": "think", END: END})
    )


def _with_schema(request: RequestOptions | None, output_model: type[BaseModel]) -> RequestOptions:
    """``request`` asking the endpoint for the output model's shape (unless it names a
    ``response_format`` of its own): the endpoint profile sends the schema the way that
    server takes it, or leaves it out where it cannot hold a reply that may be a tool call."""
    request = request if request is not None else RequestOptions()
    if request.response_format is not None:
        return request
    shape = ResponseFormat.for_schema(output_model)
    return request.model_copy(update={"response_format": shape})


def react_skill(
    *,
    name: str = "react",
    version: str = "1.0.0",
    description: str = "A ReAct tool loop: think, act through the tool arbiter, observe.",
    model: str | None = None,
    tools: Sequence[str],
    system_prompt: str | None = None,
    max_steps: int = 10,
    error_budget: int = 3,
    output_model: type[BaseModel] | None = None,
    temperature: float | None = None,
    request: RequestOptions | None = None,
    done_field: str | None = None,
    rules: Sequence[fathom.RulePack] | None = None,
    requires: Sequence[str] = (),
    context_budget: int | None = None,
) -> Skill:
    """:func:`react_graph` packaged as a ``kind=agent`` :class:`~stargraph.skills.Skill`
    whose declared outputs are :class:`ReactOutput`'s fields.

    ``tools`` must be canonical tool ids here (the skill manifest lists exact ids).
    """
    # Imported here so the loop itself does not depend on the skill layer's manifest code.
    from stargraph.skills import Skill, SkillKind

    graph = react_graph(
        name=name,
        model=model,
        tools=tools,
        system_prompt=system_prompt,
        max_steps=max_steps,
        error_budget=error_budget,
        output_model=output_model,
        temperature=temperature,
        request=request,
        done_field=done_field,
        rules=rules,
        context_budget=context_budget,
    )
    return Skill.from_graph(
        graph,
        name=name,
        version=version,
        kind=SkillKind.AGENT,
        description=description,
        tools=tuple(sorted(set(tools))),
        system_prompt=system_prompt,
        state_schema=ReactOutput,
        requires=tuple(requires),
    )


# --------------------------------------------------------------------------- services


def _service(ctx: RunContext, key: str, check: Callable[[Any], bool], what: str) -> Any:
    return require_service(ctx, key, check, what, who="ReAct node")


# Offered tools per arbiter and allowlist: llm_view() deep-copies each schema, and
# the registry behind an arbiter is frozen, so the list is computed once.
_OFFERED: weakref.WeakKeyDictionary[Arbiter, dict[tuple[str, ...], tuple[dict[str, Any], ...]]]
_OFFERED = weakref.WeakKeyDictionary()


def _offered_tools(
    ctx: RunContext, arbiter: Arbiter, allowed: tuple[str, ...], names: Mapping[str, str]
) -> Any:
    per_arbiter = _OFFERED.setdefault(getattr(arbiter, "arbiter", arbiter), {})
    offered = per_arbiter.get(allowed)  # the names are a function of the allowlist
    if offered is None:
        registry = arbiter.registry
        missing = [t for t in allowed if not t.endswith(".*") and t not in registry]
        if missing:
            raise NodeError(
                f"ReAct node {ctx.node!r} allows tools {missing} that the arbiter's registry "
                f"does not hold (registered: {list(registry.ids)}); register them or fix the "
                "allowlist",
                **ctx.where(),
            )
        offered = per_arbiter[allowed] = _tool_views(registry, allowed, names)
    return offered


@functools.lru_cache(maxsize=256)
def _names(allowed: tuple[str, ...]) -> Mapping[str, str]:
    """The names the model reads and calls (short name -> allowlist entry): a function of
    the allowlist alone, which is in the graph hash, so a replay without a registry maps a
    call back exactly as the live run did."""
    return MappingProxyType(short_names(allowed))


def _tool_views(
    registry: Any, allowed: tuple[str, ...], names: Mapping[str, str]
) -> tuple[dict[str, Any], ...]:
    """The tools of ``allowed`` as the model sees them: in the allowlist's order (a
    wildcard's tools at its place, in id order), each once, under its short name (a tool a
    wildcard alone covers: under its reversible function name)."""
    from stargraph.tools._registry import matches_allowlist  # with the arbiter, not react

    short = {registry.resolve(entry).spec.id: name for name, entry in names.items()}
    views: dict[str, dict[str, Any]] = {}
    for entry in allowed:
        if entry.endswith(".*"):
            tools = [t for t in registry if matches_allowlist(t.spec.id, (entry,))]
        else:
            tools = [registry.resolve(entry)]
        for one in tools:
            spec = one.spec
            if spec.id in views:
                continue
            view = spec.llm_view()
            name = short.get(spec.id)
            if name is not None:
                view = {**view, "function": {**view["function"], "name": name}}
            views[spec.id] = view
    return tuple(views.values())


_M = TypeVar("_M", bound=BaseModel)


def _once(ctx: RunContext, key: str, cls: type[_M], compute: Callable[[], _M]) -> _M:
    """``compute()``; recording is done underneath by the journaled services, so this is
    only the place to say so (a second ``ctx.once`` around it would record twice)."""
    del ctx, key, cls
    return compute()


def _output_model(ref: str) -> type[BaseModel]:
    model = _OUTPUT_MODELS.get(ref)
    if model is None:
        model = _OUTPUT_MODELS[ref] = resolve_ref(ref)
    return model


# --------------------------------------------------------------------------- nodes


def _system_prompt(config: Mapping[str, Any]) -> str | None:
    prompt = config.get("system_prompt")
    schema = config.get("output_schema")
    if schema is None:
        return prompt if isinstance(prompt, str) else None
    # Field names and types, never the JSON Schema itself: small models copy a pasted
    # schema back instead of filling it in.
    rule = (
        "When you give your final answer (without calling a tool), reply with only a JSON "
        f"object with {_fields_text(schema)}."
    )
    return f"{prompt}\n\n{rule}" if prompt else rule


def _fields_text(schema: Mapping[str, Any]) -> str:
    """``the fields total (number), note (string, optional)``: what an answer must hold, in
    words a model reads."""
    defs = schema.get("$defs") or {}
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    if not properties:
        return "any fields"
    words = [
        f"{name} ({_type_text(prop, defs)}{'' if name in required else ', optional'})"
        for name, prop in properties.items()
    ]
    return ("the field " if len(words) == 1 else "the fields ") + ", ".join(words)


_TYPE_WORDS: Final = {
    "string": "string",
    "integer": "integer",
    "number": "number",
    "boolean": "true or false",
    "null": "null",
}


def _type_text(prop: Mapping[str, Any], defs: Mapping[str, Any], depth: int = 0) -> str:
    ref = prop.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/") and depth < 3:
        prop = defs.get(ref.removeprefix("#/$defs/"), {})
    if "enum" in prop:
        return "one of " + ", ".join(orjson.dumps(v).decode() for v in prop["enum"])
    if "const" in prop:
        return orjson.dumps(prop["const"]).decode()
    options = prop.get("anyOf") or prop.get("oneOf")
    if options:
        return " or ".join(_type_text(o, defs, depth + 1) for o in options)
    kind = prop.get("type")
    if kind == "array":
        return "list of " + _type_text(prop.get("items") or {}, defs, depth + 1)
    if kind == "object":
        inner = prop.get("properties")
        if inner and depth < 3:
            fields = (f"{n}: {_type_text(p, defs, depth + 1)}" for n, p in inner.items())
            return "object {" + ", ".join(fields) + "}"
        return "object"
    if isinstance(kind, list):
        return " or ".join(_TYPE_WORDS.get(k, str(k)) for k in kind)
    return _TYPE_WORDS.get(kind, "any value") if isinstance(kind, str) else "any value"


def _read_reply(response: ChatResponse) -> tuple[str, list[str]] | None:
    """The event of a reply that is no answer to check (a refusal, tool calls, a reply cut
    off or empty), with the notes that tell the model why; ``None`` when its text is the
    candidate answer."""
    reply = response.message
    if response.refusal:
        # normalize_tool_calls words the refusal for the model; tool-call problems (unknown
        # tool, bad JSON) are left to the arbiter in `act`, which refuses exactly those calls
        # before any body runs and records the refusal in its commit log.
        from stargraph.llm import normalize_tool_calls

        problems = normalize_tool_calls(response, ()).problems
        return "refusal", [p.message for p in problems if p.kind == "refusal"]
    if reply.tool_calls:
        return "tool_calls", []
    if response.finish_reason == "length":
        # Half an answer is not an answer, however final it looks.
        return "truncated", [
            "Your reply was cut off at the token limit, so it was not taken as your final "
            "answer. Give a shorter final answer, or call a tool."
        ]
    if not (reply.content or "").strip():
        return "empty_answer", [
            "Your reply had neither a tool call nor an answer. Call a tool, or give your "
            "final answer."
        ]
    return None


def _check_answer(config: Mapping[str, Any], text: str) -> tuple[Any, str | None]:
    """``(validated output, None)`` or ``(None, what to tell the model)``."""
    ref = config.get("output_model")
    if not isinstance(ref, str):
        return None, None
    model = _output_model(ref)
    fenced = _FENCE.match(text)
    try:
        return validate_json_raw(model, fenced["body"] if fenced else text), None
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<answer>'}: {err['msg']}"
            for err in exc.errors(include_url=False)[:10]
        )
        fields = _fields_text(config.get("output_schema") or {})
        return None, (
            f"Your final answer is not the JSON object asked for ({problems}). "
            f"Reply again with only a JSON object with {fields}."
        )


_MESSAGE: Final = operator.attrgetter("message")


def _transcript(
    trajectory: Sequence[ReactStep], conversation: Conversation
) -> tuple[ChatMessage, ...]:
    """``tuple(step.message for step in trajectory)``, from the messages of the trajectory
    the node's last step saw when this one extends it (the same step objects, compared by
    identity first in one list comparison in C), so a long run reads only the steps added
    since. A tuple, kept for the next step: the common request takes it as its messages as
    it is."""
    kept = conversation.transcript
    steps = tuple(trajectory)
    if kept is not None and steps[: len(kept[0])] == kept[0]:
        messages = (*kept[1], *map(_MESSAGE, steps[len(kept[0]) :]))
    else:
        messages = tuple(map(_MESSAGE, steps))
    conversation.transcript = (steps, messages)
    return messages


_NO_EXTRA: Final[Mapping[str, Any]] = {}
_REQUEST_FIELDS: Final = tuple(ChatRequest.model_fields)
_REQUEST_VALUES: Final = operator.attrgetter(*_REQUEST_FIELDS)


def _head(
    config: Mapping[str, Any], tools: tuple[dict[str, Any], ...], conversation: Conversation
) -> ChatRequest:
    """The request ``think`` sends but its messages (``messages=()``), validated once for the
    same configuration values (the same objects) rather than at every step."""
    options = config.get("request") or _NO_OPTIONS
    given = (
        config.get("model"),
        tools,
        config.get("temperature"),
        options.get("tool_choice"),
        options.get("max_tokens"),
        options.get("response_format"),
        options.get("seed"),
        options.get("extra") or _NO_EXTRA,
    )
    kept = conversation.head
    if kept is not None and all(map(operator.is_, kept[0], given)):
        head: ChatRequest = kept[1]
        return head
    model, tools, temperature, tool_choice, max_tokens, response_format, seed, extra = given
    head = ChatRequest(
        messages=(),
        model=model,
        tools=tools,
        temperature=temperature,
        tool_choice=tool_choice,
        max_tokens=max_tokens,
        response_format=response_format,
        seed=seed,
        extra=extra,
    )
    conversation.head = (given, head)
    return head


_NOT_ENDED: Final = (
    "Your answer was recorded, but an answer does not end this task: go on with the task "
    "using your tools."
)


def think(state: ReactState, ctx: RunContext) -> dict[str, Any]:
    """Ask the model for the next step; take its answer or prepare its tool calls."""
    config = ctx.config
    model: ChatModel = _service(ctx, "model", is_chat_model, MODEL_WHAT)
    arbiter: Arbiter = _service(ctx, "arbiter", is_tool_dispatcher, ARBITER_WHAT)
    llm_step = state.llm_steps + 1
    trajectory = state.trajectory
    conversation = ctx.conversation
    new_steps: list[ReactStep] = []
    if not trajectory and state.task:
        new_steps.append(ReactStep(llm_step=0, kind="task", message=ChatMessage.user(state.task)))
    if state.last_event == "final_answer" and trajectory and trajectory[-1].kind == "reply":
        # The last step's answer did not end the loop (no rule took it): without a word the
        # model would see its own answer last and likely give it again. (A thread's next
        # turn starts after the answer too, but with the user's new message last.)
        new_steps.append(_observation_step(llm_step, ChatMessage.user(_NOT_ENDED)))
    transcript = _transcript(trajectory, conversation)
    system = _system_prompt(config)
    budget = config.get("context_budget")
    if budget is not None:
        around = len(system or "") + sum(len(s.message.content or "") for s in new_steps)
        transcript = _within_budget(transcript, trajectory, state, budget - around)
    # The kept transcript (a read-only tuple) and what goes around it: the common step (no
    # system prompt, no task to add) sends the kept tuple itself.
    if system or new_steps:
        messages: tuple[ChatMessage, ...] = (
            *((ChatMessage.system(system),) if system else ()),
            *transcript,
            *(step.message for step in new_steps),
        )
    else:
        messages = transcript
    # The other fields are validated once per node configuration (_head); the messages are
    # set unvalidated: they are ChatMessage objects already (the trajectory's), and checking
    # each of them again would cost every step time in proportion to the whole conversation.
    allowed = tuple(config["tools"])
    head = _head(config, _offered_tools(ctx, arbiter, allowed, _names(allowed)), conversation)
    values = dict(zip(_REQUEST_FIELDS, _REQUEST_VALUES(head), strict=True))
    values["messages"] = messages
    request = built(ChatRequest, values, head.model_fields_set)
    response = _once(ctx, "llm", ChatResponse, lambda: model.complete(request))
    reply = response.message
    new_steps.append(_reply_step(llm_step, response))

    notes: list[ChatMessage] = []
    out: dict[str, Any] = {}
    read = _read_reply(response)
    if read is not None:
        event, said = read
        notes += [ChatMessage.user(note) for note in said]
    else:
        text = reply.content or ""
        output, problem = _check_answer(config, text)
        if problem is not None:
            notes.append(ChatMessage.user(problem))
            event = "invalid_answer"
        else:
            event = "final_answer"
            if output is None:
                out["final_answer"] = text
            else:
                out["final_output"] = output
                out["final_answer"] = output.model_dump_json()
    errors = state.error_count + len(notes)
    out.update(
        done=event == "final_answer",
        trajectory=new_steps,
        llm_steps=llm_step,
        pending=notes,
        error_count=errors,
        error_budget=config["error_budget"] - errors,
        last_event=event,
        usage=state.usage + response.usage,
    )
    return out


_REPLY_SET: Final = set(ReactStep.model_fields)
_OBSERVATION_SET: Final = {"llm_step", "kind", "message"}
_RECORD_SET: Final = set(ToolCallRecord.model_fields)


def _reply_step(llm_step: int, response: ChatResponse) -> ReactStep:
    """The trajectory step of the model's reply ``response``: its message, usage and finish
    reason. Built from them as they are when the response is a plain validated one (the
    common case, every step); a subclass may compute its fields, so it is validated."""
    values = {
        "llm_step": llm_step,
        "kind": "reply",
        "message": response.message,
        "usage": response.usage,
        "finish_reason": response.finish_reason,
    }
    if type(response) is ChatResponse and type(llm_step) is int:
        return built(ReactStep, values, _REPLY_SET)
    return ReactStep(**values)


def _observation_step(llm_step: int, message: ChatMessage) -> ReactStep:
    """The trajectory step of a tool result or note ``message`` (validated unless it is a
    plain message already)."""
    if type(message) is ChatMessage and type(llm_step) is int:
        values = {
            "llm_step": llm_step,
            "kind": "observation",
            "message": message,
            "usage": None,
            "finish_reason": None,
        }
        return built(ReactStep, values, _OBSERVATION_SET)
    return ReactStep(llm_step=llm_step, kind="observation", message=message)


def after_think(state: ReactState) -> str:
    """``act`` when the reply called tools, else ``observe`` (an answer, a refusal, an empty
    or invalid reply: nothing to dispatch, only notes to observe).

    A refusal that also carries tool calls goes to ``observe``: the calls are not run.
    """
    return "act" if state.last_event == "tool_calls" else "observe"


def after_observe(state: ReactState) -> str:
    """``think``, always: the edges never end the loop, the rules on ``observe`` do.

    The ``END`` branch of the edge is the way out those rules take (a halt after
    ``observe``), declared so the graph reaches ``END``; no state makes the edge take it.
    """
    del state
    return "think"


def _dispatch(
    arbiter: Arbiter,
    call: Any,
    allowed: tuple[str, ...],
    node: str,
    names: Mapping[str, str],
) -> ToolResult:
    # The arbiter's module is imported here, at the first tool call, not with the skill: an
    # agent's arbiter was built (and imported) by then, and importing react stays light.
    from stargraph.tools._arbiter import ToolCall

    # strict=False: arguments that are no JSON object reach the arbiter, which refuses the
    # call like any invalid one - logged, committed, named by the canonical tool id.
    tool_call = ToolCall.from_openai(call, lane=_LANE, node=node, allowed=allowed, strict=False)
    entry = names.get(tool_call.tool)
    if entry is not None:
        # The short name the model was offered stands for this allowlist entry: the arbiter,
        # its commit log and the journal see the tool's own id or name, never the alias.
        tool_call = tool_call.model_copy(update={"tool": entry})
    try:
        return arbiter.dispatch(tool_call)
    except ToolError as exc:
        return ToolResult.from_error(exc, call_id=call.id)


class _Offline:
    """The arbiter of a replay compiled without one: the record answers every tool call
    (a call it does not hold raises ``ReplayMissError`` first), so nothing reaches this."""

    def dispatch(self, call: ToolCall) -> ToolResult:
        raise NodeError(
            f"tool call {call.tool!r} reached no arbiter: replay serves tool calls from the "
            "record; compile the graph with services={'arbiter': ...} to run tools live"
        )


def _act_arbiter(ctx: RunContext) -> Arbiter:
    journal = ctx.journal
    if ctx.services.get("arbiter") is None and journal is not None and journal.replay:
        # Replay runs no tool body: the recorded outcomes stand in for the arbiter.
        return cast("Arbiter", JournaledArbiter(cast("Arbiter", _Offline()), journal))
    arbiter: Arbiter = _service(ctx, "arbiter", is_tool_dispatcher, ARBITER_WHAT)
    return arbiter


def act(state: ReactState, ctx: RunContext) -> dict[str, Any] | None:
    """Dispatch every tool call of the last reply through the arbiter, in order."""
    reply = next((s for s in reversed(state.trajectory) if s.kind == "reply"), None)
    if reply is None or not reply.message.tool_calls:
        return None
    arbiter = _act_arbiter(ctx)
    allowed = tuple(ctx.config["tools"])
    names = _names(allowed)
    records: list[ToolCallRecord] = []
    answers: list[ChatMessage] = []
    failed = 0
    node = ctx.node
    llm_step = reply.llm_step
    done_field = ctx.config.get("done_field")
    finishing: str | None = None
    for call in reply.message.tool_calls:
        # No _once around the dispatch: the journaled arbiter records each call itself.
        result = _dispatch(arbiter, call, allowed, node, names)
        status = result.status
        if status != "success":
            failed += 1
        # The model reads the tool's payload; the envelope stays in the record below.
        answers.append(ChatMessage.tool(call.id, result.model_text(_LANE), name=call.name))
        error = result.error
        payload = result.payload
        record = {
            "llm_step": llm_step,
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments,
            "tool": result.tool,
            "status": status,
            "summary": result.summary,
            "error_code": error.code if error is not None else None,
            "artifact_ref": result.artifact_ref,
        }
        # Plain validated call and result (the common case): their fields are the record's
        # types already. A subclass may compute one, so its record is validated.
        plain = type(call) is LlmToolCall and type(result) is ToolResult
        plain = plain and type(llm_step) is int
        records.append(
            built(ToolCallRecord, record, _RECORD_SET) if plain else ToolCallRecord(**record)
        )
        # `is True`: the flag is JSON true, not any truthy value a tool returns. The first
        # such result is the one the loop ends with.
        if (
            done_field is not None
            and finishing is None
            and status == "success"
            and type(payload) is dict
            and payload.get(done_field) is True
        ):
            finishing = result.summary
    errors = state.error_count + failed
    out = {
        "tool_calls": records,
        # Tool answers first: the API wants them right after the assistant message that
        # made the calls, before any note addressed to the model as a user turn.
        "pending": answers + state.pending,
        "error_count": errors,
        "error_budget": ctx.config["error_budget"] - errors,
        "last_event": "tool_error" if failed else "tool_success",
    }
    if finishing is not None:
        # Only act sees the results' payloads; observe passes the event on to the rules.
        out.update(last_event="tool_done", done=True, final_answer=finishing)
    return out


def observe(state: ReactState) -> dict[str, Any]:
    """Append the pending observations to the trajectory and expose the last tool status;
    the step's event stays for the rules when it ends the loop (``final_answer``,
    ``tool_done``)."""
    trajectory = state.trajectory
    last = trajectory[-1].llm_step if trajectory else 0
    # The calls of the last LLM step are at the end: read back only those, not every call
    # of the run (a long run would pay for its whole history each step).
    recent = itertools.takewhile(lambda r: r.llm_step == last, reversed(state.tool_calls))
    step_calls = list(recent)[::-1]
    event = state.last_event
    out: dict[str, Any] = {
        "trajectory": [_observation_step(last, message) for message in state.pending],
        "pending": [],
        # A final answer stays the step's event: it is what rule final_answer reads.
        "last_event": event if step_calls or event == "final_answer" else "observed",
    }
    out["tool_result"] = step_calls[-1].status if step_calls else None
    return out
