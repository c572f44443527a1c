"""Agent capability profiles (the donor's "CV") and allocation over them (D9)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from stargraph.tools import matches_allowlist

__all__ = ["AgentProfile", "History", "Limits", "Permissions", "TaskNeeds", "allocate"]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Permissions(BaseModel):
    """What an agent may touch."""

    model_config = _FROZEN

    tools: tuple[str, ...] = ()
    """Allowed tools: exact ids, ``ns.name`` (any version) or ``ns.*``."""
    write_access: bool = False
    """May write (workspace, repository)."""
    admin_access: bool = False
    """May administer (registry, other agents)."""


class Limits(BaseModel):
    """How much an agent type may take on."""

    model_config = _FROZEN

    max_concurrent_tasks: int = Field(1, ge=1)
    """Live agents of this type at once (pool size)."""
    token_budget: int = Field(100_000, ge=1)
    """Tokens one task may spend."""
    timeout_ms: int = Field(300_000, ge=1)
    """Wall time one task may take."""


class History(BaseModel):
    """Track record; the allocator prefers better and faster agents."""

    model_config = _FROZEN

    success_rate: float = Field(0.0, ge=0.0, le=1.0)
    """Fraction of runs that succeeded."""
    avg_duration_ms: float = Field(0.0, ge=0.0)
    """Mean task duration."""
    total_runs: int = Field(0, ge=0)
    """Runs so far."""


class AgentProfile(BaseModel):
    """An agent type's capability profile (the seed's CV).

    >>> AgentProfile(agent_type="coder", permissions={"tools": ["choir.fs.*"]}).limits
    Limits(max_concurrent_tasks=1, token_budget=100000, timeout_ms=300000)
    """

    model_config = _FROZEN

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
        """The ``required`` tools its permissions do not cover (D5)."""
        return [t for t in required if not matches_allowlist(t, self.permissions.tools)]


class TaskNeeds(BaseModel):
    """What a task asks of the agent that takes it."""

    model_config = _FROZEN

    skills: tuple[str, ...] = ()
    """Skills the agent must have."""
    tools: tuple[str, ...] = ()
    """Tools its permissions must cover (a skill's ``required_tools``)."""
    write_access: bool = False
    """Needs write access."""
    admin_access: bool = False
    """Needs admin access."""
    tokens: int = 0
    """Expected token use; must fit ``limits.token_budget``."""
    timeout_ms: int = 0
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


def allocate(
    profiles: Sequence[AgentProfile],
    needs: TaskNeeds,
    active: Mapping[str, int] | None = None,
) -> AgentProfile | None:
    """The best profile able to take the task, or ``None``.

    Eligible profiles have the skills, permissions and spare capacity (``active`` counts live
    agents per type); among them the highest success rate wins, then the lower mean
    duration, then the least loaded (capacity-aware), then the type name.
    """
    counts = active or {}
    eligible = [p for p in profiles if not needs.reasons(p, counts.get(p.agent_type, 0))]
    if not eligible:
        return None
    return min(
        eligible,
        key=lambda p: (
            -p.history.success_rate,
            p.history.avg_duration_ms,
            counts.get(p.agent_type, 0) / p.limits.max_concurrent_tasks,
            p.agent_type,
        ),
    )
