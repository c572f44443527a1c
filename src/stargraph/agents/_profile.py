"""Agent capability profiles (the donor's "CV") and what a task needs of one.

Invalid data is an :class:`~stargraph.errors.AgentConfigError` naming field and value.
Allocation over profiles (the pool strategies) is in :mod:`stargraph.agents._pool`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from stargraph.agents._data import AgentData
from stargraph.agents._spawn import PoolAssignment
from stargraph.tools import matches_allowlist

__all__ = ["AgentProfile", "History", "Limits", "Permissions", "TaskNeeds"]


class Permissions(AgentData):
    """What an agent may touch."""

    tools: tuple[str, ...] = ()
    """Allowed tools: exact ids, ``ns.name`` (any version) or ``ns.*``."""
    write_access: bool = False
    """May write (workspace, repository)."""
    admin_access: bool = False
    """May administer (registry, other agents)."""


class Limits(AgentData):
    """How much an agent type may take on."""

    max_concurrent_tasks: int = Field(1, ge=1)
    """Live agents of this type at once (pool size)."""
    token_budget: int = Field(100_000, ge=1)
    """Tokens one task may spend."""
    timeout_ms: int = Field(300_000, ge=1)
    """Wall time one task may take."""
    max_queued_tasks: int | None = Field(None, ge=0)
    """Tasks that may wait for a free slot (queue depth); ``None``: one per slot, that is
    ``max_concurrent_tasks``. ``0`` refuses a task at once when every slot is taken."""

    @property
    def queue_depth(self) -> int:
        """How many submitted tasks may wait for this type at once.

        >>> (Limits(max_concurrent_tasks=3).queue_depth, Limits(max_queued_tasks=0).queue_depth)
        (3, 0)
        """
        if self.max_queued_tasks is None:
            return self.max_concurrent_tasks
        return self.max_queued_tasks


class History(AgentData):
    """Track record; the allocator prefers better and faster agents."""

    success_rate: float = Field(0.0, ge=0.0, le=1.0)
    """Fraction of runs that succeeded."""
    avg_duration_ms: float = Field(0.0, ge=0.0)
    """Mean task duration."""
    total_runs: int = Field(0, ge=0)
    """Runs so far."""


class AgentProfile(AgentData):
    """An agent type's capability profile (the seed's CV).

    >>> AgentProfile(agent_type="coder", permissions={"tools": ["choir.fs.*"]}).limits
    Limits(max_concurrent_tasks=1, token_budget=100000, timeout_ms=300000, max_queued_tasks=None)
    >>> from stargraph.errors import AgentConfigError
    >>> try:
    ...     AgentProfile(agent_type="coder", history={"success_rate": 2})
    ... except AgentConfigError as exc:
    ...     print(exc.problems[0].pointer, exc.problems[0].message)
    /history/success_rate Input should be less than or equal to 1 (got 2)
    """

    agent_type: str = Field(min_length=1)
    """The type name."""
    skills: tuple[str, ...] = ()
    """Skill names the type may run."""
    permissions: Permissions = Permissions()
    """See :class:`Permissions`."""
    limits: Limits = Limits()
    """See :class:`Limits`."""
    history: History = History()
    """See :class:`History`."""

    def missing_tools(self, required: Sequence[str]) -> list[str]:
        """The ``required`` tools its permissions do not cover."""
        return [t for t in required if not matches_allowlist(t, self.permissions.tools)]


class TaskNeeds(AgentData):
    """What a task asks of the agent that takes it."""

    task_id: str | None = None
    """The task, when known (a queue's tasks are told apart by it)."""
    priority: int = 0
    """Higher is served first under the ``PRIORITY`` pool strategy."""
    pool: PoolAssignment | None = None
    """The pool the agent is assigned to for this task."""
    skills: tuple[str, ...] = ()
    """Skills the agent must have."""
    tools: tuple[str, ...] = ()
    """Tools its permissions must cover (a skill's ``required_tools``)."""
    write_access: bool = False
    """Needs write access."""
    admin_access: bool = False
    """Needs admin access."""
    tokens: int = Field(0, ge=0)
    """Expected token use; must fit ``limits.token_budget``."""
    timeout_ms: int = Field(0, ge=0)
    """Expected duration; must fit ``limits.timeout_ms``."""

    def reasons(self, profile: AgentProfile, active: int = 0) -> list[str]:
        """Why ``profile`` (with ``active`` live agents) cannot take the task; empty if it can."""
        out = []
        lacking = sorted(set(self.skills) - set(profile.skills))
        if lacking:
            out.append(f"lacks skills {lacking}")
        missing = profile.missing_tools(self.tools)
        if missing:
            out.append(f"not permitted tools {missing}")
        if self.write_access and not profile.permissions.write_access:
            out.append("no write access")
        if self.admin_access and not profile.permissions.admin_access:
            out.append("no admin access")
        if active >= profile.limits.max_concurrent_tasks:
            out.append(f"at its limit of {profile.limits.max_concurrent_tasks} concurrent tasks")
        if self.tokens > profile.limits.token_budget:
            out.append(f"token budget {profile.limits.token_budget} < {self.tokens}")
        if self.timeout_ms > profile.limits.timeout_ms:
            out.append(f"timeout {profile.limits.timeout_ms} ms < {self.timeout_ms} ms")
        return out
