"""How skill nodes take their live objects from ``ctx.services``, and how they fail.

The reference skills, the SkillSpec machine and the Markdown workflows all reach for a model,
an arbiter or a store in ``ctx.services``; one function checks what they find, so a missing
or mistyped service reads the same everywhere: which node, which key, what was found instead
and how to pass it.

The model and the arbiter are checked by what nodes call on them, never by their class: a
graph with a checkpoint store hands its nodes the journaled forms (``JournaledChatModel``,
``JournaledArbiter``), which record each call and serve it back on resume and replay, and a
class check against ``Arbiter`` would turn every durable run away at its first step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

from stargraph.errors import MissingServiceError, NodeError, Problem

if TYPE_CHECKING:
    from stargraph.llm import ChatModel
    from stargraph.runtime import RunContext
    from stargraph.tools import ArtifactStore, CommitLog, ToolCall, ToolRegistry, ToolResult

__all__ = [
    "ToolDispatcher",
    "arbiter_service",
    "is_chat_model",
    "is_tool_dispatcher",
    "model_service",
    "node_error",
    "options_config",
    "options_from_data",
    "recorded_arbiter",
    "request_fields",
    "request_problems",
    "require_service",
    "typed_service",
]

ARBITER_WHAT: Final = "a tool Arbiter"
MODEL_WHAT: Final = "a ChatModel"


class ToolDispatcher(Protocol):
    """What skill nodes use of ``services["arbiter"]``: an
    :class:`~stargraph.tools.Arbiter`, or the journaled arbiter a durable run gives its
    nodes in its place (which forwards everything but the dispatches to the arbiter)."""

    @property
    def registry(self) -> ToolRegistry:
        """The tools it dispatches to."""
        ...

    @property
    def commit_log(self) -> CommitLog:
        """Where committed calls (and skill transitions) are chained."""
        ...

    @property
    def artifacts(self) -> ArtifactStore:
        """Where large outputs and transition records are kept by hash."""
        ...

    def dispatch(self, call: ToolCall, /) -> ToolResult:
        """Run one tool call under the arbiter's policies and return its result."""
        ...


def is_tool_dispatcher(found: object) -> bool:
    """Whether ``found`` can stand as ``services["arbiter"]``: it dispatches and has a
    registry. Two attribute looks, cheaper than a runtime-checkable ``isinstance`` on
    every step."""
    return callable(getattr(found, "dispatch", None)) and hasattr(found, "registry")


def is_chat_model(found: object) -> bool:
    """Whether ``found`` can stand as ``services["model"]``: it has ``complete``."""
    return callable(getattr(found, "complete", None))


def node_error(ctx: RunContext, message: str) -> NodeError:
    """A :class:`~stargraph.errors.NodeError` located at ``ctx``'s run, step and node."""
    return NodeError(message, run_id=ctx.run_id, step=ctx.step, node=ctx.node)


def require_service(
    ctx: RunContext, key: str, check: Callable[[Any], bool], what: str, *, who: str = "node"
) -> Any:
    """``ctx.services[key]`` if ``check`` accepts it; else a NodeError saying that ``who``
    (``"node"``, ``"skill node"``...) needs ``what`` (``"a ChatModel"``) there."""
    found = ctx.services.get(key)
    if found is None and key not in ctx.services:
        raise MissingServiceError(
            f"{who} {ctx.node!r} needs {what} as services[{key!r}] but got nothing; "
            f"compile the graph with services={{{key!r}: ...}} (a worker: "
            "Worker(db, services=...) or `stargraph worker --services module:fn`)",
            service=key,
            run_id=ctx.run_id,
            step=ctx.step,
            node=ctx.node,
        )
    if not check(found):
        got = "nothing" if found is None else type(found).__name__
        raise node_error(
            ctx,
            f"{who} {ctx.node!r} needs {what} as services[{key!r}] but got {got}; "
            f"compile the graph with services={{{key!r}: ...}}",
        )
    return found


def typed_service(ctx: RunContext, key: str, kind: type[Any], *, who: str = "node") -> Any:
    """``ctx.services[key]``, which must be an instance of ``kind``
    (:func:`require_service` with an ``isinstance`` check). ``kind`` is typed ``type[Any]``
    so that a runtime-checkable Protocol (``DocumentStore``) is accepted too."""
    return require_service(
        ctx, key, lambda value: isinstance(value, kind), f"a {kind.__name__}", who=who
    )


def arbiter_service(ctx: RunContext, *, who: str = "node") -> ToolDispatcher:
    """``ctx.services["arbiter"]``: an arbiter or its journaled form (see the module
    docstring), else a NodeError naming the node and how to pass one."""
    found: ToolDispatcher = require_service(
        ctx, "arbiter", is_tool_dispatcher, ARBITER_WHAT, who=who
    )
    return found


def model_service(ctx: RunContext, *, who: str = "node") -> ChatModel:
    """``ctx.services["model"]``: a chat model or its journaled form, else a NodeError
    naming the node and how to pass one."""
    found: ChatModel = require_service(ctx, "model", is_chat_model, MODEL_WHAT, who=who)
    return found


class _Unreachable:
    """The arbiter behind :func:`recorded_arbiter`: the record answers every tool call (a
    call it does not hold raises ``ReplayMissError`` first), so nothing reaches this."""

    def dispatch(self, call: ToolCall, /) -> ToolResult:
        raise NodeError(
            f"tool call {call.tool!r} reached no arbiter: replay serves tool calls from the "
            "record; compile the graph with services={'arbiter': ...} to run tools live"
        )


def recorded_arbiter(ctx: RunContext) -> Any:
    """In a replay compiled without ``services["arbiter"]``, an arbiter that serves each
    dispatch from the record (a replay runs no tool body, so it needs no live one); else
    ``None``, and the node asks for the arbiter it was given."""
    journal = ctx.journal
    if journal is None or not journal.replay or ctx.services.get("arbiter") is not None:
        return None
    from stargraph.tools._recorded import JournaledArbiter

    return JournaledArbiter(_Unreachable(), journal)  # type: ignore[arg-type]


def request_problems(temperature: Any, request: Any) -> list[Problem]:
    """What is wrong with a model-calling node's ``temperature`` and ``request`` (none:
    nothing); each problem names the argument and how to pass it."""
    from stargraph.llm import RequestOptions

    problems = []
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or not 0 <= temperature <= 2
    ):
        problems.append(
            Problem("/temperature", f"{temperature!r} is outside 0..2", "pass temperature=0..2")
        )
    if request is not None and not isinstance(request, RequestOptions):
        problems.append(
            Problem(
                "/request",
                f"expected RequestOptions, got {type(request).__name__}",
                "pass request=RequestOptions(max_tokens=256, seed=7)",
            )
        )
    return problems


def options_config(
    temperature: Any, request: Any, *, subject: str = "model request options"
) -> dict[str, Any]:
    """The node config of a model-calling node's request options: ``temperature`` and the
    fields of a :class:`~stargraph.llm.RequestOptions` (``max_tokens``, ``seed`` ...) that
    differ from the defaults, so a node without options hashes as before.
    Raises :class:`~stargraph.errors.SkillValidationError` (about ``subject``) for anything
    else."""
    from stargraph.errors import SkillValidationError

    problems = request_problems(temperature, request)
    if problems:
        raise SkillValidationError(problems, subject=subject)
    config: dict[str, Any] = {}
    if temperature is not None:
        config["temperature"] = temperature
    if request is not None:
        options = request.model_dump(mode="json", exclude_defaults=True)
        if options:
            config["request"] = options
    return config


def request_fields(config: Any) -> dict[str, Any]:
    """The :class:`~stargraph.llm.ChatRequest` fields a node's config fixes (see
    :func:`options_config`): ``temperature``, ``max_tokens``, ``seed``, ``tool_choice``,
    ``response_format`` and ``extra``, only those set."""
    fields: dict[str, Any] = {}
    temperature = config.get("temperature")
    if temperature is not None:
        fields["temperature"] = temperature
    for name, value in (config.get("request") or {}).items():
        if value is not None:
            fields[name] = value
    return fields


def options_from_data(data: Mapping[str, Any], where: str, problems: list[Problem]) -> Any:
    """The :class:`~stargraph.llm.RequestOptions` of a spec file's ``request`` mapping
    (``{max_tokens: 256, seed: 7}``), or ``None`` when it has none; ``temperature`` is
    checked too. Problems go to ``problems``, under ``<where>/temperature`` and
    ``<where>/request/<field>``."""
    from stargraph.errors import ChatDataError
    from stargraph.llm import RequestOptions

    temperature = data.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or not 0 <= temperature <= 2
    ):
        problems.append(
            Problem(
                f"{where}/temperature",
                f"temperature must be a number in 0..2, got {temperature!r}",
                "write e.g. 'temperature: 0'",
            )
        )
    raw = data.get("request")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        problems.append(
            Problem(
                f"{where}/request",
                f"request must be a mapping of request options, got {raw!r:.60}",
                "write e.g. 'request: {max_tokens: 256, seed: 7}'",
            )
        )
        return None
    try:
        return RequestOptions.model_validate(dict(raw))
    except ChatDataError as exc:
        fields = ", ".join(sorted(RequestOptions.model_fields))
        for problem in exc.problems:
            pointer = problem.pointer.strip("/").replace(".", "/")
            problems.append(
                Problem(
                    f"{where}/request/{pointer}",
                    problem.message,
                    f"request options are {fields}: e.g. 'request: {{max_tokens: 256, seed: 7}}'",
                )
            )
        return None
