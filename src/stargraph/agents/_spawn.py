"""What a parent hands a sub-agent when it spawns it: the spawn parameters.

The seed's spawning step injects seven parameters into the new agent: ``agent_id`` (from
allocation), ``pool_assignment``, ``worktree_path`` (an isolated git worktree),
``branch_name`` (``feature/<task-slug>``), ``writeback_contract`` (what it must write before
it terminates), ``skill_refs`` (the skills it may invoke) and ``context_snapshot`` (relevant
memory, the parent's thought chain). :class:`SpawnParams` holds them as frozen, validated
data; :meth:`AgentStore.spawn <stargraph.agents.AgentStore.spawn>` checks them against the
agent's record, stores them, and the store enforces ``skill_refs`` at initialization and the
``writeback_contract`` at termination.
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import PurePath
from typing import Any, Final, Literal

from pydantic import Field, JsonValue, field_validator, model_validator

from stargraph.agents._data import AgentData
from stargraph.agents._writeback import WritebackMode

__all__ = [
    "ContextSnapshot",
    "PoolAssignment",
    "SpawnParams",
    "WritebackContract",
    "WritebackItem",
    "task_slug",
]

_SLUG: Final = re.compile(r"^[a-z][a-z0-9-]+$")
# A conservative subset of git's ref-name rules (git check-ref-format): path components of
# letters, digits, '.', '_', '-', none starting with '.' or '-', none ending in '.lock', no
# '..' anywhere. Anything git would refuse is refused here, before a worktree is made.
_REF_PART: Final = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")


class PoolAssignment(StrEnum):
    """The pool an agent works in (the seed's four)."""

    RESEARCH = "research"
    """Finding things out."""
    IMPLEMENTATION = "implementation"
    """Changing code."""
    VERIFICATION = "verification"
    """Checking that changes work."""
    REVIEW = "review"
    """Reviewing others' changes."""


WritebackItem = Literal["task_update", "thought_record", "memory_pack"]
"""The three writeback calls of the seed."""

_OPTIONAL: Final[tuple[WritebackItem, ...]] = ("memory_pack",)


class WritebackContract(AgentData):
    """What the agent must (and may) write back before it terminates.

    >>> WritebackContract().required
    ('task_update', 'thought_record')
    """

    required: tuple[WritebackItem, ...] = ("task_update", "thought_record")
    """Calls the agent owes; termination without one warns or is refused (``mode``)."""
    optional: tuple[WritebackItem, ...] = ("memory_pack",)
    """Calls that are recommended, never enforced."""
    mode: WritebackMode | None = None
    """``warn`` or ``block``; ``None`` uses the store's enforcement."""

    @model_validator(mode="before")
    @classmethod
    def _default_optional(cls, data: Any) -> Any:
        # memory_pack is optional unless the contract requires it.
        if isinstance(data, dict) and "optional" not in data:
            required = data.get("required", ())
            if isinstance(required, list | tuple):
                return {**data, "optional": tuple(i for i in _OPTIONAL if i not in required)}
        return data

    @model_validator(mode="after")
    def _disjoint(self) -> WritebackContract:
        both = sorted(set(self.required) & set(self.optional))
        if both:
            raise ValueError(f"{both} are listed as both required and optional")
        for name in ("required", "optional"):
            items: tuple[str, ...] = getattr(self, name)
            if len(set(items)) != len(items):
                raise ValueError(f"{name} lists an item twice: {list(items)}")
        return self


class ContextSnapshot(AgentData):
    """The context the parent passes down: relevant memory and its own thought chain."""

    memory: tuple[str, ...] = ()
    """Memory items relevant to the task, most relevant first."""
    thought_chain: tuple[str, ...] = ()
    """The parent's reasoning so far, oldest first."""
    data: dict[str, JsonValue] = Field(default_factory=dict)
    """Anything else, as JSON data."""


def task_slug(task_id: str) -> str:
    """A branch-safe slug of a task id: lowercase letters, digits and single dashes.

    >>> task_slug("T-42: Fix the Login bug!")
    't-42-fix-the-login-bug'
    """
    slug = re.sub(r"[^a-z0-9]+", "-", task_id.lower()).strip("-")
    return slug or "task"


class SpawnParams(AgentData):
    """The seven parameters a sub-agent is spawned with.

    >>> p = SpawnParams.for_task("a1", "T-7 Add login", pool="implementation",
    ...                          worktree_root="/work/trees", skill_refs=["archive-notes"])
    >>> (p.branch_name, p.worktree_path, p.pool_assignment.value)
    ('feature/t-7-add-login', '/work/trees/a1', 'implementation')
    """

    agent_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    """The id allocation gave the agent (letters, digits, ``.``, ``_``, ``-``: it names the
    worktree directory, so it can never climb out of the worktree root)."""
    pool_assignment: PoolAssignment
    """Its pool: research, implementation, verification or review."""
    worktree_path: str = Field(min_length=1)
    """The isolated git worktree it changes code in."""
    branch_name: str
    """Its branch, ``feature/<task-slug>`` by convention; must be a valid git branch name."""
    writeback_contract: WritebackContract = WritebackContract()
    """What it must write back before terminating."""
    skill_refs: tuple[str, ...] = ()
    """The skills (by name) it may load and invoke; no others."""
    context_snapshot: ContextSnapshot = ContextSnapshot()
    """Relevant memory and the parent's thought chain."""

    @field_validator("worktree_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if "\x00" in value:
            raise ValueError("a path cannot contain a NUL byte")
        return value

    @field_validator("branch_name")
    @classmethod
    def _branch(cls, value: str) -> str:
        parts = value.split("/")
        if (
            not value
            or ".." in value
            or any(not _REF_PART.match(p) or p.endswith((".lock", ".")) for p in parts)
        ):
            raise ValueError(
                f"{value!r} is not a valid git branch name; use e.g. 'feature/<task-slug>' "
                "(letters, digits, '.', '_', '-' and '/' between parts)"
            )
        return value

    @field_validator("skill_refs")
    @classmethod
    def _skills(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [s for s in value if not _SLUG.match(s)]
        if bad:
            raise ValueError(f"skill names must match ^[a-z][a-z0-9-]+$: {bad}")
        if len(set(value)) != len(value):
            raise ValueError(f"a skill is listed twice: {list(value)}")
        return value

    @classmethod
    def for_task(
        cls,
        agent_id: str,
        task_id: str,
        *,
        pool: PoolAssignment | str,
        worktree_root: str | PurePath,
        skill_refs: tuple[str, ...] | list[str] = (),
        writeback_contract: WritebackContract | None = None,
        context_snapshot: ContextSnapshot | None = None,
    ) -> SpawnParams:
        """The conventional parameters for ``task_id``: branch ``feature/<task-slug>`` and
        worktree ``<worktree_root>/<agent_id>``."""
        return cls.model_validate(
            {
                "agent_id": agent_id,
                "pool_assignment": pool,
                "worktree_path": str(PurePath(worktree_root) / agent_id),
                "branch_name": f"feature/{task_slug(task_id)}",
                "skill_refs": tuple(skill_refs),
                "writeback_contract": writeback_contract or WritebackContract(),
                "context_snapshot": context_snapshot or ContextSnapshot(),
            }
        )
