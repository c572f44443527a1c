"""Pool allocation: which agent type takes which task, under a pluggable strategy.

A profile is *eligible* for a task when it has the skills, the tool permissions, the write
and admin access the task needs, a spare slot under ``limits.max_concurrent_tasks`` and a
big enough token budget and timeout (:meth:`TaskNeeds.reasons`); a strategy never picks an
ineligible profile. Among the eligible ones a :class:`Strategy` decides, and it also decides
in which order a queue of tasks is served. The five built-in strategies (the donor's pool
strategies):

==================  =========================================  ===============================
strategy            tasks served                               agent type chosen
==================  =========================================  ===============================
``FIFO``            in submission order                        the first eligible, in pool order
``PRIORITY``        highest ``priority`` first (ties: FIFO)    the first eligible, in pool order
``ROUND_ROBIN``     in submission order                        the next eligible after the one
                                                               chosen last (wrapping around)
``LEAST_LOADED``    in submission order                        fewest live agents
``CAPACITY_AWARE``  in submission order                        the best fit: lowest load
                                                               (live / max), fewest privileges
                                                               the task does not need, then the
                                                               best history (success rate, then
                                                               mean duration)
==================  =========================================  ===============================

"Pool order" is the order the profiles are given in. A strategy of your own is a
:class:`Strategy` with a ``choose`` (and optionally an ``order``) function; pass it wherever a
:class:`PoolStrategy` is accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from pydantic import ConfigDict

from stargraph._typed import TypedModel
from stargraph.agents._profile import AgentProfile, TaskNeeds
from stargraph.errors import AgentConfigError, Problem

__all__ = [
    "STRATEGIES",
    "Allocation",
    "Candidate",
    "PoolStrategy",
    "Strategy",
    "allocate",
    "plan",
    "resolve_strategy",
]


class PoolStrategy(StrEnum):
    """The built-in pool strategies (see the module documentation for their rules)."""

    FIFO = "FIFO"
    """Tasks in submission order; the first eligible type in pool order."""
    PRIORITY = "PRIORITY"
    """Highest-priority task first; the first eligible type in pool order."""
    ROUND_ROBIN = "ROUND_ROBIN"
    """Rotate across the eligible types."""
    LEAST_LOADED = "LEAST_LOADED"
    """The type with the fewest live agents."""
    CAPACITY_AWARE = "CAPACITY_AWARE"
    """Lowest load, then the closest privilege fit, then the best history."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """An eligible profile as a strategy sees it."""

    profile: AgentProfile
    """The profile."""
    position: int
    """Its index in the pool (the order the profiles were given in)."""
    active: int
    """Its live agents now."""
    needs: TaskNeeds
    """The task being placed."""

    @property
    def load(self) -> float:
        """Live agents over ``limits.max_concurrent_tasks``."""
        return self.active / self.profile.limits.max_concurrent_tasks

    @property
    def excess_privileges(self) -> int:
        """Write / admin access the profile has but the task does not need."""
        rights = self.profile.permissions
        return int(rights.write_access and not self.needs.write_access) + int(
            rights.admin_access and not self.needs.admin_access
        )


Chooser = Callable[[Sequence[Candidate], "int | None"], Candidate]
"""``(eligible candidates in pool order, pool position of the type chosen last or None) ->
the pick``."""
Orderer = Callable[[Sequence[TaskNeeds]], list[TaskNeeds]]
"""``(tasks in submission order) -> the order to serve them in``."""


def _submitted(tasks: Sequence[TaskNeeds]) -> list[TaskNeeds]:
    return list(tasks)


@dataclass(frozen=True, slots=True)
class Strategy:
    """A pool strategy: how to pick among eligible profiles and in which order to serve a
    queue of tasks."""

    name: str
    """Shown in errors and logs."""
    choose: Chooser
    """Picks one of the (non-empty, pool-ordered) eligible candidates."""
    order: Orderer = field(default=_submitted)
    """Orders a queue of tasks (default: submission order)."""


def _first(candidates: Sequence[Candidate], last: int | None) -> Candidate:
    return candidates[0]


def _by_priority(tasks: Sequence[TaskNeeds]) -> list[TaskNeeds]:
    return sorted(tasks, key=lambda t: -t.priority)  # sorted() is stable: ties stay FIFO


def _round_robin(candidates: Sequence[Candidate], last: int | None) -> Candidate:
    # The next eligible type after the one served last, in pool order, wrapping around.
    if last is not None:
        for candidate in candidates:
            if candidate.position > last:
                return candidate
    return candidates[0]


def _least_loaded(candidates: Sequence[Candidate], last: int | None) -> Candidate:
    return min(candidates, key=lambda c: (c.active, c.position))


def _capacity_aware(candidates: Sequence[Candidate], last: int | None) -> Candidate:
    return min(
        candidates,
        key=lambda c: (
            c.load,
            c.excess_privileges,
            -c.profile.history.success_rate,
            c.profile.history.avg_duration_ms,
            c.position,
        ),
    )


STRATEGIES: Final[Mapping[PoolStrategy, Strategy]] = {
    PoolStrategy.FIFO: Strategy("FIFO", _first),
    PoolStrategy.PRIORITY: Strategy("PRIORITY", _first, _by_priority),
    PoolStrategy.ROUND_ROBIN: Strategy("ROUND_ROBIN", _round_robin),
    PoolStrategy.LEAST_LOADED: Strategy("LEAST_LOADED", _least_loaded),
    PoolStrategy.CAPACITY_AWARE: Strategy("CAPACITY_AWARE", _capacity_aware),
}
"""The built-in strategies by name."""


def resolve_strategy(strategy: PoolStrategy | str | Strategy) -> Strategy:
    """A :class:`Strategy` from a built-in name or a strategy object."""
    if isinstance(strategy, Strategy):
        return strategy
    try:
        return STRATEGIES[PoolStrategy(strategy)]
    except ValueError:
        raise AgentConfigError.at(
            "/strategy",
            f"unknown pool strategy {strategy!r}",
            f"use one of {[s.value for s in PoolStrategy]} or a Strategy object",
            subject="pool allocation",
        ) from None


class Allocation(TypedModel):
    """Where one task of a queue went."""

    typed_error = AgentConfigError

    model_config = ConfigDict(frozen=True)

    task: TaskNeeds
    """The task."""
    profile: AgentProfile | None
    """The agent type chosen, or ``None`` when no profile could take it."""
    reasons: dict[str, list[str]] = {}
    """When ``profile`` is ``None``: why each agent type could not take the task."""


def _check_pool(profiles: Sequence[AgentProfile]) -> None:
    seen: dict[str, int] = {}
    problems = []
    for i, profile in enumerate(profiles):
        if profile.agent_type in seen:
            problems.append(
                Problem(
                    f"/profiles/{i}/agent_type",
                    f"agent type {profile.agent_type!r} is in the pool twice (also at "
                    f"/profiles/{seen[profile.agent_type]})",
                    "give each profile of a pool its own agent_type",
                )
            )
        seen.setdefault(profile.agent_type, i)
    if problems:
        raise AgentConfigError(problems, subject="agent pool")


def plan(
    profiles: Sequence[AgentProfile],
    tasks: Sequence[TaskNeeds],
    active: Mapping[str, int] | None = None,
    *,
    strategy: PoolStrategy | str | Strategy = PoolStrategy.CAPACITY_AWARE,
    last: str | None = None,
) -> list[Allocation]:
    """Place a queue of ``tasks`` on the pool ``profiles``, in the order the strategy serves
    them. ``active`` counts live agents per type and ``last`` is the type chosen last (for
    ``ROUND_ROBIN``); both are updated as tasks are placed, so a type fills up and the
    rotation moves on within one plan."""
    _check_pool(profiles)
    chosen = resolve_strategy(strategy)
    counts = dict(active or {})
    out = []
    for task in chosen.order(tasks):
        candidates = [
            Candidate(p, i, counts.get(p.agent_type, 0), task)
            for i, p in enumerate(profiles)
            if not task.reasons(p, counts.get(p.agent_type, 0))
        ]
        if not candidates:
            why = {p.agent_type: task.reasons(p, counts.get(p.agent_type, 0)) for p in profiles}
            out.append(Allocation(task=task, profile=None, reasons=why))
            continue
        previous = next((i for i, p in enumerate(profiles) if p.agent_type == last), None)
        pick = chosen.choose(candidates, previous)
        if pick not in candidates:
            raise AgentConfigError.at(
                "/strategy",
                f"strategy {chosen.name!r} chose {pick.profile.agent_type!r}, which is "
                "not one of the eligible candidates it was given",
                "return one of the candidates passed to choose()",
                subject="pool allocation",
            )
        counts[pick.profile.agent_type] = pick.active + 1
        last = pick.profile.agent_type
        out.append(Allocation(task=task, profile=pick.profile))
    return out


def allocate(
    profiles: Sequence[AgentProfile],
    needs: TaskNeeds,
    active: Mapping[str, int] | None = None,
    *,
    strategy: PoolStrategy | str | Strategy = PoolStrategy.CAPACITY_AWARE,
    last: str | None = None,
) -> AgentProfile | None:
    """The profile the strategy picks for one task, or ``None`` when none is eligible.

    Eligible profiles have the skills, permissions (tools, write and admin access) and
    spare capacity (``active`` counts live agents per type) the task needs.
    """
    return plan(profiles, [needs], active, strategy=strategy, last=last)[0].profile
