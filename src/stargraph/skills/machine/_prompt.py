"""``PromptBuilder``: the hierarchical prompt of a nested schema.

    prompt := master
    for level in active levels, top to bottom: level.schema_prompt + level.state_prompt
    prompt += user message
    prompt += execution context

Each part becomes one chat message (master and levels as ``system``, the user message as
``user``, the context as ``system``), in the order ``order`` gives, so the positions of the
user message and the context are configurable. A per-level mask hides a level's schema
and/or state prompt while it is an *ancestor* (the innermost level is always shown in full:
it holds the current objective). The model never sees another state's prompt or the whole
machine: only the current state of each active level.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import orjson
from pydantic import ConfigDict, Field, model_validator

from stargraph.errors import SkillValidationError
from stargraph.llm import ChatMessage
from stargraph.skills._files import SkillModel

__all__ = ["MaskPart", "PromptBuilder", "PromptLevel", "Section"]

Section = Literal["master", "levels", "user", "context"]
"""A part of the prompt, placed by :attr:`PromptBuilder.order`."""

MaskPart = Literal["schema", "state"]
"""What a mask hides of an ancestor level: its schema prompt, its state prompt, or both."""

_FROZEN: Final = ConfigDict(frozen=True, extra="forbid")
_SECTIONS: Final = ("master", "levels", "user", "context")


class PromptLevel(SkillModel):
    """One active level of the stack: a schema (or skill) and its current state."""

    model_config = _FROZEN

    schema_name: str
    """The schema's (or skill's) name."""
    schema_prompt: str = ""
    """The schema's overall objective."""
    state: str
    """The current state's name."""
    state_prompt: str = ""
    """The current state's objective."""
    mask: tuple[MaskPart, ...] = ()
    """Parts hidden while this level is an ancestor of the innermost one."""


class PromptBuilder(SkillModel):
    """Builds the messages of one LLM step from the active levels (top to bottom).

    >>> builder = PromptBuilder(master="You are careful.")
    >>> level = PromptLevel(schema_name="main", schema_prompt="Help.", state="idle",
    ...                     state_prompt="Wait for a task.")
    >>> [m.role for m in builder.messages([level], user="hi", context={"step": 1})]
    ['system', 'system', 'user', 'system']
    """

    model_config = _FROZEN

    master: str = ""
    """The master instructions, first by default."""
    order: tuple[Section, ...] = _SECTIONS
    """Where each part goes; must name each of master, levels, user, context once."""
    masks: Mapping[str, tuple[MaskPart, ...]] = Field(default_factory=dict)
    """Extra per-level masks by schema name, added to each level's own ``mask``."""

    @model_validator(mode="after")
    def _check_order(self) -> PromptBuilder:
        if sorted(self.order) != sorted(_SECTIONS):
            raise SkillValidationError.at(
                "/order",
                f"order {list(self.order)} must name each of {list(_SECTIONS)} once",
                "e.g. order=('master', 'user', 'levels', 'context')",
                subject="PromptBuilder",
            )
        return self

    def level_text(self, level: PromptLevel, *, innermost: bool) -> str:
        """One level as text: ``## Schema: <name>`` and ``### State: <name>`` sections,
        minus what its mask hides while it is an ancestor."""
        hidden = set() if innermost else {*level.mask, *self.masks.get(level.schema_name, ())}
        lines: list[str] = []
        if "schema" not in hidden:
            lines.append(f"## Schema: {level.schema_name}")
            if level.schema_prompt:
                lines.append(level.schema_prompt)
        if "state" not in hidden:
            lines.append(f"### State: {level.state}")
            if level.state_prompt:
                lines.append(level.state_prompt)
        return "\n".join(lines)

    def messages(
        self, levels: Sequence[PromptLevel], *, user: str = "", context: Any = None
    ) -> tuple[ChatMessage, ...]:
        """The chat messages: each non-empty part in :attr:`order`.

        ``context`` is rendered as sorted, indented JSON (structured, never free text).
        """
        out: list[ChatMessage] = []
        for section in self.order:
            if section == "master" and self.master:
                out.append(ChatMessage.system(self.master))
            elif section == "levels":
                for i, level in enumerate(levels):
                    text = self.level_text(level, innermost=i == len(levels) - 1)
                    if text:
                        out.append(ChatMessage.system(text))
            elif section == "user" and user:
                out.append(ChatMessage.user(user))
            elif section == "context" and context is not None:
                body = orjson.dumps(context, option=orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2)
                out.append(ChatMessage.system("## Execution context\n" + body.decode()))
        return tuple(out)


def render(messages: Sequence[ChatMessage]) -> str:
    """Messages as one text, ``[role]`` headers between them (what tests pin)."""
    return "\n\n".join(f"[{m.role}]\n{m.content or ''}" for m in messages)
