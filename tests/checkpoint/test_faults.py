"""Faults that leave nothing behind, on SQLite (issue 17 item 4): the disk fills during a
commit, and the database file or its folder is read-only.

Each fault is real, not mocked: every scenario runs in a child process in a private mount
namespace (``unshare``; as a user namespace when not root) on a small tmpfs, which the
scenario fills, or mounts read-only, at a chosen point. The run fails with a typed
:class:`~stargraph.errors.StoreUnavailableError` that names the fix, the file passes
``PRAGMA integrity_check``, nothing committed is lost, and a resume once the fault is
gone finishes with the result of an uninterrupted run, each committed step's node having run
once. The namespace (and the mounts in it) vanish with the child, whatever happens.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from stargraph.checkpoint import SqliteStore
from stargraph.errors import NodeError, StoreUnavailableError
from stargraph.graph import END, START, Graph
from stargraph.runtime import RunContext

DEADLINE_S = 120.0

# --------------------------------------------------------------------------- the graph

EXECUTIONS: Counter[str] = Counter()  # "<node>@<step>" -> times its body ran
ARMED: dict[str, Any] = {}  # "fill" -> the filesystem to fill at step 3; "fail" -> step


class Blob(BaseModel):
    log: list[str] = []
    blob: str = ""


def work(state: Blob, ctx: RunContext) -> dict[str, Any]:
    """Writes a 96 KB value each step (so each commit needs fresh pages)."""
    EXECUTIONS[f"{ctx.node}@{ctx.step}"] += 1
    if ARMED.get("fail") == ctx.step:
        del ARMED["fail"]
        raise RuntimeError("the node is broken this time")
    if ctx.step == 3 and "fill" in ARMED:
        _fill(ARMED.pop("fill"))  # the disk fills now: this step's commit finds no space
    return {"log": [*state.log, ctx.node], "blob": ctx.node * 96_000}


def _fill(folder: Path) -> None:
    # Unbuffered: nothing is left to flush (and fail) when the file is closed.
    with open(folder / "filler", "wb", buffering=0) as filler:
        while _write_some(filler):
            pass


def _write_some(filler: Any) -> bool:
    """Write a block; ``False`` once the file system is full (ENOSPC)."""
    try:
        filler.write(b"\0" * 4096)
    except OSError as exc:
        if exc.errno != 28:
            raise
        return False
    return True


def graph() -> Graph[Blob]:
    names = [f"n{i}" for i in range(5)]
    built = Graph("faults", state=Blob)
    for name in names:
        built = built.with_node(name, work)
    built = built.with_edge(START, names[0])
    for a, b in itertools.pairwise(names):
        built = built.with_edge(a, b)
    return built.with_edge(names[-1], END)


# --------------------------------------------------------------------------- scenarios (child)


def _sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=DEADLINE_S)


def _tmpfs(folder: Path, size: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    _sh("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder))
    return folder


def _reference() -> Blob:
    result = graph().compile().invoke({})
    EXECUTIONS.clear()
    return result


def _once_each_but(again: str | None = None) -> None:
    expected = Counter({f"n{i}@{i + 1}": 1 for i in range(5)})
    if again is not None:
        expected[again] += 1
    assert expected == EXECUTIONS, EXECUTIONS


def _failed_at_step_2(db: Path) -> None:
    """A run that failed in step 2 (step 1 committed), as a fault finds it."""
    ARMED["fail"] = 2
    with SqliteStore(db) as store:
        app = graph().compile(store=store)
        with pytest.raises(NodeError):
            app.invoke({}, run_id="r")
        record = store.get_run("r")
        assert (record.status, record.last_step) == ("failed", 1), record


def scenario_disk_full(base: Path) -> None:
    reference = _reference()
    fs = _tmpfs(base / "fs", "3m")
    db = fs / "runs.db"
    store = SqliteStore(db)
    app = graph().compile(store=store)
    ARMED["fill"] = fs
    with pytest.raises(StoreUnavailableError) as info:
        app.invoke({}, run_id="r")
    message = str(info.value)
    assert "database or disk is full" in message, message
    assert "free space on its disk, then resume the run" in message, message
    assert store.integrity_check() == "ok"
    record = store.get_run("r")
    # Steps 1-2 are kept; step 3 left nothing half-written; nobody runs it now.
    assert (record.status, record.last_step) == ("orphaned", 2), record
    assert [s.step for s in store.get_steps("r")] == [0, 1, 2]
    os.unlink(fs / "filler")  # space is freed
    assert app.resume("r") == reference
    assert store.get_run("r").status == "done"
    assert [s.step for s in store.get_steps("r")] == list(range(6))
    assert store.integrity_check() == "ok"
    _once_each_but("n2@3")  # only the step whose commit failed ran again
    store.close()


def scenario_read_only_file(base: Path) -> None:
    reference = _reference()
    fs = _tmpfs(base / "fs", "8m")
    db = fs / "runs.db"
    _failed_at_step_2(db)
    before = dict(EXECUTIONS)
    _sh("mount", "--bind", str(db), str(db))
    _sh("mount", "-o", "remount,bind,ro", str(db))
    with SqliteStore(db) as store:
        app = graph().compile(store=store)
        assert [r.status for r in store.list_runs()] == ["failed"], "reading still works"
        attempts: list[Callable[[], object]] = [
            lambda: app.resume("r"),
            lambda: app.invoke({}, run_id="new"),
        ]
        for attempt in attempts:
            with pytest.raises(StoreUnavailableError) as info:
                attempt()
            assert "attempt to write a readonly database" in str(info.value), info.value
            assert "make the file and its folder writable" in str(info.value), info.value
        assert dict(EXECUTIONS) == before, "no node ran"
    _sh("umount", str(db))
    with SqliteStore(db) as store:
        assert [r.run_id for r in store.list_runs()] == ["r"], "nothing half-created"
        assert store.integrity_check() == "ok"
        assert graph().compile(store=store).resume("r") == reference
    _once_each_but("n1@2")  # the step that failed


def scenario_read_only_folder(base: Path) -> None:
    reference = _reference()
    fs = _tmpfs(base / "fs", "8m")
    db = fs / "runs.db"
    _failed_at_step_2(db)
    before = dict(EXECUTIONS)
    _sh("mount", "-o", "remount,ro", str(fs))
    # SQLite needs to create the -shm file beside a WAL database even to read it: the store
    # cannot open, and says why; a new database cannot be created there either.
    for path in (db, fs / "new.db"):
        with pytest.raises(StoreUnavailableError) as info:
            SqliteStore(path)
        message = str(info.value)
        assert f"cannot open checkpoint file {str(path)!r}" in message, message
        assert "unable to open database file" in message, message
        assert "its folder exists and is writable by this user" in message, message
    assert dict(EXECUTIONS) == before, "no node ran"
    _sh("mount", "-o", "remount,rw", str(fs))
    with SqliteStore(db) as store:
        assert store.integrity_check() == "ok"
        assert graph().compile(store=store).resume("r") == reference
    assert not (fs / "new.db").exists()
    _once_each_but("n1@2")


SCENARIOS = {
    "disk_full": scenario_disk_full,
    "read_only_file": scenario_read_only_file,
    "read_only_folder": scenario_read_only_folder,
}


# --------------------------------------------------------------------------- the tests


def _in_namespace(scenario: str, tmp_path: Path) -> None:
    """Run ``scenario`` in a child process with a private mount namespace."""
    if os.geteuid() == 0:
        unshare = ["unshare", "--mount", "--propagation", "private"]
    else:  # a user namespace: root inside it, allowed to mount a tmpfs
        unshare = ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"]
    done = subprocess.run(
        [*unshare, sys.executable, __file__, scenario, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith(f"{scenario}: ok"), done.stdout + done.stderr


def test_disk_full_during_a_commit(tmp_path: Path) -> None:
    """A typed error naming the fix, a sound file, and resume after freeing space finishes
    with the uninterrupted result."""
    _in_namespace("disk_full", tmp_path)


def test_read_only_database_file(tmp_path: Path) -> None:
    _in_namespace("read_only_file", tmp_path)


def test_read_only_database_folder(tmp_path: Path) -> None:
    _in_namespace("read_only_folder", tmp_path)


if __name__ == "__main__":
    name, folder = sys.argv[1], Path(sys.argv[2])
    SCENARIOS[name](folder)
    print(f"{name}: ok")
