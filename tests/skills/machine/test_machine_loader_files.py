"""SkillSpec files that are not UTF-8, not JSON, or in a directory that cannot be listed.

Issue 25 item 12: a non-UTF-8 SkillSpec escaped as a raw ``UnicodeDecodeError``, and an
unreadable skill directory was silently empty.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from stargraph.errors import SkillValidationError
from stargraph.skills.machine import SkillSpecRegistry, load_skillspec
from tests.skills.machine.test_machine_helpers import example_doc


def unlistable(monkeypatch: pytest.MonkeyPatch, blocked: Path) -> None:
    """``blocked`` cannot be listed, as without read permission (tests may run as root,
    for whom ``chmod 000`` changes nothing)."""
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        if Path(os.fsdecode(path)) == blocked:
            raise PermissionError(13, "Permission denied", os.fsdecode(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)


def test_a_skillspec_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "latin.json"
    path.write_bytes(b'{"name": "caf\xe9"}')
    with pytest.raises(SkillValidationError) as info:
        load_skillspec(path)
    assert str(info.value) == (
        f"SkillSpec {path} is invalid: {path}#: the file is not UTF-8: byte 0xe9 at offset "
        "13 (invalid continuation byte) (fix: SkillSpec files must be UTF-8 JSON; save the "
        "file as UTF-8)"
    )
    utf16 = tmp_path / "utf16.json"
    utf16.write_bytes(b"\xff\xfe{\x00}\x00")
    with pytest.raises(SkillValidationError, match="byte 0xff at offset 0"):
        load_skillspec(utf16)


def test_a_skillspec_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(example_doc()).encode())
    assert load_skillspec(path).name == "build_feature"


def test_invalid_json_names_the_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"name": "x",\n  "states": }\n', encoding="utf-8")
    with pytest.raises(SkillValidationError) as info:
        load_skillspec(path)
    assert str(info.value) == (
        f"SkillSpec {path} is invalid: {path}#: invalid JSON (line 2): Expecting value: "
        "line 2 column 13 (char 26) (fix: fix the JSON)"
    )


def test_a_registry_names_a_non_utf8_file_and_loads_the_rest_when_lenient(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "skills"
    folder.mkdir()
    (folder / "good.json").write_text(json.dumps(example_doc()), encoding="utf-8")
    (folder / "bad.json").write_bytes(b"\xff\xfe")
    with pytest.raises(SkillValidationError, match=r"bad\.json#: the file is not UTF-8"):
        SkillSpecRegistry.build(agent_dir=folder)
    lenient = SkillSpecRegistry.build(agent_dir=folder, strict=False)
    assert lenient.names == ("build_feature",)
    assert [s.path for s in lenient.report.skipped] == [str(folder / "bad.json")]


def test_an_unlistable_skill_directory_is_an_error_not_an_empty_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "skills"
    folder.mkdir()
    (folder / "good.json").write_text(json.dumps(example_doc()), encoding="utf-8")
    unlistable(monkeypatch, folder)
    with pytest.raises(SkillValidationError) as info:
        SkillSpecRegistry.build(agent_dir=folder)
    assert [p.render() for p in info.value.problems] == [
        f"{folder}: cannot list the skill directory: Permission denied (fix: make it "
        "readable (chmod u+rx) or remove it)"
    ]
    lenient = SkillSpecRegistry.build(agent_dir=folder, strict=False)
    assert lenient.names == ()
    assert [s.path for s in lenient.report.skipped] == [str(folder)]
    # A directory that does not exist still just holds no skills.
    assert SkillSpecRegistry.build(agent_dir=tmp_path / "missing").names == ()
