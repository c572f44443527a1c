"""Seed row B20: an external tool may be a source directory, built when its registry is
built (in the sandbox, without network, writing only a copy of its sources), its artefact
part of its identity, a failed build a typed error naming the tool, the directory and the
build's stderr."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stargraph.errors import ToolSpecError
from stargraph.tools import Arbiter, ToolCall, ToolRegistry, load_manifest

TEMPLATE = """\
#!/bin/sh
read -r args
printf '{"summary": "@GREETING@", "payload": {"args": %s}}\\n' "$args"
"""
# "Builds" the tool as a compiler would: reads the sources, writes an executable artefact.
BUILD = (
    "mkdir -p out && sed 's/@GREETING@/'\"$(cat greeting.txt)\"'/' greet.sh.in > out/greet "
    "&& chmod +x out/greet"
)


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Built artefacts go to this test's own cache."""
    root = tmp_path / "cache"
    monkeypatch.setenv("STARGRAPH_TOOL_CACHE", str(root))
    return root


def source_tool(
    directory: Path, *, greeting: str = "hello", build: dict[str, Any] | None = None
) -> Path:
    """A manifest ``greet.json`` and the tool's source directory ``greet/`` beside it."""
    sources = directory / "greet"
    sources.mkdir(parents=True, exist_ok=True)
    (sources / "greet.sh.in").write_text(TEMPLATE)
    (sources / "greeting.txt").write_text(greeting)
    manifest = {
        "llm": {
            "name": "ext.greet",
            "description": "Greets.",
            "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
        },
        "runtime": {
            "version": "1.0.0",
            "build": build or {"command": BUILD, "artifact": "out/greet"},
        },
    }
    path = directory / "greet.json"
    path.write_text(json.dumps(manifest))
    return path


def test_B20_a_tool_is_built_from_its_source_directory_when_the_registry_is_built(
    tmp_path: Path, cache: Path
) -> None:
    source_tool(tmp_path / "tools")
    registry = ToolRegistry.build(global_dir=tmp_path / "tools")
    spec = registry.resolve("ext.greet").spec
    assert spec.exec_path is not None
    assert Path(spec.exec_path).is_relative_to(cache)
    assert spec.build_hash is not None
    assert spec.build_hash.startswith("sha256:")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with Arbiter(registry, workspace=workspace) as arbiter:
        result = arbiter.dispatch(ToolCall(tool="ext.greet", args={"text": "hi"}))
    assert (result.summary, result.payload) == ("hello", {"args": {"text": "hi"}})
    # The build wrote into a copy: the sources are as they were shipped.
    assert sorted(p.name for p in (tmp_path / "tools" / "greet").iterdir()) == [
        "greet.sh.in",
        "greeting.txt",
    ]


def test_B20_a_changed_source_changes_the_tools_identity(tmp_path: Path) -> None:
    first = load_manifest(source_tool(tmp_path / "a")).spec
    again = load_manifest(source_tool(tmp_path / "b")).spec
    changed = load_manifest(source_tool(tmp_path / "c", greeting="bonjour")).spec
    assert again.build_hash == first.build_hash
    assert again.spec_hash == first.spec_hash
    assert changed.build_hash != first.build_hash
    assert changed.spec_hash != first.spec_hash
    digests = {ToolRegistry.build(global_dir=tmp_path / name).digest for name in ("a", "b", "c")}
    assert len(digests) == 2


def test_B20_a_failed_build_names_the_tool_the_directory_and_the_stderr_tail(
    tmp_path: Path,
) -> None:
    command = "echo 'greet.c:3: error: expected ; before }' >&2; exit 2"
    path = source_tool(tmp_path, build={"command": command, "artifact": "out/greet"})
    with pytest.raises(ToolSpecError) as info:
        load_manifest(path)
    (problem,) = info.value.problems
    assert problem.pointer == f"{path}#/runtime/build"
    assert problem.message == (
        f"build of tool 'ext.greet@1.0.0' in {str((tmp_path / 'greet').resolve())!r} failed "
        "with exit status 2: greet.c:3: error: expected ; before }"
    )
    # A build that succeeds without leaving its artefact is refused too.
    path = source_tool(tmp_path, build={"command": "true", "artifact": "out/greet"})
    with pytest.raises(ToolSpecError, match=r"left no file 'out/greet'"):
        load_manifest(path)


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP server on the host's loopback answering each connection with b"hello"."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"hello\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    server.close()
    thread.join(timeout=10)


def test_B20_the_build_has_no_network_and_writes_only_a_copy_of_its_sources(
    tmp_path: Path, listener: int
) -> None:
    fetch = f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{listener}; cat <&3' > got && {BUILD}"
    path = source_tool(tmp_path, build={"command": fetch, "artifact": "out/greet"})
    with pytest.raises(ToolSpecError, match=r"failed with exit status 1: .*Connection refused"):
        load_manifest(path)
    outside = tmp_path / "outside.txt"
    escape = f"echo pwned > {outside} ; echo pwned > {tmp_path / 'greet' / 'x'} ; {BUILD}"
    path = source_tool(tmp_path, build={"command": escape, "artifact": "out/greet"})
    load_manifest(path)  # the writes fail inside the sandbox; the build itself goes on
    assert not outside.exists()
    assert not (tmp_path / "greet" / "x").exists()
