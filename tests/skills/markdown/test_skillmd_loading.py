"""SKILL.md loading (D1, D2, D4): frontmatter, donor sections, discovery, registry scans."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pluggy
import pytest

from stargraph.errors import RegistryError, SkillValidationError
from stargraph.plugin import Registry, get_plugin_manager
from stargraph.skills.markdown import (
    MarkdownSkill,
    Trigger,
    UnknownKeyWarning,
    discover_skill_dirs,
    load_skill_md,
    parse_skill_md,
    registry_dirs,
    skill_md_loaders,
)

GOOD = """\
---
name: {name}
description: Copy notes to the archive.
version: 1.2.0
tools: [choir.fs.read@1.0.0, choir.fs.write@1.0.0]
triggers: [archive notes, "#notes", "tool:choir.fs.*"]
required_tools: [choir.fs.read, choir.fs.write]
workflow:
  - {{step: read, tool: choir.fs.read@1.0.0, params: {{path: notes.txt}}}}
verification:
  - the notes were read
---
You archive notes.
"""


def write(root: Path, name: str, text: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "SKILL.md"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def pm() -> pluggy.PluginManager:
    return get_plugin_manager(entry_points=False)


def test_D1_frontmatter_fields_unknown_keys_and_references(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "archive",
        GOOD.format(name="archive").replace(
            "version: 1.2.0", "version: 1.2.0\nowner: ops-team\ncolour: blue"
        ),
    )
    (path.parent / "references").mkdir()
    (path.parent / "references" / "tools.md").write_text("x")
    with pytest.warns(UnknownKeyWarning, match=r"unknown frontmatter keys \['colour', 'owner'\]"):
        skill = load_skill_md(path)
    assert isinstance(skill, MarkdownSkill)
    assert (skill.name, skill.version, skill.kind) == ("archive", "1.2.0", "workflow")
    assert skill.required_tools == ("choir.fs.read", "choir.fs.write")
    assert [s.tool for s in skill.workflow] == ["choir.fs.read@1.0.0"]
    assert skill.workflow[0].params == {"path": "notes.txt"}
    assert skill.verification == ("the notes were read",)
    assert skill.triggers == (
        Trigger(kind="keyword", value="archive notes"),
        Trigger(kind="tag", value="notes"),
        Trigger(kind="tool", value="choir.fs.*"),
    )
    assert skill.references == ("references/tools.md",)
    assert skill.extra == {"owner": "ops-team", "colour": "blue"}
    assert skill.system_prompt == "You archive notes."
    assert skill.source == str(path)


def test_D1_every_problem_named_with_file_and_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "bad",
        """\
        ---
        name: Bad_Name
        version: one
        kind: wizard
        tools: [nope]
        workflow:
          - {step: s, tool: 12, params: [1]}
        ---
        body
        """,
    )
    with pytest.raises(SkillValidationError) as info:
        load_skill_md(path)
    pointers = [p.pointer for p in info.value.problems]
    assert pointers == [
        f"{path}#/description",
        f"{path}#/name",
        f"{path}#/version",
        f"{path}#/kind",
        f"{path}#/tools/0",
        f"{path}#/workflow/0/tool",
        f"{path}#/workflow/0/params",
    ]
    assert "does not match ^[a-z][a-z0-9-]+$" in str(info.value)
    assert str(info.value).startswith(f"SKILL.md {path} has 7 problems")


@pytest.mark.parametrize("layout", ["frontmatter", "donor"])
def test_D1_a_name_with_an_underscore_is_refused_naming_file_name_and_fix(
    tmp_path: Path, layout: str
) -> None:
    text = (
        "---\nname: note_taker\ndescription: Takes notes.\n---\nbody\n"
        if layout == "frontmatter"
        else "# note_taker\n\nTakes notes.\n"
    )
    path = write(tmp_path, "note_taker", text)
    with pytest.raises(SkillValidationError) as info:
        load_skill_md(path)
    assert [(p.pointer, p.message, p.hint) for p in info.value.problems] == [
        (
            f"{path}#/name",
            "name 'note_taker' does not match ^[a-z][a-z0-9-]+$ ('_' is not allowed: use '-')",
            "rename it 'note-taker' (lowercase letters, digits and dashes)",
        )
    ]
    assert str(path) in str(info.value)


def test_D1_donor_section_format() -> None:
    text = textwrap.dedent(
        """\
        # repo-audit

        Audits a repository and reports findings.

        ## Triggers
        - audit the repo
        - "#audit"

        ## Required tools
        - choir.fs.read

        ## Workflow
        - step: read the readme
          tool: choir.fs.read@1.0.0
          params: {path: README.md}

        ## Verification
        - the readme was read

        ## Guidance
        Be thorough.
        """
    )
    skill = parse_skill_md(text, source="donor/SKILL.md")
    assert skill.name == "repo-audit"
    assert skill.description == "Audits a repository and reports findings."
    assert skill.required_tools == ("choir.fs.read",)
    assert skill.workflow[0].params == {"path": "README.md"}
    assert skill.kind == "workflow"
    assert skill.system_prompt is not None
    assert "Be thorough." in skill.system_prompt


def test_D1_unterminated_and_non_mapping_frontmatter() -> None:
    with pytest.raises(SkillValidationError, match="no closing '---'"):
        parse_skill_md("---\nname: x\n")
    with pytest.raises(SkillValidationError, match="must be a mapping"):
        parse_skill_md("---\n- a\n---\n")
    with pytest.raises(SkillValidationError, match="not valid YAML"):
        parse_skill_md("---\nname: [\n---\n")


def make_tree(root: Path, good: int, broken: int) -> list[Path]:
    bad_frontmatter = [
        "---\nname: UPPER\ndescription: d\nkind: agent\n---\n",  # bad name
        "---\nname: no-desc\nkind: agent\n---\n",  # missing description
        "---\nname: [oops\n---\n",  # YAML error
        "---\nname: bad-version\ndescription: d\nversion: v1\nkind: agent\n---\n",
        "---\nname: bad-step\ndescription: d\nworkflow: [{tool: 5}]\n---\n",
    ]
    for i in range(good):
        write(root, f"good-{i:02d}", GOOD.format(name=f"good-{i:02d}"))
    return [
        write(root, f"broken-{i}", bad_frontmatter[i % len(bad_frontmatter)]) for i in range(broken)
    ]


def test_D2_strict_load_lists_all_five_problems(tmp_path: Path) -> None:
    broken = make_tree(tmp_path, 45, 5)
    with pytest.raises(RegistryError) as info:
        Registry.build(pm(), global_dir=tmp_path, skill_loaders=skill_md_loaders(), strict=True)
    problems = info.value.problems
    files = sorted({p.pointer.split(": ", 1)[0] for p in problems})
    assert files == sorted(str(p) for p in broken)
    assert len(problems) == 5


def test_D2_lenient_load_reports_counts_and_loads_45(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broken = make_tree(tmp_path, 45, 5)
    registry = Registry.build(
        pm(), global_dir=tmp_path, skill_loaders=skill_md_loaders(), strict=False
    )
    report = registry.report
    assert (report.loaded, len(report.skipped), report.total_on_disk) == (45, 5, 50)
    assert report.pruned == ()
    assert sorted(report.skipped) == sorted(str(p) for p in broken)
    assert len([n for n in registry.skills if n.startswith("good-")]) == 45
    assert all(str(p) in caplog.text for p in broken)  # each skip logged with its path


def test_D4_registry_match_keywords_tags_tool_patterns(tmp_path: Path) -> None:
    write(tmp_path, "archive", GOOD.format(name="archive"))
    write(
        tmp_path,
        "web",
        """\
        ---
        name: web
        description: Web research.
        kind: agent
        tools: [choir.http.fetch@1.0.0]
        triggers: [{keyword: research}, {tag: web}, {tool: "choir.http.*"}]
        ---
        Research.
        """,
    )
    registry = Registry.build(pm(), agent_dir=tmp_path, skill_loaders=skill_md_loaders())

    def names(task: str) -> list[str]:
        return sorted(s.name for s in registry.match(task))

    assert names("Please ARCHIVE NOTES today") == ["archive"]
    assert names("something for #notes and #web") == ["archive", "web"]
    assert names("call choir.http.fetch@1.0.0 on it") == ["web"]
    assert names("do some research") == ["web"]
    assert names("researcher archived notebooks") == []  # whole words, exact tags
    assert names("#notesy") == []


def test_discovery_order_and_registry_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env, cwd, home = tmp_path / "env", tmp_path / "proj", tmp_path / "home"
    for folder in (env, cwd / "skills", home / ".stargraph" / "skills"):
        folder.mkdir(parents=True)
    monkeypatch.delenv("STARGRAPH_SKILLS_DIR", raising=False)
    assert discover_skill_dirs(cwd=cwd, home=home) == [cwd / "skills", home / ".stargraph/skills"]
    assert registry_dirs(cwd=cwd, home=home) == {
        "global_dir": home / ".stargraph/skills",
        "agent_dir": cwd / "skills",
    }
    monkeypatch.setenv("STARGRAPH_SKILLS_DIR", str(env))
    assert discover_skill_dirs(cwd=cwd, home=home)[0] == env
    assert registry_dirs(cwd=cwd, home=home)["global_dir"] == env
