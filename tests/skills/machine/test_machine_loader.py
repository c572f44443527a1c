"""SkillSpec loading and validation: rows A1-A8 and the loader fuzz test."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stargraph.errors import Problem, RegistryError, SkillValidationError
from stargraph.ir import canonical_json
from stargraph.skills.machine import (
    MachineShape,
    SkillSpecRegistry,
    StateShape,
    load_skillspec,
    parse_skillspec,
    validate_machine,
)
from stargraph.tools import sha256_hex
from tests.skills.machine.test_machine_helpers import example_doc, registry


def _problems(doc: Any, source: str = "skills/x.json", **kw: Any) -> list[str]:
    with pytest.raises(SkillValidationError) as info:
        parse_skillspec(doc, source=source, **kw)
    return [p.render() for p in info.value.problems]


def _write(directory: Path, name: str, doc: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def test_A1_missing_and_mistyped_fields_name_file_and_json_path(tmp_path: Path) -> None:
    doc = example_doc()
    del doc["description"]
    doc["max_steps"] = "20"
    doc["states"]["plan"]["transitions"][1]["to"] = 7
    path = _write(tmp_path, "broken", doc)
    with pytest.raises(SkillValidationError) as info:
        load_skillspec(path)
    rendered = [p.render() for p in info.value.problems]
    assert f"{path}#/description: missing field 'description' (fix: add 'description')" in rendered
    assert any(r.startswith(f"{path}#/max_steps: 'max_steps' must be an integer") for r in rendered)
    assert any(
        r.startswith(f"{path}#/states/plan/transitions/1/to: 'to' must be") for r in rendered
    )
    # Parsing a valid document gives the typed spec.
    spec = parse_skillspec(example_doc())
    assert (spec.name, spec.initial_state, spec.max_steps, spec.interruptible) == (
        "build_feature",
        "understand",
        20,
        True,
    )
    assert spec.states["plan"].transitions[1].on == "revise"


def test_A1_invalid_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(SkillValidationError) as info:
        load_skillspec(path)
    assert str(path) in str(info.value)


def test_A2_unknown_initial_state_and_unknown_target_name_state_event_target() -> None:
    doc = example_doc()
    doc["initial_state"] = "start"
    doc["states"]["validate"]["transitions"][1]["to"] = "deploy"
    problems = _problems(doc)
    assert any(
        p.startswith("skills/x.json#/initial_state: initial_state 'start' is not a state")
        for p in problems
    )
    assert any(
        "skills/x.json#/states/validate/transitions/1/to: state 'validate' on event 'fail' goes "
        "to unknown state 'deploy'" in p
        for p in problems
    )


def test_A3_no_terminal_terminal_with_transitions_and_dead_end() -> None:
    doc = example_doc()
    doc["states"]["done"] = {"objective": "x", "transitions": [{"on": "again", "to": "plan"}]}
    problems = _problems(doc)
    assert any("no terminal state" in p for p in problems)

    doc = example_doc()
    doc["states"]["done"]["transitions"] = [{"on": "again", "to": "plan"}]
    doc["states"]["modify"]["transitions"] = []
    problems = _problems(doc)
    assert any(
        p.startswith("skills/x.json#/states/done/transitions: terminal state 'done' declares")
        for p in problems
    )
    assert any(
        p.startswith("skills/x.json#/states/modify/transitions: state 'modify' is a dead end")
        for p in problems
    )


def test_A4_every_unreachable_state_is_listed() -> None:
    doc = example_doc()
    doc["states"]["orphan_a"] = {"objective": "a", "transitions": [{"on": "go", "to": "done"}]}
    doc["states"]["orphan_b"] = {"objective": "b", "transitions": [{"on": "go", "to": "orphan_a"}]}
    problems = _problems(doc)
    assert (
        "skills/x.json#/states: unreachable states (no path from 'understand'): "
        "['orphan_a', 'orphan_b'] (fix: add transitions into them or delete them)"
    ) in problems


def test_A5_duplicate_events_in_one_state() -> None:
    doc = example_doc()
    doc["states"]["plan"]["transitions"].append({"on": "complete", "to": "understand"})
    problems = _problems(doc)
    assert any(
        p.startswith(
            "skills/x.json#/states/plan/transitions/2/on: state 'plan' has two transitions on "
            "event 'complete'"
        )
        for p in problems
    )


def test_A6_unknown_tool_names_tool_and_state() -> None:
    doc = example_doc()
    doc["states"]["modify"]["allowed_tools"].append("choir.fs.nuke")
    problems = _problems(doc, tools=registry())
    assert problems == [
        "skills/x.json#/states/modify/allowed_tools/2: state 'modify' allows tool "
        "'choir.fs.nuke', which is not in the tool registry (fix: register the tool or "
        "remove it from allowed_tools)"
    ]
    # Names, exact ids and namespace wildcards of registered tools are fine.
    doc = example_doc()
    doc["states"]["modify"]["allowed_tools"] = ["choir.fs.read@1.0.0", "choir.fs.*"]
    assert parse_skillspec(doc, tools=registry()).states["modify"].allowed_tools[1] == "choir.fs.*"


def test_A7_strict_load_fails_with_every_problem_and_no_registry(tmp_path: Path) -> None:
    good = example_doc()
    bad_one = example_doc()
    bad_one["name"] = "bad_one"
    bad_one["initial_state"] = "nowhere"
    bad_two = example_doc()
    bad_two["name"] = "bad_two"
    del bad_two["states"]["done"]["terminal"]
    _write(tmp_path / "g", "good", good)
    one = _write(tmp_path / "g", "one", bad_one)
    two = _write(tmp_path / "g", "two", bad_two)
    built: list[SkillSpecRegistry] = []
    with pytest.raises(SkillValidationError) as info:
        built.append(SkillSpecRegistry.build(global_dir=tmp_path / "g", tools=registry()))
    assert built == []
    text = str(info.value)
    assert f"{one}#/initial_state" in text
    assert f"{two}#/states" in text

    lenient = SkillSpecRegistry.build(global_dir=tmp_path / "g", tools=registry(), strict=False)
    report = lenient.report.as_dict()
    assert report["loaded"] == ["build_feature"]
    assert [s["path"] for s in report["skipped"]] == [str(one), str(two)]
    assert (report["pruned"], report["total_on_disk"]) == ([], 3)

    with pytest.raises(RegistryError, match="frozen"):
        lenient.register(lenient["build_feature"])
    # A change is a new registry version.
    (tmp_path / "g" / "one.json").unlink()
    (tmp_path / "g" / "two.json").unlink()
    changed = example_doc()
    changed["max_steps"] = 30
    _write(tmp_path / "g", "good", changed)
    rebuilt = SkillSpecRegistry.build(global_dir=tmp_path / "g", tools=registry())
    assert rebuilt.version != lenient.version


def test_A7_registry_version_is_derived_from_the_specs_content(tmp_path: Path) -> None:
    doc = example_doc()
    first = _write(tmp_path / "one", "build", doc)
    # Another directory, another file name, other JSON formatting and key order: same specs.
    other = tmp_path / "two" / "renamed.json"
    other.parent.mkdir()
    other.write_text(json.dumps(dict(reversed(list(doc.items()))), indent=4), encoding="utf-8")
    one = SkillSpecRegistry.build(global_dir=first.parent, tools=registry())
    two = SkillSpecRegistry.build(agent_dir=other.parent, tools=registry())
    assert one.version == two.version
    expected = sha256_hex(canonical_json([spec.to_json() for spec in one]))
    assert one.version == expected
    # A changed spec is another version; changing it back gives the first version again
    # (a digest of the content, not a counter or a build timestamp).
    changed = copy.deepcopy(doc)
    changed["states"]["plan"]["objective"] = "Plan differently."
    _write(tmp_path / "one", "build", changed)
    assert SkillSpecRegistry.build(global_dir=first.parent, tools=registry()).version not in (
        one.version,
        two.version,
    )
    _write(tmp_path / "one", "build", doc)
    assert SkillSpecRegistry.build(global_dir=first.parent, tools=registry()).version == (
        one.version
    )


def test_A8_agent_scope_overrides_global_and_duplicates_in_one_scope_fail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _write(tmp_path / "global", "build", example_doc())
    agent = example_doc()
    agent["description"] = "The agent's own variant."
    agent_path = _write(tmp_path / "agent", "build", agent)
    with caplog.at_level(logging.INFO, logger="stargraph.skills.machine"):
        reg = SkillSpecRegistry.build(global_dir=tmp_path / "global", agent_dir=tmp_path / "agent")
    assert reg["build_feature"].description == "The agent's own variant."
    assert reg["build_feature"].source == str(agent_path)
    assert "overrides" in caplog.text
    assert len(reg.report.pruned) == 1

    first = _write(tmp_path / "dup", "a", example_doc())
    second = _write(tmp_path / "dup", "b", example_doc())
    with pytest.raises(RegistryError) as info:
        SkillSpecRegistry.build(global_dir=tmp_path / "dup")
    assert str(first) in str(info.value)
    assert str(second) in str(info.value)


def test_one_validator_serves_any_machine() -> None:
    lifecycle = MachineShape(
        "created",
        {
            "created": StateShape([("start", "running")]),
            "running": StateShape([("stop", "stopped"), ("crash", "crashed")]),
            "crashed": StateShape([("recover", "running")]),
            "stopped": StateShape([], terminal=True),
        },
        where="lifecycle.json#",
    )
    assert validate_machine(lifecycle) == []
    broken = MachineShape("created", {"created": StateShape([("start", "gone")])}, where="l#")
    messages = [p.message for p in validate_machine(broken)]
    assert "no terminal state: the machine can never end" in messages
    assert "state 'created' on event 'start' goes to unknown state 'gone'" in messages


# --------------------------------------------------------------------------- fuzz

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 50) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
_state_names = st.sampled_from(["understand", "plan", "modify", "validate", "done", "x", ""])
_transition = st.fixed_dictionaries(
    {"on": st.sampled_from(["complete", "fail", "finish", "", "a b"]) | _json, "to": _state_names}
)
_state = st.fixed_dictionaries(
    {},
    optional={
        "objective": st.text(max_size=10) | _json,
        "allowed_tools": st.lists(st.sampled_from(["choir.fs.read", "nope", ""]), max_size=3)
        | _json,
        "transitions": st.lists(_transition | _json, max_size=3) | _json,
        "terminal": st.booleans() | _json,
        "spawns": _json,
    },
)


def _mutate(doc: dict[str, Any], data: st.DataObject) -> Any:
    keys = list(doc)
    for _ in range(data.draw(st.integers(1, 4))):
        action = data.draw(st.sampled_from(["drop", "replace", "state", "add"]))
        key = data.draw(st.sampled_from(keys))
        if action == "drop":
            doc.pop(key, None)
        elif action == "replace":
            doc[key] = data.draw(_json)
        elif action == "add":
            doc[data.draw(st.text(max_size=6))] = data.draw(_json)
        elif isinstance(doc.get("states"), dict):
            doc["states"][data.draw(_state_names)] = data.draw(_state | _json)
    return doc if data.draw(st.integers(0, 20)) else data.draw(_json)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_loader_fuzz_gives_only_typed_errors(data: st.DataObject) -> None:
    doc = _mutate(example_doc(), data)
    problems: tuple[Problem, ...] = ()
    try:
        spec = parse_skillspec(doc, source="fuzz.json", tools=registry())
    except SkillValidationError as exc:
        problems = exc.problems
        assert problems, "an error without problems"
    else:
        assert spec.states[spec.initial_state] is not None
    assert all(p.pointer.startswith("fuzz.json#") for p in problems)
