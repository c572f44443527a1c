"""External tools built from a source directory when their registry is built.

The seed lets a tool's executable be "a binary or source directory ... built during agent
build". A manifest says so with a ``build`` section instead of ``exec_path``::

    "runtime": {"version": "1.0.0",
                "build": {"source": "greet", "command": "make", "artifact": "out/greet"}}

``source`` is a directory relative to the manifest (default: the manifest's name without
``.json``, the seed's ``<tool-name>/``), ``command`` a shell command (or an argv list) and
``artifact`` the built executable's path inside the build tree. Building a tool runs code
from its repository, so it gets what ``choir.exec`` gets (see ``_sandbox``): a bubblewrap
sandbox with no network, the system's programs read-only and a *copy* of the source
directory as the only writable place, so a build can neither reach the network nor change
the sources or anything else. The artefact is copied into a content-addressed cache
(``$STARGRAPH_TOOL_CACHE``, else ``$XDG_CACHE_HOME/stargraph/tools``, else
``~/.cache/stargraph/tools``) and the tool runs from there.

What was built, and from what, is the tool's identity: ``ToolSpec.build_hash`` digests the
source tree, the command and the artefact, so it enters ``spec_hash`` and the registry's
digest, and a changed source is a changed tool. A failed build is a problem of the manifest
naming the tool, the source directory and the end of the build's stderr.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from stargraph.tools._canonical import canonical_json
from stargraph.tools._sandbox import INSTALL_HINT, find_bwrap, sandbox_argv, sandbox_problem

__all__ = ["BUILD_KEYS", "build_tool"]

BUILD_KEYS: Final = frozenset({"source", "command", "artifact", "timeout_s"})
_DEFAULT_TIMEOUT_S: Final = 300.0
_STDERR_TAIL: Final = 800
_FIX: Final = (
    "the command runs in a sandbox without network, with only a copy of the source "
    "directory writable; make it build there and leave the artifact in that copy"
)

Report = Callable[..., None]


def build_tool(file: Path, tool: str, build: Any, problem: Report) -> tuple[Path, str] | None:
    """Build the tool the manifest ``file`` declares; ``(executable, build hash)``, or
    ``None`` with every problem reported through ``problem(pointer, message, hint)``."""
    if not isinstance(build, dict):
        problem(
            "/runtime/build", "build must be an object", 'write {"command": ..., "artifact": ...}'
        )
        return None
    for unknown in sorted(set(build) - BUILD_KEYS):
        problem(
            f"/runtime/build/{unknown}", f"unknown key {unknown!r}", f"use {sorted(BUILD_KEYS)}"
        )
    source = build.get("source", file.with_suffix("").name)
    command = build.get("command")
    artifact = build.get("artifact")
    timeout = build.get("timeout_s", _DEFAULT_TIMEOUT_S)
    ok = True
    if not isinstance(source, str) or not (file.parent / source).is_dir():
        problem(
            "/runtime/build/source",
            f"source directory {str(file.parent / str(source))!r} does not exist",
            "ship the tool's sources in a directory beside the manifest",
        )
        ok = False
    if isinstance(command, str) and command.strip():
        argv = ["/bin/sh", "-c", command]
    elif isinstance(command, list) and command and all(isinstance(a, str) for a in command):
        argv = list(command)
    else:
        problem("/runtime/build/command", "command must be a shell command or an argv list")
        ok = False
    if not isinstance(artifact, str) or not artifact or Path(artifact).is_absolute():
        problem(
            "/runtime/build/artifact",
            "artifact must be the built executable's path relative to the source directory",
        )
        ok = False
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
        problem("/runtime/build/timeout_s", "timeout_s must be a positive number of seconds")
        ok = False
    if not ok or not isinstance(source, str) or not isinstance(artifact, str):
        return None
    return _build(
        tool,
        (file.parent / source).resolve(),
        argv=argv,
        artifact=artifact,
        timeout=float(timeout),
        problem=problem,
    )


def _build(
    tool: str,
    source: Path,
    *,
    argv: list[str],
    artifact: str,
    timeout: float,
    problem: Report,
) -> tuple[Path, str] | None:
    bwrap = find_bwrap()
    refused = sandbox_problem(bwrap)
    if refused is not None or bwrap is None:
        problem(
            "/runtime/build",
            f"tool {tool!r} cannot be built from {str(source)!r}: {refused}",
            INSTALL_HINT.partition(", or build")[0],
        )
        return None
    tree = _tree_digest(source)
    with tempfile.TemporaryDirectory(prefix="stargraph-build-") as scratch:
        work = Path(scratch) / "src"
        shutil.copytree(source, work, symlinks=True)
        try:
            done = subprocess.run(
                sandbox_argv(bwrap, work, argv, network=False),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            problem(
                "/runtime/build",
                f"build of tool {tool!r} in {str(source)!r} ran longer than {timeout:g}s",
                "make the build faster or raise build.timeout_s",
            )
            return None
        if done.returncode != 0:
            tail = done.stderr.decode(errors="replace").strip()[-_STDERR_TAIL:]
            problem(
                "/runtime/build",
                f"build of tool {tool!r} in {str(source)!r} failed with exit status "
                f"{done.returncode}: {tail or '<no stderr>'}",
                _FIX,
            )
            return None
        built = (work / artifact).resolve()
        if not built.is_relative_to(work.resolve()) or not built.is_file():
            problem(
                "/runtime/build/artifact",
                f"build of tool {tool!r} in {str(source)!r} left no file {artifact!r}",
                _FIX,
            )
            return None
        if not os.access(built, os.X_OK):
            problem(
                "/runtime/build/artifact",
                f"the artifact {artifact!r} of tool {tool!r} is not executable",
                "end the build command with chmod +x on it",
            )
            return None
        content = built.read_bytes()
    digest = hashlib.sha256(content).hexdigest()
    identity = {"source": tree, "command": argv, "artifact": artifact, "sha256": digest}
    build_hash = "sha256:" + hashlib.sha256(canonical_json(identity)).hexdigest()
    return _cached(digest, Path(artifact).name, content), build_hash


def _tree_digest(root: Path) -> str:
    """sha256 over every file of ``root`` (relative path, executable bit, content; a
    symlink's target text), in path order: any change to the sources changes it."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*"), key=lambda p: p.relative_to(root).as_posix()):
        relative = path.relative_to(root).as_posix()
        if path.is_symlink():
            h.update(b"L" + relative.encode() + b"\0" + os.readlink(path).encode() + b"\0")
        elif path.is_file():
            mode = b"x" if os.access(path, os.X_OK) else b"-"
            h.update(b"F" + mode + relative.encode() + b"\0")
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def _cache_root() -> Path:
    explicit = os.environ.get("STARGRAPH_TOOL_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "stargraph" / "tools"


def _cached(digest: str, name: str, content: bytes) -> Path:
    """The artefact at ``<cache>/<sha256>/<name>``, written once (atomically: a concurrent
    build of the same bytes writes the same file)."""
    target = _cache_root() / digest / name
    if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == digest:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=".partial-")
    with os.fdopen(fd, "wb") as out:
        out.write(content)
    os.chmod(temporary, 0o755)
    os.replace(temporary, target)
    return target
