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

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Protocol

from stargraph.errors import MissingServiceError, NodeError

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
    "recorded_arbiter",
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
