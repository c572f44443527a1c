"""Bad input: fuzzed SKILL.md frontmatter yields a skill or a SkillValidationError, nothing else."""

from __future__ import annotations

import warnings
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stargraph.errors import SkillValidationError
from stargraph.skills.markdown import MarkdownSkill, UnknownKeyWarning, parse_skill_md

KEYS = [
    "name",
    "description",
    "version",
    "kind",
    "tools",
    "requires",
    "triggers",
    "required_tools",
    "workflow",
    "verification",
    "examples",
    "model",
    "max_steps",
    "error_budget",
    "temperature",
    "other",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 10**20),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(
        [
            "web-research",
            "1.0.0",
            "agent",
            "workflow",
            "utility",
            "choir.fs.read@1.0.0",
            "tool:choir.*",
            "#tag",
        ]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(
                ["step", "tool", "params", "input", "contains", "keyword", "tag", "check", "x"]
            ),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=12,
)
frontmatter = st.dictionaries(st.sampled_from(KEYS), values, max_size=10)


def parse(text: str) -> None:
    problems: tuple[Any, ...] = ()
    skill = None
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            skill = parse_skill_md(text, source="fuzz/SKILL.md")
        except SkillValidationError as exc:
            problems = exc.problems
    if skill is None:
        assert problems
        assert all(p.pointer.startswith("fuzz/SKILL.md#") for p in problems)
        return
    assert isinstance(skill, MarkdownSkill)
    assert all(issubclass(w.category, UnknownKeyWarning) for w in seen)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frontmatter, st.text(max_size=40))
def test_fuzzed_frontmatter_yields_only_typed_errors(data: dict[str, Any], body: str) -> None:
    parse("---\n" + yaml.safe_dump(data, allow_unicode=True) + "---\n" + body)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_fuzzed_raw_text_yields_only_typed_errors(raw: str) -> None:
    parse("---\n" + raw + "\n---\n")
    parse(raw)
