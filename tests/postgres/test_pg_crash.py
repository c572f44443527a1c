"""The crash test of ``tests/test_crash.py`` on PostgreSQL: SIGKILL at random moments and at
named points, resume in fresh processes, same final state, effects exactly once, contiguous
step ids. ``STARGRAPH_PG_CHAOS_TRIALS`` sets the number of random trials (default 8)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from stargraph.checkpoint import PostgresStore
from tests.test_crash import POINTS, SEED, _env, _ledger

pytestmark = pytest.mark.postgres  # a PostgreSQL server (tests/postgres/pgcluster.py)

ROOT = Path(__file__).resolve().parents[2]  # on PYTHONPATH: the children import tests.*
TRIALS = int(os.environ.get("STARGRAPH_PG_CHAOS_TRIALS", "8"))
LAUNCH = "from tests.postgres import pg_crashgraph; pg_crashgraph.main()"


def _pg_env() -> dict[str, str]:
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env["PYTHONPATH"]])
    return env


def _args(dsn: str, schema: str, tmp: Path, run_id: str, shape: str) -> list[str]:
    return [sys.executable, "-c", LAUNCH, dsn, schema, str(tmp / "ledger.db"), run_id, shape]


def _finish(dsn: str, schema: str, tmp: Path, run_id: str, shape: str) -> dict[str, Any]:
    done = subprocess.run(
        _args(dsn, schema, tmp, run_id, shape),
        check=False,
        env=_pg_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _check_history(dsn: str, schema: str, tmp: Path, run_id: str, final: dict[str, Any]) -> None:
    with PostgresStore(dsn, schema=schema) as store:
        executed = []
        for record in store.list_runs(limit=1000):
            steps = store.get_steps(record.run_id)
            assert [s.step for s in steps] == list(range(len(steps)))
            assert record.status == "done", record
            executed += [(w.node, s.step) for s in steps for w in s.writes if w.node != "inner"]
        assert _ledger(tmp) == sorted(executed)
        assert len(executed) == len(final["log"])
        assert store.get_run(run_id).status == "done"


class _Progress:
    """``max(last_step)`` of the schema, polled over one connection."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.schema = schema

    def last_step(self) -> int:
        try:
            row = self.conn.execute(f'SELECT max(last_step) FROM "{self.schema}".runs').fetchone()
        except psycopg.errors.UndefinedTable:
            return -1
        return -1 if row is None or row[0] is None else int(row[0])

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def pg(pg_dsn: str, pg_schema: str) -> tuple[str, str]:
    return pg_dsn, pg_schema


@pytest.fixture(scope="module")
def reference(pg_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    out = {}
    for shape in ("long", "small", "nested"):
        tmp = tmp_path_factory.mktemp(f"pgref-{shape}")
        schema = f"ref_{shape}"
        out[shape] = _finish(pg_dsn, schema, tmp, "r", shape)
        _check_history(pg_dsn, schema, tmp, "r", out[shape])
    return out


def test_reference_run_is_complete(reference: dict[str, dict[str, Any]]) -> None:
    assert len(reference["long"]["log"]) == 12 + 5 + 1 + 16
    assert reference["small"]["log"] == ["a", "b", "c", "d"]
    assert len(reference["nested"]["log"]) == 20


@pytest.mark.parametrize(
    ("shape", "trial"),
    [("long", t) for t in range(TRIALS)] + [("nested", t) for t in range(max(2, TRIALS // 4))],
)
def test_sigkill_at_random_moments_on_postgres(
    shape: str, trial: int, tmp_path: Path, pg: tuple[str, str], reference: dict[str, Any]
) -> None:
    pg_dsn, pg_schema = pg
    rng = random.Random(SEED + trial + (10_000 if shape == "nested" else 0))
    seed_note = f"chaos seed {SEED}, trial {trial} (STARGRAPH_CHAOS_SEED={SEED})"
    kills = []
    progress = _Progress(pg_dsn, pg_schema)
    try:
        for _ in range(2):
            proc = subprocess.Popen(
                _args(pg_dsn, pg_schema, tmp_path, "r", shape),
                env=_pg_env(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            target = rng.randrange(-1, 9 if shape == "nested" else 28)
            deadline = time.monotonic() + 60
            while progress.last_step() < target and proc.poll() is None:
                assert time.monotonic() < deadline, seed_note
                time.sleep(0.002)
            time.sleep(rng.uniform(0, 0.012))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                kills.append(progress.last_step())
            _, err = proc.communicate(timeout=60)
            assert proc.returncode in (0, -signal.SIGKILL), f"{seed_note}: {err.decode()}"
    finally:
        progress.close()
    assert kills, f"{seed_note}: the run finished before any kill; the trial tested nothing"
    final = _finish(pg_dsn, pg_schema, tmp_path, "r", shape)
    assert final == reference[shape], f"{seed_note}, killed after steps {kills}"
    _check_history(pg_dsn, pg_schema, tmp_path, "r", final)


@pytest.mark.parametrize("step", [1, 3])
@pytest.mark.parametrize("point", POINTS)
def test_named_crash_points_on_postgres(
    point: str, step: int, tmp_path: Path, pg: tuple[str, str], reference: dict[str, Any]
) -> None:
    pg_dsn, pg_schema = pg
    env = _pg_env()
    env["SG_CRASH_AT"] = f"{point}:{step}"
    crashed = subprocess.run(
        _args(pg_dsn, pg_schema, tmp_path, "r", "small"),
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert crashed.returncode == 137, crashed.stderr
    final = _finish(pg_dsn, pg_schema, tmp_path, "r", "small")
    assert final == reference["small"]
    _check_history(pg_dsn, pg_schema, tmp_path, "r", final)
    if point in ("before_node", "after_effect"):
        assert sum(1 for _, s in _ledger(tmp_path) if s == step) == 1
