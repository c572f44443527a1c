"""Every loader and authoring model raises only errors of the one tree, on any input.

Each property feeds a loader fuzzed input (arbitrary JSON values, plausible documents with a
field replaced by a wrong type, huge integers, lone surrogates, non-finite floats) and
accepts exactly two outcomes: a loaded object, or a :class:`~stargraph.errors.StargraphError`
whose message names the culprit (the file it was read from, or the field). Anything else
escaping (pydantic's ``ValidationError``, ``SchemaError``, ``TypeError``, rfc8785's
``IntegerDomainError`` ...) fails the property with its example.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stargraph.errors import StargraphError

FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# Integers around the edges of what JSON parsers and RFC 8785 can carry, and far beyond.
EDGE_INTS = st.sampled_from(
    [0, -1, 2**31, 2**53 - 1, 2**53, 2**53 + 1, -(2**53) - 1, 2**63, 2**64 + 1, 10**30]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    EDGE_INTS,
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    # An astral character: JSON writes it as a surrogate pair, which YAML decodes as two
    # lone surrogates.
    st.sampled_from(["\ud800", "a\udfffb", "\U00010000", "", "x" * 300, "@", "ns.x@1.0.0"]),
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def mutate(document: Any, data: st.DataObject) -> Any:
    """``document`` with one value somewhere replaced, one key dropped, or one key added."""
    paths: list[tuple[Any, ...]] = [()]

    def walk(node: Any, here: tuple[Any, ...]) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            paths.append((*here, key))
            if isinstance(value, dict | list):
                walk(value, (*here, key))

    walk(document, ())
    path = data.draw(st.sampled_from(paths))
    copy = json.loads(json.dumps(document))
    if not path:
        return data.draw(JSON)
    parent = copy
    for key in path[:-1]:
        parent = parent[key]
    action = data.draw(st.sampled_from(["replace", "drop", "add"]))
    if action == "replace":
        parent[path[-1]] = data.draw(JSON)
    elif action == "drop":
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[data.draw(st.text(max_size=6))] = data.draw(JSON)
    else:
        parent.append(data.draw(JSON))
    return copy


def dumps(value: Any) -> str:
    """JSON text for any drawn value: lone surrogates escaped, NaN and Infinity written the
    way Python writes them (not JSON: the loader must refuse them)."""
    return json.dumps(value, ensure_ascii=True)


def typed_only(call: Callable[[], object], *names: str) -> None:
    """Run ``call``; it may succeed or raise a stargraph error naming one of ``names``."""
    message = ""
    try:
        call()
    except StargraphError as exc:
        message = str(exc) or f"<{type(exc).__name__} with an empty message>"
    if message:
        assert not names or any(name in message for name in names), message


@contextmanager
def workdir() -> Iterator[Path]:
    """A fresh directory per example (pytest's tmp_path is one per test, not per example)."""
    path = Path(tempfile.mkdtemp(prefix="sg-fuzz-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# --------------------------------------------------------------------------- tool manifests

MANIFEST: dict[str, Any] = {
    "llm": {
        "name": "acme.fuzz",
        "description": "A fuzzed tool.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "n": {"type": "integer", "maximum": 9}},
            "required": ["path"],
        },
    },
    "runtime": {
        "exec_path": "run",
        "timeout_ms": 1000,
        "locks": [{"resource": "workspace", "mode": "X"}, "file:{path}:S"],
        "network": False,
        "secret_resources": ["token"],
        "side_effect": "write",
        "idempotent": False,
        "version": "1.0.0",
    },
}


def write_manifest(directory: Path, name: str, text: str) -> Path:
    executable = directory / "run"
    if not executable.exists():
        executable.write_text("#!/bin/sh\necho '{}'\n")
        executable.chmod(executable.stat().st_mode | stat.S_IXUSR)
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


@FUZZ
@given(st.data())
def test_issue43_tool_manifest_loader_raises_only_typed_errors(data: st.DataObject) -> None:
    from stargraph.tools import load_manifest

    document = mutate(MANIFEST, data)
    with workdir() as directory:
        path = write_manifest(directory, "acme.json", dumps(document))
        typed_only(lambda: load_manifest(path), str(path))


@FUZZ
@given(st.data())
def test_issue43_non_strict_tool_registry_skips_any_bad_manifest(data: st.DataObject) -> None:
    from stargraph.tools import ToolRegistry

    bad = mutate(MANIFEST, data)
    with workdir() as directory:
        write_manifest(directory, "a_bad.json", dumps(bad))
        good = {**MANIFEST, "llm": {**MANIFEST["llm"], "name": "acme.good"}}
        write_manifest(directory, "b_good.json", dumps(good))
        registry = ToolRegistry.build(agent_dir=directory, strict=False)
        assert "acme.good" in registry
        skipped = [s.path for s in registry.report.skipped]
        # The mutated manifest is loaded, or skipped and reported: never lost, never fatal.
        assert (len(registry) == 2) != (skipped == [str(directory / "a_bad.json")])


# --------------------------------------------------------------------------- SkillSpec

SKILLSPEC: dict[str, Any] = {
    "name": "fuzz",
    "description": "A fuzzed skill.",
    "initial_state": "work",
    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
    "output_schema": {"type": "object"},
    "states": {
        "work": {
            "objective": "Work.",
            "allowed_tools": ["acme.fuzz"],
            "transitions": [{"on": "go", "to": "done"}],
        },
        "done": {"objective": "Done.", "terminal": True},
    },
    "max_steps": 5,
    "interruptible": True,
}


@FUZZ
@given(st.data())
def test_issue43_skillspec_parser_raises_only_typed_errors(data: st.DataObject) -> None:
    from stargraph.skills.machine import parse_skillspec, skillspec_graph

    document = mutate(SKILLSPEC, data)

    def load_and_compile() -> None:
        # What is checked is what runs: a spec that loads must also compile to IR.
        skillspec_graph(parse_skillspec(document, source="fuzz.json")).to_ir()

    typed_only(load_and_compile, "fuzz.json")


@FUZZ
@given(st.data())
def test_issue43_skillspec_file_loader_raises_only_typed_errors(data: st.DataObject) -> None:
    from stargraph.skills.machine import SkillSpecRegistry, load_skillspec

    document = mutate(SKILLSPEC, data)
    with workdir() as directory:
        path = directory / "fuzz.json"
        path.write_text(dumps(document), encoding="utf-8")
        typed_only(lambda: load_skillspec(path), str(path))
        registry = SkillSpecRegistry.build(agent_dir=directory, strict=False)
        assert len(registry) + len(registry.report.skipped) == 1


# --------------------------------------------------------------------------- SKILL.md

SKILL_MD: dict[str, Any] = {
    "name": "save-notes",
    "description": "Copy the notes.",
    "version": "1.0.0",
    "kind": "workflow",
    "tools": ["choir.fs.read@1.0.0"],
    "triggers": ["archive notes", "tool:choir.fs.*"],
    "workflow": [{"step": "read", "tool": "choir.fs.read@1.0.0", "params": {"path": "n"}}],
    "verification": ["it exists", {"check": "read", "tool": "choir.fs.read@1.0.0"}],
}


@FUZZ
@given(st.data())
def test_issue43_skill_md_parser_raises_only_typed_errors(data: st.DataObject) -> None:
    import warnings

    from stargraph.skills.markdown import parse_skill_md

    # JSON is YAML: the fuzzed frontmatter is written as JSON flow syntax.
    document = mutate(SKILL_MD, data)
    text = f"---\n{dumps(document)}\n---\nThe body.\n"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        typed_only(lambda: parse_skill_md(text, source="SKILL.md"), "SKILL.md")


# --------------------------------------------------------------------------- IR


def ir_document() -> dict[str, Any]:
    from pydantic import BaseModel

    from stargraph.graph import END, START, Graph

    class S(BaseModel):
        x: int = 0

    graph = Graph("g", state=S).with_node("a", _step).with_edge(START, "a").with_edge("a", END)
    return dict(json.loads(graph.to_ir().to_json()))


def _step(state: Any) -> dict[str, Any]:
    return {"x": 1}


IR_DOCUMENT = ir_document()


@FUZZ
@given(st.data())
def test_issue43_ir_from_json_raises_only_typed_errors(data: st.DataObject) -> None:
    from stargraph.ir import GraphIR

    document = mutate(IR_DOCUMENT, data)
    typed_only(lambda: GraphIR.from_json(dumps(document), source="g.json"), "g.json")


# --------------------------------------------------------------------------- cassettes


def cassette_document(tmp: Path) -> dict[str, Any]:
    from pydantic import BaseModel

    from stargraph.checkpoint import MemoryStore
    from stargraph.graph import END, START, Graph
    from stargraph.replay import export_cassette

    class S(BaseModel):
        x: int = 0

    store = MemoryStore()
    graph = Graph("g", state=S).with_node("a", _step).with_edge(START, "a").with_edge("a", END)
    graph.compile(store=store).invoke({}, run_id="r")
    path = tmp / "c.json"
    export_cassette(store, "r", path)
    return dict(json.loads(path.read_text()))


@FUZZ
@given(st.data())
def test_issue43_cassette_loader_raises_only_typed_errors(data: st.DataObject) -> None:
    from stargraph.ir import content_hash
    from stargraph.replay import load_cassette

    with workdir() as directory:
        if data.draw(st.booleans()):
            document = mutate(CASSETTE, data)
        else:
            # Past the checksum: a consistent edit of the recording (what a forger, or a
            # recorder with a bug, would write), so the content itself is validated.
            document = {**CASSETTE, "recording": mutate(CASSETTE["recording"], data)}
            # A value canonical JSON refuses keeps the old checksum.
            with suppress(TypeError, ValueError):
                document["checksum"] = content_hash(document["recording"])
        path = directory / "fuzzed.json"
        path.write_text(dumps(document), encoding="utf-8")
        typed_only(lambda: load_cassette(path, key=b"k" if data.draw(st.booleans()) else None))


with tempfile.TemporaryDirectory() as _tmp:
    os.environ.pop("STARGRAPH_CASSETTE_KEY", None)
    CASSETTE = cassette_document(Path(_tmp))


# --------------------------------------------------------------------------- authoring models


def authoring_models() -> list[type[Any]]:
    """The public models users build graphs, skills and tools from."""
    from stargraph import RetryPolicy
    from stargraph.ir import (
        ConditionalEdgeIR,
        FieldIR,
        FunctionNodeIR,
        GraphIR,
        RulePackIR,
        StateSchemaIR,
        StaticEdgeIR,
        SubgraphNodeIR,
    )
    from stargraph.skills import Example, NestingProfile
    from stargraph.skills.machine import (
        PromptBuilder,
        PromptLevel,
        Schema,
        SchemaLibrary,
        SchemaState,
        SchemaTransition,
        SkillSpec,
        Spawn,
        StateSpec,
        Transition,
    )
    from stargraph.skills.markdown import Check, Trigger, WorkflowStep
    from stargraph.tools import ToolSpec

    return [
        RetryPolicy,
        ConditionalEdgeIR,
        FieldIR,
        FunctionNodeIR,
        GraphIR,
        RulePackIR,
        StateSchemaIR,
        StaticEdgeIR,
        SubgraphNodeIR,
        Example,
        NestingProfile,
        PromptBuilder,
        PromptLevel,
        Schema,
        SchemaLibrary,
        SchemaState,
        SchemaTransition,
        SkillSpec,
        Spawn,
        StateSpec,
        Transition,
        Check,
        Trigger,
        WorkflowStep,
        ToolSpec,
    ]


MODELS = authoring_models()


@FUZZ
@given(
    st.sampled_from(MODELS),
    st.dictionaries(st.sampled_from(["name", "id", "kind", "order", "max_steps", "x"]), JSON),
    st.sampled_from(["init", "validate", "json"]),
)
def test_issue43_authoring_models_raise_only_typed_errors(
    model: type[Any], fields: dict[str, Any], how: str
) -> None:
    # Real field names too, so that values reach the validators, not only "missing".
    names = sorted(model.model_fields)
    fields = {names[hash(k) % len(names)] if k == "x" else k: v for k, v in fields.items()}
    if how == "init":
        typed_only(lambda: model(**fields))
    elif how == "validate":
        typed_only(lambda: model.model_validate(fields))
    else:
        typed_only(lambda: model.model_validate_json(dumps(fields)))


# --------------------------------------------------------------------------- regressions


def test_issue43_manifest_with_a_null_input_schema_names_the_field(tmp_path: Path) -> None:
    import pytest

    from stargraph.errors import ToolSpecError
    from stargraph.tools import load_manifest

    document = {**MANIFEST, "llm": {**MANIFEST["llm"], "input_schema": None}}
    path = write_manifest(tmp_path, "acme.json", dumps(document))
    with pytest.raises(ToolSpecError, match=r"acme\.json#/llm/input_schema: the input schema"):
        load_manifest(path)


def test_issue43_manifest_schema_pydantic_cannot_compile_is_a_tool_spec_error(
    tmp_path: Path,
) -> None:
    import pytest

    from stargraph.errors import ToolSpecError
    from stargraph.tools import load_manifest

    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "maximum": "nine"},
            "b": {"enum": [{"x": 1}]},
            "c": {"type": []},
            "d": {"type": "string", "pattern": "(?<=x)y"},
        },
        "required": ["a"],
    }
    document = {
        "llm": {**MANIFEST["llm"], "input_schema": schema},
        "runtime": {**MANIFEST["runtime"], "locks": [], "secret_resources": 3.5},
    }
    path = write_manifest(tmp_path, "acme.json", dumps(document))
    with pytest.raises(ToolSpecError) as caught:
        load_manifest(path)
    pointers = {p.pointer.partition("#")[2] for p in caught.value.problems}
    assert {
        "/llm/input_schema/properties/a/maximum",
        "/llm/input_schema/properties/b/enum",
        "/llm/input_schema/properties/c/type",
        "/llm/input_schema",  # the pattern: the object's validator does not compile
        "/runtime/secret_resources",
    } <= pointers, pointers


def test_issue43_one_bad_manifest_does_not_abort_a_non_strict_build(tmp_path: Path) -> None:
    import pytest

    from stargraph.errors import ToolSpecError
    from stargraph.tools import ToolRegistry

    bad = {**MANIFEST, "llm": {**MANIFEST["llm"], "input_schema": None}}
    write_manifest(tmp_path, "a_bad.json", dumps(bad))
    write_manifest(tmp_path, "b_good.json", dumps(MANIFEST))
    registry = ToolRegistry.build(agent_dir=tmp_path, strict=False)
    assert registry.ids == ("acme.fuzz@1.0.0",)
    [skipped] = registry.report.skipped
    assert skipped.path == str(tmp_path / "a_bad.json")
    assert "input_schema" in skipped.reasons[0]
    with pytest.raises(ToolSpecError, match=r"a_bad\.json#/llm/input_schema"):
        ToolRegistry.build(agent_dir=tmp_path, strict=True)


def test_issue43_skillspec_input_schema_pydantic_rejects_is_a_skill_error() -> None:
    import pytest

    from stargraph.errors import SkillValidationError
    from stargraph.skills.machine import parse_skillspec

    document = {
        **SKILLSPEC,
        "input_schema": {"type": "object", "properties": {"q": {"type": "string", "pattern": 5}}},
    }
    with pytest.raises(SkillValidationError, match=r"s\.json#/input_schema/properties/q/pattern"):
        parse_skillspec(document, source="s.json")


def test_issue43_skillspec_max_steps_beyond_json_is_refused_at_load() -> None:
    import pytest

    from stargraph.errors import SkillValidationError
    from stargraph.skills.machine import parse_skillspec

    with pytest.raises(SkillValidationError, match=r"s\.json#/max_steps: integer 10{30}"):
        parse_skillspec({**SKILLSPEC, "max_steps": 10**30}, source="s.json")


def test_issue43_cassette_with_integers_beyond_2_53_names_the_pointer(tmp_path: Path) -> None:
    import pytest

    from stargraph.errors import CassetteError
    from stargraph.replay import load_cassette

    document = json.loads(json.dumps(CASSETTE))
    document["recording"]["run"]["graph_hash"] = 2**53
    document["recording"]["steps"][0]["step"] = -(2**60)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(document))
    with pytest.raises(CassetteError) as caught:
        load_cassette(path)
    message = str(caught.value)
    assert "/recording/run/graph_hash: integer 9007199254740992" in message
    assert "/recording/steps/0/step: integer -1152921504606846976" in message


def test_issue43_prompt_builder_raises_its_own_error_once() -> None:
    import pytest

    from stargraph.errors import SkillValidationError
    from stargraph.skills.machine import PromptBuilder

    with pytest.raises(SkillValidationError) as caught:
        PromptBuilder(order=("master",))
    assert type(caught.value) is SkillValidationError
    [problem] = caught.value.problems
    assert problem.pointer == "/order"
    assert "must name each of" in problem.message
    assert "validation error" not in str(caught.value)  # no pydantic text around it


def test_issue43_ir_model_construction_raises_ir_error() -> None:
    import pytest

    from stargraph.errors import IRError
    from stargraph.ir import FunctionNodeIR

    with pytest.raises(IRError, match=r"FunctionNodeIR data is invalid: /config: .*2\*\*53"):
        FunctionNodeIR(id="a", ref="m:f", config={"n": 10**30})
    with pytest.raises(IRError, match="lone surrogate"):
        FunctionNodeIR(id="a", ref="m:f", config={"s": "\ud800"})


def test_issue43_skill_md_with_a_value_the_graph_refuses_names_the_file() -> None:
    import pytest

    from stargraph.errors import SkillValidationError
    from stargraph.skills.markdown import parse_skill_md

    document = {**SKILL_MD, "verification": ["\ud800"]}
    with pytest.raises(SkillValidationError, match=r"SKILL\.md#/config: .*lone surrogate"):
        parse_skill_md(f"---\n{dumps(document)}\n---\nBody.\n", source="SKILL.md")
