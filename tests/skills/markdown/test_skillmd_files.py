"""SKILL.md files that are not UTF-8 or not YAML, and skill directories that cannot be read.

Issue 25 item 12 (a non-UTF-8 SkillSpec escaped as a raw exception), checked for SKILL.md too:
the error names the file and says it must be UTF-8; YAML errors give the line in the file;
a directory that cannot be listed is an error, never a silently missing skill.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from stargraph.errors import RegistryError, SkillValidationError
from stargraph.plugin import Registry, get_plugin_manager
from stargraph.skills.markdown import (
    discover_skill_dirs,
    load_skill_md,
    registry_dirs,
    skill_md_loaders,
)

GOOD = """\
---
name: {name}
description: Copy notes to the archive.
---
You archive notes.
"""


def write(root: Path, name: str, text: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "SKILL.md"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def unlistable(monkeypatch: pytest.MonkeyPatch, blocked: Path) -> None:
    """``blocked`` cannot be listed, as without read permission (tests may run as root,
    for whom ``chmod 000`` changes nothing)."""
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        if Path(os.fsdecode(path)) == blocked:
            raise PermissionError(13, "Permission denied", os.fsdecode(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)


def test_a_skill_md_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "SKILL.md"
    path.write_bytes(b"---\nname: caf\xe9\n---\nbody\n")
    with pytest.raises(SkillValidationError) as info:
        load_skill_md(path)
    assert str(info.value) == (
        f"SKILL.md {path} is invalid: {path}#: the file is not UTF-8: byte 0xe9 at offset 13 "
        "(invalid continuation byte) (fix: SKILL.md files must be UTF-8 text; save the file "
        "as UTF-8)"
    )


def test_yaml_errors_give_the_line_and_column_in_the_file(tmp_path: Path) -> None:
    front = write(
        tmp_path,
        "front",
        """\
        ---
        name: front
        description: [unclosed
        tools: []
        ---
        body
        """,
    )
    with pytest.raises(SkillValidationError) as info:
        load_skill_md(front)
    assert [p.render() for p in info.value.problems] == [
        f"{front}#: frontmatter is not valid YAML at line 4, column 6: expected ',' or ']', "
        "but got ':' (while parsing a flow sequence) (fix: fix the YAML)"
    ]
    donor = write(
        tmp_path,
        "donor",
        """\
        # donor

        Does things.

        ## Tools

        - [choir.fs.read@1.0.0
        """,
    )
    with pytest.raises(SkillValidationError) as info:
        load_skill_md(donor)
    assert [p.render() for p in info.value.problems] == [
        f"{donor}#/tools: section is not valid YAML at line 8, column 1: expected ',' or ']', "
        "but got '<stream end>' (while parsing a flow sequence) (fix: fix it)"
    ]


def test_a_references_directory_that_cannot_be_listed_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "archive", GOOD.format(name="archive"))
    (path.parent / "references" / "deep").mkdir(parents=True)
    (path.parent / "references" / "a.md").write_text("a")
    (path.parent / "references" / "deep" / "b.md").write_text("b")
    assert load_skill_md(path).references == ("references/a.md", "references/deep/b.md")
    unlistable(monkeypatch, path.parent / "references" / "deep")
    with pytest.raises(SkillValidationError) as info:
        load_skill_md(path)
    assert [p.render() for p in info.value.problems] == [
        f"{path.parent / 'references' / 'deep'}: cannot list the skill's references: "
        "Permission denied (fix: make the directory readable (chmod u+rx) or remove it)"
    ]


def test_a_skill_directory_that_cannot_be_listed_is_an_error_not_missing_skills(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path, "archive", GOOD.format(name="archive"))
    write(tmp_path, "hidden", GOOD.format(name="hidden"))
    (tmp_path / "latin").mkdir()
    (tmp_path / "latin" / "SKILL.md").write_bytes(b"---\nname: latin\n---\n\xff\n")
    unlistable(monkeypatch, tmp_path / "hidden")
    pm = get_plugin_manager(entry_points=False)
    with pytest.raises(RegistryError) as info:
        Registry.build(pm, agent_dir=tmp_path, skill_loaders=skill_md_loaders())
    rendered = [p.render() for p in info.value.problems]
    assert rendered == [
        f"{tmp_path / 'hidden'}: cannot list the skill directory: Permission denied (fix: "
        "make it readable (chmod u+rx) or remove it)",
        f"{tmp_path / 'latin' / 'SKILL.md'}: {tmp_path / 'latin' / 'SKILL.md'}#: the file is "
        "not UTF-8: byte 0xff at offset 20 (invalid start byte) (fix: SKILL.md files must be "
        "UTF-8 text; save the file as UTF-8)",
    ]
    lenient = Registry.build(pm, agent_dir=tmp_path, skill_loaders=skill_md_loaders(), strict=False)
    assert "archive" in lenient.skills
    assert sorted(lenient.report.skipped) == sorted(
        [str(tmp_path / "hidden"), str(tmp_path / "latin" / "SKILL.md")]
    )
    assert str(tmp_path / "hidden") in caplog.text
    # A directory that does not exist holds no skills, as before.
    assert Registry.build(pm, agent_dir=tmp_path / "missing", skill_loaders=skill_md_loaders())


def test_discovery_names_a_skill_directory_it_cannot_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "home" / ".stargraph" / "skills"
    real = Path.is_dir

    def is_dir(self: Path) -> bool:
        if self == blocked:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "is_dir", is_dir)
    monkeypatch.delenv("STARGRAPH_SKILLS_DIR", raising=False)
    for find in (discover_skill_dirs, registry_dirs):
        with pytest.raises(SkillValidationError) as info:
            find(cwd=tmp_path, home=tmp_path / "home")
        assert [p.render() for p in info.value.problems] == [
            f"{blocked}: cannot check the skill directory: Permission denied (fix: make its "
            "parent directories searchable (chmod u+x), or point STARGRAPH_SKILLS_DIR elsewhere)"
        ]
