"""Loading an external tool from its JSON manifest.

The manifest has the two views of the seed::

    {"llm": {"name": "acme.git.commit", "description": "...", "input_schema": {...}},
     "runtime": {"exec_path": "git_commit", "timeout_ms": 15000,
                 "locks": [{"resource": "workspace", "mode": "X"}], "network": false,
                 "secret_resources": ["git_identity"], "side_effect": "write",
                 "idempotent": false, "version": "1.0.0"}}

``llm.parameters`` is accepted for ``input_schema``; locks may also be written as strings
(``"file:{path}:S"``); ``timeout_s`` may replace ``timeout_ms``. A ``MAJOR.MINOR`` version (the
seed writes ``"1.0"``) is read as ``MAJOR.MINOR.0``. ``exec_path`` is relative to the manifest
and defaults to the manifest's file name without ``.json``. ``"host_executed": true`` declares
a tool the host executes (a :class:`~stargraph.tools.HostTool`, delegated by the arbiter to its
``ToolHost``): it has no executable. ``"build": {...}`` declares a tool built from a source
directory when the manifest is loaded (see ``_build``). Every problem in one manifest is
reported at once, each with the file and a JSON pointer.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Final

import orjson

from stargraph.errors import Problem, ToolSpecError
from stargraph.tools._build import build_tool
from stargraph.tools._host import HostTool
from stargraph.tools._schema import model_from_json_schema
from stargraph.tools._spec import NAME_RE, ToolSpec
from stargraph.tools._tool import SubprocessTool

__all__ = ["load_manifest"]

_LLM_KEYS: Final = frozenset({"name", "description", "input_schema", "parameters"})
_RUNTIME_KEYS: Final = frozenset(
    {
        "exec_path",
        "timeout_ms",
        "timeout_s",
        "locks",
        "network",
        "secret_resources",
        "side_effect",
        "idempotent",
        "version",
        "exposure",
        "prompt_mask",
        "host_executed",
        "build",
    }
)
# Runtime fields copied onto ToolSpec under the same name.
_PASSTHROUGH: Final = ("network", "side_effect", "idempotent", "exposure", "prompt_mask")
_SPEC_POINTER: Final = {
    "id": "/llm/name",
    "description": "/llm/description",
    "input_schema": "/llm/input_schema",
    "timeout_s": "/runtime/timeout_ms",
}


def load_manifest(path: str | os.PathLike[str]) -> SubprocessTool | HostTool:
    """Load one manifest and check its executable; raise :class:`ToolSpecError` naming the file.

    The error lists every problem found (bad JSON, unknown keys, bad id, unsupported schema
    keyword, missing or non-executable executable), each as ``<file>#<pointer>``.
    """
    file = Path(path)
    source = str(file)
    problems: list[Problem] = []

    def problem(pointer: str, message: str, hint: str = "") -> None:
        problems.append(Problem(f"{source}#{pointer}" if pointer else source, message, hint))

    def fail() -> ToolSpecError:
        return ToolSpecError(problems, subject=f"tool manifest {source}")

    try:
        document = orjson.loads(file.read_bytes())
    except OSError as exc:
        problem("", f"cannot read the manifest: {exc.strerror}")
        raise fail() from None
    except orjson.JSONDecodeError as exc:
        problem("", f"invalid JSON: {exc}", "fix the JSON syntax")
        raise fail() from None
    if not isinstance(document, dict):
        problem("", "a manifest must be a JSON object with 'llm' and 'runtime'")
        raise fail()
    llm = _section(document, "llm", _LLM_KEYS, problem)
    runtime = _section(document, "runtime", _RUNTIME_KEYS, problem)
    for key in sorted(set(document) - {"llm", "runtime"}):
        problem(f"/{key}", f"unknown top-level key {key!r}", "keep only 'llm' and 'runtime'")

    tool_id = _tool_id(llm, runtime, problem)
    schema_key = "parameters" if "parameters" in llm else "input_schema"
    schema = llm.get(schema_key, {"type": "object", "properties": {}})
    host_executed = runtime.get("host_executed", False)
    if not isinstance(host_executed, bool):
        problem("/runtime/host_executed", "host_executed must be true or false")
        host_executed = False
    if host_executed and "exec_path" in runtime:
        problem(
            "/runtime/exec_path",
            "a host-executed tool has no executable",
            "remove exec_path, or host_executed to run it as a subprocess",
        )
    build_hash: str | None = None
    if "build" in runtime:
        if host_executed or "exec_path" in runtime:
            problem(
                "/runtime/build",
                "a tool built from sources has neither exec_path nor host_executed",
                "keep build (its artifact is the executable), or drop it",
            )
            exec_path = None
        else:
            built = build_tool(file, tool_id or source, runtime["build"], problem)
            exec_path, build_hash = built if built is not None else (None, None)
    else:
        exec_path = None if host_executed else _executable(file, runtime, problem)

    fields: dict[str, Any] = {k: runtime[k] for k in _PASSTHROUGH if k in runtime}
    secrets = runtime.get("secret_resources", [])
    if isinstance(secrets, list) and all(isinstance(name, str) for name in secrets):
        fields["secret_resources"] = tuple(secrets)
    else:
        problem(
            "/runtime/secret_resources",
            f"secret_resources must be a list of names, got {secrets!r:.60}",
            'write e.g. ["git_identity"]',
        )
    fields["locks"] = _locks(runtime.get("locks", []), problem)
    if "timeout_ms" in runtime:
        ms = runtime["timeout_ms"]
        if isinstance(ms, int | float) and not isinstance(ms, bool):
            fields["timeout_s"] = ms / 1000
        else:
            problem("/runtime/timeout_ms", "timeout_ms must be a number of milliseconds")
    elif "timeout_s" in runtime:
        fields["timeout_s"] = runtime["timeout_s"]
    spec: ToolSpec | None = None
    try:
        spec = ToolSpec(
            id=tool_id or "invalid.invalid@0.0.0",
            description=llm.get("description", ""),
            input_schema=schema,
            executor="host" if host_executed else "subprocess",
            exec_path=None if host_executed else str(exec_path or file.with_suffix("")),
            build_hash=build_hash,
            **fields,
        )
    except ToolSpecError as exc:
        for spec_problem in exc.problems:
            path = spec_problem.pointer.partition("#/")[2]
            top, _, rest = path.partition("/")
            pointer = _SPEC_POINTER.get(top, f"/runtime/{top}") + (f"/{rest}" if rest else "")
            problem(pointer, spec_problem.message, spec_problem.hint)
    if not llm.get("description"):
        problem("/llm/description", "the tool needs a description for the model")
    try:
        arguments = model_from_json_schema(
            schema, name=tool_id or "tool", source=source, pointer=f"/llm/{schema_key}"
        )
    except ToolSpecError as exc:
        problems.extend(exc.problems)
    if problems or spec is None:
        raise fail()
    if host_executed:
        return HostTool(spec, arguments, source=source)
    return SubprocessTool(spec, arguments, source=source)


def _section(document: dict[str, Any], key: str, allowed: frozenset[str], problem: Any) -> Any:
    section = document.get(key)
    if not isinstance(section, dict):
        problem(f"/{key}", f"missing or non-object {key!r} section")
        return {}
    for unknown in sorted(set(section) - allowed):
        problem(f"/{key}/{unknown}", f"unknown key {unknown!r}", f"use {sorted(allowed)}")
    return section


def _tool_id(llm: dict[str, Any], runtime: dict[str, Any], problem: Any) -> str | None:
    name = llm.get("name")
    if not isinstance(name, str) or not name:
        problem("/llm/name", "missing tool name", "add a namespaced name like 'acme.git.commit'")
        return None
    name, _, inline_version = name.partition("@")
    version = runtime.get("version", inline_version)
    if not isinstance(version, str) or not version:
        problem("/runtime/version", "missing version", "add a SemVer version like '1.0.0'")
        return None
    if inline_version and version != inline_version:
        problem(
            "/runtime/version", f"version {version!r} differs from llm.name's @{inline_version}"
        )
    if re.fullmatch(r"\d+\.\d+", version):
        version += ".0"  # the seed's "1.0" means 1.0.0
    if not NAME_RE.match(name):
        problem("/llm/name", f"{name!r} is not a canonical namespaced name", "use 'ns.name[.sub]'")
        return None
    return f"{name}@{version}"


def _executable(file: Path, runtime: dict[str, Any], problem: Any) -> Path | None:
    declared = runtime.get("exec_path")
    if declared is not None and not isinstance(declared, str):
        problem("/runtime/exec_path", "exec_path must be a string")
        return None
    target = (file.parent / declared) if declared else file.with_suffix("")
    try:
        found = target.is_file()
    except OSError as exc:  # a name too long for the file system, a loop of links...
        problem("/runtime/exec_path", f"exec_path {declared!r} cannot be looked up: {exc.strerror}")
        return None
    if not found:
        problem(
            "/runtime/exec_path",
            f"executable {str(target)!r} does not exist",
            "ship the executable beside the manifest or fix exec_path",
        )
        return None
    if not os.access(target, os.X_OK):
        problem("/runtime/exec_path", f"{str(target)!r} is not executable", "chmod +x it")
        return None
    return target.resolve()


def _locks(declared: Any, problem: Any) -> tuple[str, ...]:
    if not isinstance(declared, list):
        problem("/runtime/locks", "locks must be a list")
        return ()
    locks: list[str] = []
    for index, item in enumerate(declared):
        if isinstance(item, str):
            locks.append(item)
        elif isinstance(item, dict) and {"resource", "mode"} <= set(item):
            locks.append(f"{item['resource']}:{item['mode']}")
        else:
            problem(
                f"/runtime/locks/{index}",
                "a lock is 'res:MODE' or {'resource': ..., 'mode': 'S'|'X'}",
            )
    return tuple(locks)
