"""``skill_list(search, capability)``: the skill registry's listing, tagged with the six-tier
taxonomy.

A skill's tier is one of its ``tags`` (:class:`~stargraph.skills.SkillTier`: PM &
orchestration, task & roadmap, GSD & execution, audit & proof, infrastructure,
integration). :func:`skill_list` lists skills (a :class:`~stargraph.plugin.Registry`, a
mapping or any iterable of skills) as :class:`SkillListing` rows, filtered by free-text
``search`` and by ``capability`` (a tier or any tag).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ConfigDict

from stargraph._typed import TypedModel
from stargraph.errors import AgentConfigError
from stargraph.skills import TAG, SkillKind, SkillTier

__all__ = ["SkillListing", "SkillTier", "skill_list"]


class SkillListing(TypedModel):
    """One row of :func:`skill_list`."""

    typed_error = AgentConfigError

    model_config = ConfigDict(frozen=True)

    name: str
    """The skill's name."""
    version: str
    """Its version."""
    kind: SkillKind
    """agent, workflow or utility."""
    description: str
    """What it does."""
    tier: SkillTier | None
    """Its tier in the taxonomy, if it declares one."""
    tags: tuple[str, ...]
    """Every tag (the tier among them)."""
    tools: tuple[str, ...]
    """The tools it declares."""


def _skills(source: Any) -> Iterable[Any]:
    skills = getattr(source, "skills", source)  # a Registry: its skills mapping
    return skills.values() if isinstance(skills, Mapping) else skills


def skill_list(
    skills: Any, search: str | None = None, capability: SkillTier | str | None = None
) -> list[SkillListing]:
    """The skills matching ``search`` and ``capability``, sorted by name.

    ``search`` matches when every word of it occurs (case-insensitively) in the skill's
    name, description or tags. ``capability`` is a tier (``SkillTier`` or its value, e.g.
    ``"audit-proof"``) or any tag; a skill matches when it carries that tag.

    >>> from pydantic import BaseModel
    >>> from stargraph.skills import Skill
    >>> class Out(BaseModel):
    ...     report: str = ""
    >>> proof = Skill(name="audit-proof", version="1.0.0", kind="workflow", subgraph=None,
    ...               description="Seal the audit trail", state_schema=Out,
    ...               tags=("audit-proof", "merkle"))
    >>> [s.name for s in skill_list([proof], capability=SkillTier.AUDIT_PROOF)]
    ['audit-proof']
    >>> skill_list([proof], search="seal trail")[0].tier
    <SkillTier.AUDIT_PROOF: 'audit-proof'>
    """
    wanted = None
    if capability is not None:
        wanted = str(capability.value if isinstance(capability, SkillTier) else capability)
        if not TAG.match(wanted):
            raise AgentConfigError.at(
                "/capability",
                f"{capability!r} is not a tier or tag",
                f"use a tier ({[t.value for t in SkillTier]}) or a lowercase tag",
                subject="skill_list",
            )
    words = (search or "").lower().split()
    out = []
    for skill in _skills(skills):
        tags = tuple(getattr(skill, "tags", ()))
        if wanted is not None and wanted not in tags:
            continue
        text = " ".join((skill.name, skill.description, *tags)).lower()
        if not all(word in text for word in words):
            continue
        out.append(
            SkillListing(
                name=skill.name,
                version=skill.version,
                kind=skill.kind,
                description=skill.description,
                tier=getattr(skill, "tier", None),
                tags=tags,
                tools=tuple(skill.tools),
            )
        )
    return sorted(out, key=lambda row: row.name)
