"""The writeback contract an agent owes before it terminates, and the events."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from stargraph.agents._data import AgentData
from stargraph.errors import OrphanWarning, WritebackWarning

__all__ = [
    "AgentEvent",
    "OrphanWarning",
    "TaskUpdate",
    "ThoughtRecord",
    "WritebackMode",
    "WritebackWarning",
]

WritebackMode = Literal["warn", "block"]
"""``warn`` (AMS): terminating without writeback warns; ``block`` (Colibri): it is refused."""


class TaskUpdate(AgentData):
    """``task_update``: where the agent's task stands."""

    task_id: str = Field(min_length=1)
    """The task."""
    status: str = Field(min_length=1)
    """Task status (``done``, ``blocked`` ...)."""
    progress: int = Field(ge=0, le=100)
    """Percent complete, 0-100."""
    summary: str = Field(min_length=1)
    """What was done."""


class ThoughtRecord(AgentData):
    """``thought_record``: the agent's reflection, tying the work to code."""

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


class AgentEvent(AgentData):
    """An alert from the agent store: ``orphan``, ``writeback_missing``, ``init_failed``."""

    kind: str
    """What happened."""
    agent_id: str
    """Which agent."""
    detail: dict[str, Any] = Field(default_factory=dict)
    """Specifics (missing items, missing tools ...)."""
