"""The request bodies ``stargraph serve`` accepts: each parsed once, into a frozen model.

They follow LangGraph Platform's API (what ``langgraph-sdk`` sends) and the Agent Protocol.
Fields a client sends that change nothing here are ignored (``extra="ignore"``: the SDK sends
``durability``, ``stream_resumable`` ...); a field asking for what this server does not do
(``interrupt_before``, ``checkpoint``, ``webhook`` ...) is refused by :func:`refuse_unsupported`
rather than silently dropped.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CommandBody",
    "HistoryBody",
    "ItemBody",
    "ItemKeyBody",
    "ItemSearchBody",
    "NamespacesBody",
    "RunBody",
    "SearchBody",
    "ThreadBody",
    "ThreadPatchBody",
    "refuse_unsupported",
    "stream_events",
]

_IGNORE: Final = ConfigDict(frozen=True, extra="ignore")

STREAM_MODES: Final = {
    "values": "values",
    "updates": "updates",
    "custom": "custom",
    "messages": "messages",
    "messages-tuple": "messages",
}
"""Stream mode asked -> the event name sent (both ``messages`` forms send ``[chunk, meta]``)."""


class CommandBody(BaseModel):
    """``Command(resume=...)``: the answer to the interrupt the thread's last run waits on
    (``update`` writes channels first, as ``resume(run_id, update=...)``)."""

    model_config = _IGNORE

    resume: Any = None
    update: dict[str, Any] | None = None
    goto: Any = None


class RunBody(BaseModel):
    """A run to create on a thread: ``input`` for a new turn, or ``command`` to resume."""

    model_config = _IGNORE

    assistant_id: str = Field(min_length=1)
    input: dict[str, Any] | None = None
    command: CommandBody | None = None
    stream_mode: str | list[str] = "values"
    metadata: dict[str, Any] = Field(default_factory=dict)
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    multitask_strategy: str | None = None
    if_not_exists: Literal["reject", "create"] | None = None
    on_disconnect: Literal["cancel", "continue"] | None = None
    interrupt_before: Any = None
    interrupt_after: Any = None
    checkpoint: Any = None
    checkpoint_id: str | None = None
    webhook: str | None = None
    after_seconds: float | None = None
    stream_subgraphs: bool = False
    run_id: str | None = Field(
        default=None,
        min_length=1,
        description="stargraph's own: the id of the run (and of the stargraph run a new "
        "turn starts); default a fresh UUID.",
    )


def refuse_unsupported(body: RunBody) -> list[str]:
    """What ``body`` asks that this server does not do, one problem a line."""
    problems = []
    for name in ("interrupt_before", "interrupt_after", "checkpoint", "checkpoint_id", "webhook"):
        if getattr(body, name) not in (None, [], {}):
            problems.append(
                f"{name} is not supported by stargraph serve: declare breakpoints when "
                "compiling the graph, fork a run with `stargraph fork` to start from a step"
            )
    if body.after_seconds:
        problems.append("after_seconds is not supported: create the run when it should start")
    if body.multitask_strategy not in (None, "reject"):
        problems.append(
            f"multitask_strategy={body.multitask_strategy!r} is not supported: a thread runs "
            "one run at a time and refuses another meanwhile ('reject'); wait for it (join) "
            "or cancel it first"
        )
    if body.command is not None and body.command.goto is not None:
        problems.append("command.goto is not supported: resume with command={'resume': ...}")
    if body.command is not None and body.input is not None:
        problems.append("pass input (a new turn) or command (resume), not both")
    return problems


def stream_events(modes: str | list[str]) -> frozenset[str]:
    """The event names a stream in ``modes`` is sent; raises ``KeyError`` naming the first
    mode this server does not stream."""
    asked = [modes] if isinstance(modes, str) else list(modes)
    return frozenset(STREAM_MODES[m] for m in asked)


class ThreadBody(BaseModel):
    """A thread to create."""

    model_config = _IGNORE

    thread_id: str | None = Field(default=None, min_length=1)
    metadata: dict[str, Any] = Field(default_factory=dict)
    if_exists: Literal["raise", "do_nothing"] = "raise"


class ThreadPatchBody(BaseModel):
    """New metadata for a thread (merged into what it has)."""

    model_config = _IGNORE

    metadata: dict[str, Any] = Field(default_factory=dict)


class SearchBody(BaseModel):
    """A page of a listing, optionally filtered by metadata (and, for threads, status)."""

    model_config = _IGNORE

    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)
    metadata: dict[str, Any] | None = None
    status: str | None = None
    graph_id: str | None = None


class HistoryBody(BaseModel):
    """How many of a thread's past states, newest first."""

    model_config = _IGNORE

    limit: int = Field(default=10, ge=1, le=1000)


class ItemBody(BaseModel):
    """An item to put in the store (Agent Protocol ``PUT /store/items``)."""

    model_config = _IGNORE

    namespace: list[str]
    key: str = Field(min_length=1)
    value: dict[str, Any]


class ItemKeyBody(BaseModel):
    """An item of the store, by namespace and key."""

    model_config = _IGNORE

    namespace: list[str]
    key: str = Field(min_length=1)


class ItemSearchBody(BaseModel):
    """Items under a namespace prefix whose values hold ``filter``'s pairs."""

    model_config = _IGNORE

    namespace_prefix: list[str] = Field(default_factory=list)
    filter: dict[str, Any] | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)


class NamespacesBody(BaseModel):
    """The store's namespaces, filtered by prefix and suffix, cut at ``max_depth``."""

    model_config = _IGNORE

    prefix: list[str] | None = None
    suffix: list[str] | None = None
    max_depth: int | None = Field(default=None, ge=1)
    limit: int = Field(default=100, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)
