"""Per-lane working memory: the last N events in full, older ones rolled into a summary.

Each lane keeps its own :class:`WorkingMemory`. Events are appended as they happen (a user
message, a model reply, a tool result the lane may see, a :class:`CoreJobStart`). The window
holds the last ``window`` events (default 50) in full; when an event falls out of it, it is
rolled into the lane's running summary - unless it is *pinned*:

* the system prompt and the identity text (held apart from the events, never rolled),
* the **latest** user message (an older one rolls once a newer one arrives),
* every ``CoreJobStart`` (the job's origin must stay visible for the whole job).

Pinned events that left the window are kept in full, in order, between the summary and the
window. The summarizer is pluggable (``(previous_summary, rolled_events) -> summary``); the
default is deterministic: one line per rolled event, each clipped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal

import orjson
from pydantic import ConfigDict, Field, JsonValue, ValidationError

from stargraph._typed import TypedModel, validate_raw
from stargraph.errors import CompileError, SkillValidationError
from stargraph.skills._files import validation_problems
from stargraph.tools import ToolResult

__all__ = [
    "DEFAULT_WINDOW",
    "CoreJobStart",
    "EventKind",
    "MemoryEvent",
    "Summarizer",
    "WorkingMemory",
    "line_summarizer",
]

DEFAULT_WINDOW: Final = 50
"""Events a lane's working memory keeps in full."""

EventKind = Literal["user", "assistant", "tool_result", "core_job_start", "note"]
"""What a memory event is. ``core_job_start`` is always pinned; the latest ``user`` too."""

_CLIP: Final = 160


class CoreJobStart(TypedModel):
    """A core job started from an edge-lane event: the job's origin, pinned in both lanes'
    memories for as long as they live."""

    typed_error = SkillValidationError

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_id: str
    """The job's id (also the core lane run's id)."""
    skill: str
    """The SkillSpec the core lane runs."""
    input: dict[str, JsonValue] = Field(default_factory=dict)
    """The skill input."""
    origin_lane: str = "edge"
    """The lane whose event started the job."""
    origin_call: str | None = None
    """The tool call (``call_id``) of the edge lane that asked for the job."""
    reason: str = ""
    """Why the edge lane started it."""

    def text(self) -> str:
        """One line for a prompt."""
        data = orjson.dumps(self.input, option=orjson.OPT_SORT_KEYS).decode()
        why = f" - {self.reason}" if self.reason else ""
        return f"CoreJobStart {self.job_id}: {self.skill} {data} (from {self.origin_lane}){why}"


class MemoryEvent(TypedModel):
    """One event in a lane's working memory."""

    typed_error = SkillValidationError

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int
    """Position in the lane's history (1-based; never reused)."""
    kind: EventKind
    """What happened."""
    text: str
    """The event as the model sees it."""
    data: dict[str, JsonValue] = Field(default_factory=dict)
    """Structured details (a tool result's prompt view, a CoreJobStart ...)."""

    def line(self) -> str:
        """The event as one clipped summary line."""
        text = " ".join(self.text.split())
        if len(text) > _CLIP:
            text = text[: _CLIP - 3] + "..."
        return f"[{self.seq}] {self.kind}: {text}"


Summarizer = Callable[[str, Sequence[MemoryEvent]], str]
"""``(previous_summary, rolled_events) -> new summary``."""


def line_summarizer(previous: str, rolled: Sequence[MemoryEvent]) -> str:
    """The default summarizer: the previous summary plus one clipped line per rolled event."""
    lines = [previous] if previous else []
    lines.extend(event.line() for event in rolled)
    return "\n".join(lines)


class WorkingMemory:
    """One lane's working memory (thread safe: lanes append from their own threads).

    >>> memory = WorkingMemory("edge", system="You are the edge lane.", window=2)
    >>> for text in ("hi", "ok", "more"):
    ...     _ = memory.append("user" if text != "ok" else "assistant", text)
    >>> [e.text for e in memory.window]
    ['ok', 'more']
    >>> memory.summary
    '[1] user: hi'
    """

    def __init__(
        self,
        lane: str,
        *,
        system: str = "",
        identity: str = "",
        window: int = DEFAULT_WINDOW,
        summarizer: Summarizer = line_summarizer,
    ) -> None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise CompileError.at(
                "/window",
                f"window must be an int >= 1, got {window!r}",
                f"keep at least one event in full (default {DEFAULT_WINDOW})",
                subject=f"working memory of lane {lane!r}",
            )
        self.lane = lane
        self.system = system
        """The system prompt: never compacted."""
        self.identity = identity
        """The identity text: never compacted."""
        self.window_size = window
        self.summarizer = summarizer
        self.summary = ""
        """Everything rolled out of the window so far, summarized."""
        self.rolled: list[int] = []
        """The ``seq`` of every event rolled into the summary, in rolling order."""
        self._window: list[MemoryEvent] = []
        self._kept: list[MemoryEvent] = []
        self._seq = 0
        self._lock = threading.Lock()

    # ----------------------------------------------------------------------- writing

    def append(self, kind: EventKind, text: str, **data: JsonValue) -> MemoryEvent:
        """Append one event; events leaving the window roll into the summary."""
        with self._lock:
            try:
                event = validate_raw(
                    MemoryEvent, {"seq": self._seq + 1, "kind": kind, "text": text, "data": data}
                )
            except ValidationError as exc:
                raise CompileError(
                    validation_problems(exc, "pass a known kind, text as str and JSON data"),
                    subject=f"memory event of lane {self.lane!r}",
                ) from None
            self._seq += 1
            self._window.append(event)
            self._compact()
            return event

    def add_tool_result(self, result: ToolResult, *, caller: str | None = None) -> bool:
        """Append a tool result if this lane may see it (``exposure``).

        An error goes to the calling lane only. Returns whether the result was appended.
        """
        if result.error is not None:
            if caller is not None and caller != self.lane:
                return False
        elif not result.visible_to(self.lane):
            return False
        view = result.prompt_view()
        text = f"{result.tool} -> {result.status}: {result.summary}"
        self.append("tool_result", text, tool=result.tool, view=_plain(view))
        return True

    def add_core_job_start(self, job: CoreJobStart) -> MemoryEvent:
        """Append a (pinned) :class:`CoreJobStart`."""
        return self.append("core_job_start", job.text(), **job.model_dump(mode="json"))

    def _pinned(self, event: MemoryEvent, latest_user: int | None) -> bool:
        return event.kind == "core_job_start" or event.seq == latest_user

    def _compact(self) -> None:
        latest_user = next((e.seq for e in reversed(self.events) if e.kind == "user"), None)
        overflow = len(self._window) - self.window_size
        older = self._window[:overflow] if overflow > 0 else []
        if overflow > 0:
            self._window = self._window[overflow:]
        candidates = sorted([*self._kept, *older], key=lambda e: e.seq)
        keep = [e for e in candidates if self._pinned(e, latest_user)]
        roll = [e for e in candidates if not self._pinned(e, latest_user)]
        self._kept = keep
        if roll:
            self.summary = self.summarizer(self.summary, roll)
            self.rolled.extend(e.seq for e in roll)

    # ----------------------------------------------------------------------- reading

    @property
    def window(self) -> tuple[MemoryEvent, ...]:
        """The last ``window`` events, in full."""
        return tuple(self._window)

    @property
    def kept(self) -> tuple[MemoryEvent, ...]:
        """Pinned events older than the window, kept in full."""
        return tuple(self._kept)

    @property
    def events(self) -> tuple[MemoryEvent, ...]:
        """Every event still held in full: the kept pinned ones, then the window."""
        return (*self._kept, *self._window)

    @property
    def latest_user(self) -> MemoryEvent | None:
        """The latest user message, if any."""
        return next((e for e in reversed(self.events) if e.kind == "user"), None)

    def render(self) -> str:
        """The memory as prompt text: identity, summary, pinned events, window.

        (The system prompt goes in the master prompt; see :meth:`messages` for chat form.)
        """
        parts: list[str] = []
        if self.identity:
            parts.append(f"## Identity\n{self.identity}")
        if self.summary:
            parts.append(f"## Summary of earlier events ({self.lane} lane)\n{self.summary}")
        if self._kept:
            parts.append("## Pinned\n" + "\n".join(f"[{e.seq}] {e.text}" for e in self._kept))
        if self._window:
            parts.append(
                "## Recent events\n"
                + "\n".join(f"[{e.seq}] {e.kind}: {e.text}" for e in self._window)
            )
        return "\n\n".join(parts)

    def messages(self) -> list[dict[str, Any]]:
        """The memory as chat messages: system prompt (with identity and summary) first,
        then every event in full (user events as ``user``, the rest as ``assistant``)."""
        head = [self.system, f"## Identity\n{self.identity}" if self.identity else ""]
        if self.summary:
            head.append(f"## Summary of earlier events\n{self.summary}")
        out: list[dict[str, Any]] = []
        system = "\n\n".join(p for p in head if p)
        if system:
            out.append({"role": "system", "content": system})
        for event in self.events:
            role = "user" if event.kind == "user" else "assistant"
            out.append({"role": role, "content": event.text})
        return out

    def snapshot(self) -> dict[str, Any]:
        """Plain data: lane, system, identity, summary, kept, window."""
        return {
            "lane": self.lane,
            "system": self.system,
            "identity": self.identity,
            "summary": self.summary,
            "kept": [e.model_dump(mode="json") for e in self._kept],
            "window": [e.model_dump(mode="json") for e in self._window],
        }

    def __len__(self) -> int:
        return len(self._kept) + len(self._window)


def _plain(value: Any) -> JsonValue:
    data: JsonValue = orjson.loads(orjson.dumps(value))
    return data
