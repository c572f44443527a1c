"""The writeback contract an agent owes before it terminates (D7), and the events (D8)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stargraph.errors import OrphanWarning, WritebackWarning

__all__ = [
    "AgentEvent",
    "OrphanWarning",
    "TaskUpdate",
    "ThoughtRecord",
    "WritebackMode",
    "WritebackWarning",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")

WritebackMode = Literal["warn", "block"]
"""``warn`` (AMS): terminating without writeback warns; ``block`` (Colibri): it is refused."""


class TaskUpdate(BaseModel):
    """``task_update``: where the agent's task stands."""

    model_config = _FROZEN

    task_id: str = Field(min_length=1)
    """The task."""
    status: str = Field(min_length=1)
    """Task status (``done``, ``blocked`` ...)."""
    progress: int = Field(ge=0, le=100)
    """Percent complete, 0-100."""
    summary: str = Field(min_length=1)
    """What was done."""


class ThoughtRecord(BaseModel):
    """``thought_record``: the agent's reflection, tying the work to code."""

    model_config = _FROZEN

    task_id: str = Field(min_length=1)
    """The task."""
    type: Literal["reflection"] = "reflection"
    """Always ``reflection`` for the writeback."""
    branch: str = Field(min_length=1)
    """The branch the work is on."""
    commit_sha: str = Field(min_length=1)
    """The commit holding the work."""
    tests_run: tuple[str, ...] = ()
    """Tests the agent ran."""
    blockers: tuple[str, ...] = ()
    """What stopped it, if anything."""


class AgentEvent(BaseModel):
    """An alert from the agent store: ``orphan``, ``writeback_missing``, ``init_failed``."""

    model_config = _FROZEN

    kind: str
    """What happened."""
    agent_id: str
    """Which agent."""
    detail: dict[str, Any] = {}
    """Specifics (missing items, missing tools ...)."""
