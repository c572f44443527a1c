"""LangGraph's names for what stargraph already has: Send, Command, interrupt, policies."""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Generic, TypedDict, TypeVar

from stargraph.errors import UsageError
from stargraph.ir import CachePolicyIR, RetryPolicyIR
from stargraph.llm import ChatMessage
from stargraph.messages import Message, RemoveMessage
from stargraph.reducers import add_messages
from stargraph.runtime._plan import Command as _NativeCommand
from stargraph.runtime._schemas import RemainingSteps as _NativeRemainingSteps

N = TypeVar("N")

# The run context of the node executing on this thread (or task), so that LangGraph's
# free functions (interrupt, get_stream_writer) reach it without a ctx parameter.
current_ctx: contextvars.ContextVar[Any] = contextvars.ContextVar("stargraph_langgraph_ctx")


@dataclasses.dataclass(frozen=True)
class Command(_NativeCommand, Generic[N]):
    """LangGraph's ``Command``: stargraph's, also subscriptable as ``Command[Literal[...]]``
    so a node's return annotation declares where it may go (its ``destinations``)."""


def interrupt(value: Any = None) -> Any:
    """Stop the run until ``invoke(Command(resume=answer), config)``; then return ``answer``.

    The node runs again from its start on resume, as in LangGraph."""
    ctx = current_ctx.get(None)
    if ctx is None:
        raise UsageError(
            "interrupt() was called outside a node of a stargraph.langgraph graph; "
            "call it inside a node function of a graph compiled with a checkpointer"
        )
    return ctx.interrupt(value)


def get_stream_writer() -> Callable[[Any], None]:
    """The ``custom`` stream's writer for the node running now (LangGraph's
    ``langgraph.config.get_stream_writer``)."""
    ctx = current_ctx.get(None)
    if ctx is None:
        raise UsageError(
            "get_stream_writer() was called outside a node of a stargraph.langgraph graph; "
            "call it inside a node function"
        )
    emit: Callable[[Any], None] = ctx.emit
    return emit


def RetryPolicy(  # noqa: N802 - LangGraph spells it as a class
    *,
    initial_interval: float = 0.5,
    backoff_factor: float = 2.0,
    max_interval: float = 128.0,
    max_attempts: int = 3,
    jitter: bool = True,
    retry_on: type[BaseException] | Sequence[type[BaseException]] | None = None,
) -> RetryPolicyIR:
    """LangGraph's ``RetryPolicy`` as stargraph's: the same defaults, and by default the
    same errors retried (not programming errors). A ``retry_on`` callable is refused: the
    policy is part of the graph hash, so it must name exception classes."""
    if retry_on is not None and not isinstance(retry_on, type) and callable(retry_on):
        raise UsageError(
            f"RetryPolicy(retry_on={retry_on!r}): a predicate cannot be hashed into the "
            "graph; pass the exception classes to retry (retry_on=[ConnectionError, ...])"
        )
    extra: dict[str, Any] = {}
    if retry_on is not None:
        extra["retry_on"] = [retry_on] if isinstance(retry_on, type) else list(retry_on)
    return RetryPolicyIR(
        max_attempts=max_attempts,
        initial_interval_s=initial_interval,
        backoff=backoff_factor,
        max_interval_s=max_interval,
        jitter=jitter,
        **extra,
    )


def CachePolicy(  # noqa: N802 - LangGraph spells it as a class
    key_func: Callable[..., Any] | None = None, ttl: float | None = None
) -> CachePolicyIR:
    """LangGraph's ``CachePolicy(key_func=, ttl=)`` as stargraph's ``CachePolicy(key=,
    ttl_s=)``; ``key_func`` must be a module-level function (it is named in the IR)."""
    return CachePolicyIR(key=key_func, ttl_s=ttl)


RemainingSteps = Annotated[int, _NativeRemainingSteps]
"""LangGraph's managed value ``RemainingSteps`` (``langgraph.managed``): a state key
annotated with it holds the steps left before the recursion limit, in every node."""


def InMemoryCache() -> None:  # noqa: N802 - LangGraph spells it as a class
    """LangGraph's ``InMemoryCache`` for ``compile(cache=...)``: nothing to make, since a
    node's ``cache_policy`` caches it wherever the checkpointer keeps entries."""
    return None


class MessagesState(TypedDict):
    """LangGraph's ``MessagesState``: a ``messages`` channel merged by ``add_messages``."""

    messages: Annotated[list[Message | ChatMessage | RemoveMessage | Any], add_messages]


__all__ = [
    "CachePolicy",
    "Command",
    "InMemoryCache",
    "MessagesState",
    "RemainingSteps",
    "RetryPolicy",
    "get_stream_writer",
    "interrupt",
]
