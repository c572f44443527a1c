"""Crash safety: runs killed at any instant resume to the same result, effects exactly once.

Each trial runs ``crashgraph`` in a subprocess, SIGKILLs it at a random moment (twice),
resumes it in fresh processes, and checks the final state, the side-effect ledger, the step
ids and the SQLite file. ``make chaos`` runs 500 trials (``STARGRAPH_CHAOS_TRIALS``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from stargraph.checkpoint import SqliteStore

ROOT = Path(__file__).resolve().parents[1]  # on PYTHONPATH: the children import tests.crashgraph
TRIALS = int(os.environ.get("STARGRAPH_CHAOS_TRIALS", "25"))
SEED = int(os.environ.get("STARGRAPH_CHAOS_SEED", "20261122"))
LAUNCH = "from tests import crashgraph; crashgraph.main()"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SG_CRASH_AT"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def _args(tmp: Path, run_id: str, shape: str) -> list[str]:
    return [
        sys.executable,
        "-c",
        LAUNCH,
        str(tmp / "runs.db"),
        str(tmp / "ledger.db"),
        run_id,
        shape,
    ]


def _finish(tmp: Path, run_id: str, shape: str) -> dict[str, Any]:
    done = subprocess.run(
        _args(tmp, run_id, shape),
        check=False,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _ledger(tmp: Path) -> list[tuple[str, int]]:
    conn = sqlite3.connect(tmp / "ledger.db")
    try:
        return sorted(conn.execute("SELECT node, step FROM ledger").fetchall())
    finally:
        conn.close()


# The rule-routed loop ends by its step limit: halted, not done.
STATUS = {"long": "done", "small": "done", "nested": "done", "rules": "halted"}


def _check_history(tmp: Path, run_id: str, final: dict[str, Any], shape: str) -> None:
    store = SqliteStore(tmp / "runs.db")
    try:
        executed = []
        # The run and any nested child runs (``<run>::<site>@<step>.<index>``).
        for record in store.list_runs(limit=1000):
            steps = store.get_steps(record.run_id)
            # Step ids are contiguous from 0: monotonic, nothing lost, nothing repeated.
            assert [s.step for s in steps] == list(range(len(steps)))
            assert record.status == (STATUS[shape] if record.run_id == run_id else "done"), record
            executed += [(w.node, s.step) for s in steps for w in s.writes if w.node != "inner"]
        # Exactly one ledger entry per node execution of the final history.
        assert _ledger(tmp) == sorted(executed)
        assert len(executed) == len(final["log"])
        assert store.get_run(run_id).status == STATUS[shape]
        assert store.integrity_check() == "ok"
    finally:
        store.close()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Final states of uninterrupted runs, computed in a subprocess like the trials."""
    out = {}
    for shape in ("long", "small", "nested", "rules"):
        tmp = tmp_path_factory.mktemp(f"ref-{shape}")
        out[shape] = _finish(tmp, "r", shape)
        _check_history(tmp, "r", out[shape], shape)
    return out


def test_reference_run_is_complete(reference: dict[str, dict[str, Any]]) -> None:
    long = reference["long"]
    assert len(long["log"]) == 12 + 5 + 1 + 16
    assert long["log"][12:17] == ["p0", "p1", "p2", "p3", "p4"]
    assert reference["small"]["log"] == ["a", "b", "c", "d"]
    # The rule-routed loop ran exactly max_steps times, stopped by the termination pack.
    assert reference["rules"]["log"] == ["work"] * 20
    nested = reference["nested"]["log"]
    assert nested == [f"a{i}" for i in range(5)] + [f"c{i}" for i in range(10)] + [
        f"z{i}" for i in range(5)
    ]


def _last_step(db: Path) -> int:
    if not db.exists():
        return -1
    conn = sqlite3.connect(db, timeout=30)
    try:
        row = conn.execute("SELECT max(last_step) FROM runs").fetchone()
    except sqlite3.OperationalError:  # tables not created yet
        return -1
    finally:
        conn.close()
    return -1 if row is None or row[0] is None else int(row[0])


@pytest.mark.parametrize(
    ("shape", "trial"),
    [("long", t) for t in range(TRIALS)]
    + [("nested", t) for t in range(max(5, TRIALS // 5))]
    + [("rules", t) for t in range(max(5, TRIALS // 5))],
)
def test_sigkill_at_random_moments(
    shape: str, trial: int, tmp_path: Path, reference: dict[str, dict[str, Any]]
) -> None:
    rng = random.Random(SEED + trial + {"long": 0, "nested": 10_000, "rules": 20_000}[shape])
    seed_note = f"chaos seed {SEED}, trial {trial} (STARGRAPH_CHAOS_SEED={SEED})"
    kills = []
    for _ in range(2):
        proc = subprocess.Popen(
            _args(tmp_path, "r", shape),
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        # Kill at a random moment inside the run: once a random step has been committed,
        # after a random fraction of a step more (so inside nodes, inside commits, between).
        target = rng.randrange(-1, {"long": 28, "nested": 9, "rules": 18}[shape])
        deadline = time.monotonic() + 60
        while _last_step(tmp_path / "runs.db") < target and proc.poll() is None:
            assert time.monotonic() < deadline, seed_note
            time.sleep(0.002)
        time.sleep(rng.uniform(0, 0.012))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills.append(_last_step(tmp_path / "runs.db"))
        _, err = proc.communicate(timeout=60)
        assert proc.returncode in (0, -signal.SIGKILL), f"{seed_note}: {err.decode()}"
    assert kills, f"{seed_note}: the run finished before any kill; the trial tested nothing"
    final = _finish(tmp_path, "r", shape)
    assert final == reference[shape], f"{seed_note}, killed after steps {kills}"
    _check_history(tmp_path, "r", final, shape)
    if shape == "rules":
        _check_decisions(tmp_path, seed_note)


def _check_decisions(tmp: Path, note: str) -> None:
    """The resumed rule-routed run took the decisions an uninterrupted one takes."""
    store = SqliteStore(tmp / "runs.db")
    try:
        decisions = [(s.step, s.decision) for s in store.get_steps("r") if s.decision]
        stopped = store.get_run("r").stopped_by
    finally:
        store.close()
    goto = {"kind": "goto", "rule": "cycle/again", "targets": ["work"], "reason": None}
    halt = {
        "kind": "halt",
        "rule": "termination/max_steps",
        "targets": [],
        "reason": "max_steps_exceeded",
    }
    assert decisions == [(i, goto) for i in range(1, 20)] + [(20, halt)], note
    assert stopped == "termination/max_steps", note


POINTS = ("before_node", "after_effect", "during_commit", "after_commit")


@pytest.mark.parametrize("step", [1, 2, 3])
@pytest.mark.parametrize("point", POINTS)
def test_named_crash_points(
    point: str, step: int, tmp_path: Path, reference: dict[str, dict[str, Any]]
) -> None:
    crashed = subprocess.run(
        _args(tmp_path, "r", "small"),
        check=False,
        env=_env(SG_CRASH_AT=f"{point}:{step}"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert crashed.returncode == 137, crashed.stderr
    final = _finish(tmp_path, "r", "small")
    assert final == reference["small"]
    _check_history(tmp_path, "r", final, "small")
    if point in ("before_node", "after_effect"):
        # The crashed step was redone on resume, but its effect is in the ledger once.
        assert sum(1 for _, s in _ledger(tmp_path) if s == step) == (2 if step == 2 else 1)
