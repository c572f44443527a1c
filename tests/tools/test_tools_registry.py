"""Manifests with both views (B1), external subprocess tools (B15), registry loading (B4)."""

from __future__ import annotations

import json
import logging
import os
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stargraph.errors import (
    RegistryError,
    ToolArgumentError,
    ToolError,
    ToolSpecError,
    ToolTimeoutError,
)
from stargraph.tools import (
    Arbiter,
    SubprocessTool,
    ToolCall,
    ToolRegistry,
    failure_of,
    load_manifest,
    tool,
)

ArbiterFactory = Callable[..., Arbiter]

ECHO = """
import json, os, sys
args = json.load(sys.stdin)
print(json.dumps({"summary": "echoed", "payload": {
    "args": args, "cwd": os.getcwd(), "env": sorted(os.environ)}}))
"""


def write_tool(
    directory: Path,
    stem: str,
    *,
    name: str | None = None,
    script: str = ECHO,
    runtime: dict[str, Any] | None = None,
    llm: dict[str, Any] | None = None,
    executable: bool = True,
) -> Path:
    """A manifest ``<stem>.json`` plus a Python executable ``<stem>`` beside it."""
    directory.mkdir(parents=True, exist_ok=True)
    manifest = {
        "llm": {
            "name": name or f"ext.{stem}",
            "description": f"The {stem} tool.",
            "input_schema": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
                "additionalProperties": False,
            },
            **(llm or {}),
        },
        "runtime": {"version": "1.0.0", "side_effect": "none", **(runtime or {})},
    }
    path = directory / f"{stem}.json"
    path.write_text(json.dumps(manifest))
    exe = directory / stem
    exe.write_text(f"#!{sys.executable}\n{script}")
    if executable:
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return path


# --------------------------------------------------------------------------- manifests


def test_seed_style_manifest_loads_both_views(tmp_path: Path) -> None:
    path = write_tool(
        tmp_path,
        "git_commit",
        name="acme.git.commit",
        runtime={
            "exec_path": "git_commit",
            "timeout_ms": 15000,
            "locks": [{"resource": "workspace", "mode": "X"}, "file:{text}:S"],
            "network": False,
            "secret_resources": ["git_identity"],
            "side_effect": "write",
            "idempotent": False,
            "version": "1.0",
        },
    )
    loaded = load_manifest(path)
    assert isinstance(loaded, SubprocessTool)
    spec = loaded.spec
    assert spec.id == "acme.git.commit@1.0.0"  # the seed's "1.0" means 1.0.0
    assert (spec.timeout_s, spec.locks) == (15.0, ("workspace:X", "file:{text}:S"))
    assert (spec.executor, spec.exec_path) == (
        "subprocess",
        str((tmp_path / "git_commit").resolve()),
    )
    assert spec.secret_resources == ("git_identity",)
    view = json.dumps(spec.llm_view())
    for leaked in ("exec_path", 'git_commit"', "timeout", "git_identity", "workspace"):
        assert leaked not in view


def test_malformed_json_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"llm": {')
    with pytest.raises(ToolSpecError) as info:
        load_manifest(bad)
    assert str(info.value).startswith(f"tool manifest {bad} is invalid: {bad}: invalid JSON:")


def test_every_manifest_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = write_tool(
        tmp_path,
        "messy",
        name="Messy",
        runtime={"timeout_ms": "soon", "colour": "red"},
        llm={
            "input_schema": {
                "type": "object",
                "properties": {"q": {"type": "string", "format": "x"}},
            }
        },
        executable=False,
    )
    with pytest.raises(ToolSpecError) as info:
        load_manifest(path)
    rendered = [p.render() for p in info.value.problems]
    assert rendered == [
        f"{path}#/runtime/colour: unknown key 'colour' (fix: use ['build', 'exec_path', "
        "'exposure', 'host_executed', 'idempotent', 'locks', 'network', 'prompt_mask', "
        "'secret_resources', 'side_effect', 'timeout_ms', 'timeout_s', 'version'])",
        f"{path}#/llm/name: 'Messy' is not a canonical namespaced name (fix: use 'ns.name[.sub]')",
        f"{path}#/runtime/exec_path: '{tmp_path / 'messy'}' is not executable (fix: chmod +x it)",
        f"{path}#/runtime/timeout_ms: timeout_ms must be a number of milliseconds",
        f"{path}#/llm/input_schema/properties/q/format: unsupported JSON Schema keyword 'format' "
        "(fix: use only $comment, "
        "$schema, additionalProperties, const, default, description, enum, examples, "
        "exclusiveMaximum, exclusiveMinimum, items, maxItems, maxLength, maximum, minItems, "
        "minLength, minimum, pattern, properties, required, title, type)",
    ]


def test_missing_executable_names_the_file(tmp_path: Path) -> None:
    path = write_tool(tmp_path, "gone")
    (tmp_path / "gone").unlink()
    with pytest.raises(
        ToolSpecError, match=r"#/runtime/exec_path: executable '.*gone' does not exist"
    ):
        load_manifest(path)


def test_an_exec_path_too_long_to_look_up_is_a_typed_problem(tmp_path: Path) -> None:
    path = write_tool(tmp_path, "long", runtime={"exec_path": "x" * 400})
    with pytest.raises(
        ToolSpecError, match=r"#/runtime/exec_path: exec_path 'x+' cannot be looked up: File name"
    ):
        load_manifest(path)


# --------------------------------------------------------------------------- running


def test_external_tool_speaks_json_on_stdin_stdout(tmp_path: Path, workspace: Path) -> None:
    write_tool(tmp_path / "global", "echo", runtime={"secret_resources": ["token"]})
    registry = ToolRegistry.build(global_dir=tmp_path / "global")
    os.environ["STARGRAPH_TEST_PARENT_SECRET"] = "parent-only"
    try:
        with Arbiter(registry, workspace=workspace, secrets={"token": "s3cr3t-value"}) as arbiter:
            result = arbiter.dispatch(ToolCall(tool="ext.echo", args={"text": "hi"}))
    finally:
        del os.environ["STARGRAPH_TEST_PARENT_SECRET"]
    assert result.summary == "echoed"
    payload: Any = result.payload
    assert payload["args"] == {"text": "hi"}
    assert payload["cwd"] == str(workspace.resolve())
    # Only PATH, LANG and the declared secret: the parent's environment is not inherited.
    assert [k for k in payload["env"] if k not in ("LC_CTYPE",)] == [
        "LANG",
        "PATH",
        "STARGRAPH_SECRET_TOKEN",
    ]


def test_external_tool_arguments_follow_its_json_schema(tmp_path: Path, workspace: Path) -> None:
    write_tool(
        tmp_path,
        "typed",
        llm={
            "input_schema": {
                "type": "object",
                "properties": {
                    "mode": {"enum": ["fast", "slow"]},
                    "count": {"type": "integer", "minimum": 1},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "opts": {
                        "type": "object",
                        "properties": {"deep": {"type": "boolean"}},
                        "required": ["deep"],
                    },
                    "note": {"type": ["string", "null"]},
                },
                "required": ["mode"],
                "additionalProperties": False,
            }
        },
    )
    registry = ToolRegistry.build(agent_dir=tmp_path)
    with Arbiter(registry, workspace=workspace) as arbiter:
        ok = arbiter.dispatch(
            ToolCall(tool="ext.typed", args={"mode": "fast", "tags": ["a"], "opts": {"deep": True}})
        )
        # Omitted optional fields stay omitted for the external tool.
        echoed: Any = ok.payload
        assert echoed["args"] == {"mode": "fast", "tags": ["a"], "opts": {"deep": True}}
        with pytest.raises(ToolArgumentError) as info:
            arbiter.dispatch(
                ToolCall(
                    tool="ext.typed",
                    args={"mode": "medium", "count": 0, "tags": [1], "opts": {}, "x": 1},
                )
            )
    fields = [(p.field, p.type) for p in failure_of(info.value).fields]
    assert fields == [
        ("mode", "literal_error"),
        ("count", "greater_than_equal"),
        ("tags.0", "string_type"),
        ("opts.deep", "missing"),
        ("x", "extra_forbidden"),
    ]


@pytest.mark.parametrize(
    ("script", "error", "message"),
    [
        ("import time; time.sleep(30)", ToolTimeoutError, "ran longer than 0.5s and was killed"),
        ("import sys; sys.stderr.write('disk on fire'); sys.exit(3)", ToolError,
         "exited with status 3: disk on fire"),
        ("print('not json')", ToolError, "printed invalid JSON on stdout"),
        ("print('{\"status\": \"error\", \"summary\": \"no such branch\"}')", ToolError,
         "reported an error: no such branch"),
    ],
)  # fmt: skip
def test_external_tool_failures_are_typed(
    tmp_path: Path, workspace: Path, script: str, error: type[ToolError], message: str
) -> None:
    write_tool(
        tmp_path, "bad", script=script, runtime={"timeout_ms": 500, "locks": ["workspace:X"]}
    )
    with Arbiter(ToolRegistry.build(agent_dir=tmp_path), workspace=workspace) as arbiter:
        started = time.monotonic()
        with pytest.raises(error, match=message):
            arbiter.dispatch(ToolCall(tool="ext.bad", args={"text": "x"}))
        assert time.monotonic() - started < 5
        assert arbiter.locks.snapshot() == {}


# --------------------------------------------------------------------------- registry


def builtin(name: str, version: str = "1.0.0") -> Any:
    @tool(id=f"{name}@{version}", description=f"{name} builtin.")
    def body() -> str:
        return "builtin"

    return body


def test_load_order_and_overrides_are_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_tool(tmp_path / "global", "shared")
    write_tool(tmp_path / "global", "only_global")
    write_tool(tmp_path / "agent", "shared", runtime={"version": "2.0.0"})
    with caplog.at_level(logging.INFO, logger="stargraph.tools"):
        registry = ToolRegistry.build(
            builtins=[builtin("ext.shared"), builtin("core.only")],
            global_dir=tmp_path / "global",
            agent_dir=tmp_path / "agent",
        )
    assert registry.ids == ("core.only@1.0.0", "ext.only_global@1.0.0", "ext.shared@2.0.0")
    assert registry.source_of("ext.shared") == str(tmp_path / "agent" / "shared.json")
    assert registry.report.pruned == ("ext.shared@1.0.0", "ext.shared@1.0.0")
    assert registry.report.total_on_disk == 3
    overrides = [r.getMessage() for r in caplog.records if "overrides" in r.getMessage()]
    assert overrides == [
        f"tool ext.shared@1.0.0 from global ({tmp_path / 'global' / 'shared.json'}) overrides "
        f"ext.shared@1.0.0 from builtin ({__name__}:builtin.<locals>.body)",
        f"tool ext.shared@2.0.0 from agent ({tmp_path / 'agent' / 'shared.json'}) overrides "
        f"ext.shared@1.0.0 from global ({tmp_path / 'global' / 'shared.json'})",
    ]


def test_clash_within_one_scope_names_both_sources(tmp_path: Path) -> None:
    first = write_tool(tmp_path, "one", name="ext.same")
    second = write_tool(tmp_path, "two", name="ext.same")
    with pytest.raises(RegistryError) as info:
        ToolRegistry.build(agent_dir=tmp_path)
    assert str(info.value) == (
        f"tool registry is invalid: agent:ext.same: defined twice in the agent scope: {first} "
        f"and {second} (fix: remove or rename one of them)"
    )


def test_issue23_an_unlistable_tool_directory_is_an_error_not_an_empty_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tool registry now loads its scopes as the SkillSpec registry does; before, a
    # directory it could not list silently held no tools.
    folder = tmp_path / "tools"
    write_tool(folder, "good")
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        # As without read permission (tests may run as root, whom chmod 000 does not stop).
        if Path(os.fsdecode(path)) == folder:
            raise PermissionError(13, "Permission denied", os.fsdecode(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(ToolSpecError) as info:
        ToolRegistry.build(agent_dir=folder)
    assert [p.render() for p in info.value.problems] == [
        f"{folder}: cannot list the tool directory: Permission denied (fix: make it "
        "readable (chmod u+rx) or remove it)"
    ]
    lenient = ToolRegistry.build(agent_dir=folder, strict=False)
    assert lenient.ids == ()
    assert [s.path for s in lenient.report.skipped] == [str(folder)]
    assert ToolRegistry.build(agent_dir=tmp_path / "missing").ids == ()


def test_builtin_clash_is_an_error() -> None:
    with pytest.raises(RegistryError, match="defined twice in the builtin scope"):
        ToolRegistry.build(builtins=[builtin("core.x"), builtin("core.x", "2.0.0")])


def test_strict_build_fails_on_any_bad_manifest_naming_each(tmp_path: Path) -> None:
    write_tool(tmp_path, "good")
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "empty.json").write_text("[]")
    with pytest.raises(ToolSpecError) as info:
        ToolRegistry.build(global_dir=tmp_path)
    text = str(info.value)
    assert text.startswith("tool registry has 2 problems:")
    assert f"{tmp_path / 'broken.json'}: invalid JSON" in text
    assert f"{tmp_path / 'empty.json'}: a manifest must be a JSON object" in text


def test_non_strict_build_skips_and_reports(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_tool(tmp_path / "global", "good")
    write_tool(tmp_path / "global", "noexec", executable=False)
    write_tool(tmp_path / "agent", "good")
    (tmp_path / "agent" / "broken.json").write_text("{")
    with caplog.at_level(logging.WARNING, logger="stargraph.tools"):
        registry = ToolRegistry.build(
            global_dir=tmp_path / "global", agent_dir=tmp_path / "agent", strict=False
        )
    report = registry.report
    assert report.loaded == ("ext.good@1.0.0",)
    assert [s.path for s in report.skipped] == [
        str(tmp_path / "global" / "noexec.json"),
        str(tmp_path / "agent" / "broken.json"),
    ]
    assert "is not executable (fix: chmod +x it)" in report.skipped[0].reasons[0]
    assert report.pruned == ("ext.good@1.0.0",)
    assert report.total_on_disk == 4
    assert sum("skipped tool manifest" in r.getMessage() for r in caplog.records) == 2


def test_registry_is_frozen_after_build() -> None:
    registry = ToolRegistry.build(builtins=[builtin("core.x")])
    with pytest.raises(RegistryError) as info:
        registry.register(builtin("core.y"))
    assert str(info.value) == (
        "tool registry is invalid: tool registry: the registry is frozen after build "
        "(fix: build a new registry with ToolRegistry.build(...) including the tool)"
    )
    assert len(registry) == 1


def test_resolve_by_name_id_and_llm_name() -> None:
    registry = ToolRegistry.build(builtins=[builtin("core.x", "1.2.0")])
    assert registry.resolve("core.x") is registry.resolve("core.x@1.2.0")
    assert registry.resolve("core__x__v1_2_0") is registry.resolve("core.x")
    assert "core.x@1.2.0" in registry
    assert "core.x@9.0.0" not in registry
    with pytest.raises(
        ToolArgumentError, match=r"unknown tool 'core.x@9.0.0': version '9.0.0' is not loaded"
    ):
        registry.resolve("core.x@9.0.0")


def test_registry_digest_changes_with_any_spec() -> None:
    one = ToolRegistry.build(builtins=[builtin("core.x")])
    same = ToolRegistry.build(builtins=[builtin("core.x")])
    other = ToolRegistry.build(builtins=[builtin("core.x", "1.0.1")])
    assert one.digest == same.digest != other.digest
