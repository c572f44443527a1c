"""Workers on PostgreSQL: many processes share a queue, dead workers' runs are resumed by
others, a run that kills its workers is dead-lettered, and a worker whose lease was taken
over stops without writing a step. ``STARGRAPH_PG_WORKER_TRIALS`` sets the number of SIGKILL
trials (default 20, the acceptance figure; `make chaos` runs 100)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest

from stargraph.checkpoint import PostgresStore
from stargraph.workers import Claim, Worker, open_queue, submit
from tests.postgres import workgraph

pytestmark = pytest.mark.postgres  # a PostgreSQL server (tests/postgres/pgcluster.py)

ROOT = Path(__file__).resolve().parents[2]  # on PYTHONPATH: workers import tests.postgres.*
TRIALS = int(os.environ.get("STARGRAPH_PG_WORKER_TRIALS", "20"))  # the issue asks for 20
SEED = int(os.environ.get("STARGRAPH_CHAOS_SEED", "20261122"))


def _env(dsn: str, schema: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.update(SG_LEDGER=dsn, SG_LEDGER_SCHEMA=schema, **extra)
    return env


def _spawn(dsn: str, schema: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "stargraph.workers", "--db", dsn, "--schema", schema, *args],
        env=_env(dsn, schema, **env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _check_all_done(dsn: str, schema: str, expected_steps: int) -> list[tuple[str, int]]:
    """Every queued run finished exactly once: queue row done, run done, steps contiguous,
    one ledger entry per node execution of the final history. Returns (run, attempts)."""
    queue = open_queue(dsn, schema=schema)
    try:
        items = queue.items()
    finally:
        queue.close()
    executed = []
    with PostgresStore(dsn, schema=schema) as store:
        for item in items:
            assert item.status == "done", item
            run = store.get_run(item.run_id)
            assert run.status == "done", run
            steps = store.get_steps(item.run_id)
            assert [s.step for s in steps] == list(range(expected_steps + 1)), item.run_id
            executed += [(item.run_id, w.node, s.step) for s in steps for w in s.writes]
    assert sorted(workgraph.ledger_rows(dsn, schema)) == sorted(executed)
    return [(item.run_id, item.attempts) for item in items]


def test_four_workers_share_200_runs(pg_dsn: str, pg_schema: str) -> None:
    workgraph.setup_ledger(pg_dsn, pg_schema)
    PostgresStore(pg_dsn, schema=pg_schema).close()  # migrate before the workers race
    ids = [
        submit(pg_dsn, "tests.postgres.workgraph:small", {"total": i}, schema=pg_schema)
        for i in range(100)
    ]
    procs = [
        _spawn(pg_dsn, pg_schema, "--lease", "10", "--poll", "0.5", "--idle-exit", "3")
        for _ in range(4)
    ]
    time.sleep(1.0)  # the rest arrive while workers run or wait on LISTEN
    queue = open_queue(pg_dsn, schema=pg_schema)
    try:
        ids += [
            queue.submit("tests.postgres.workgraph:small", {"total": i}) for i in range(100, 200)
        ]
    finally:
        queue.close()
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    attempts = dict(_check_all_done(pg_dsn, pg_schema, expected_steps=3))
    assert sorted(attempts) == sorted(ids)
    assert set(attempts.values()) == {1}, "no run was claimed twice"
    with PostgresStore(pg_dsn, schema=pg_schema) as store:
        # Each run's own input arrived: total = input + 4 nodes.
        assert sorted(len(s.writes) for s in store.get_steps(ids[7])) == [0, 1, 1, 2]
    with psycopg.connect(pg_dsn) as conn:
        owners = conn.execute(
            f"SELECT count(DISTINCT split_part(lease_owner, ':', 2)) FROM \"{pg_schema}\".queue"
        ).fetchone()
    assert owners is not None
    assert owners[0] >= 2, "the work was shared"


def _owner_pids(dsn: str, schema: str) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            f"SELECT lease_owner FROM \"{schema}\".queue WHERE status = 'running'"
        ).fetchall()
    return [int(row[0].split(":")[1]) for row in rows]


def _committed(dsn: str, schema: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            row = conn.execute(
                f'SELECT coalesce(sum(last_step), 0) FROM "{schema}".runs'
            ).fetchone()
        except psycopg.errors.UndefinedTable:
            return 0
    return 0 if row is None else int(row[0])


def _wait_until_drained(
    dsn: str, schema: str, workers: list[subprocess.Popen[bytes]], note: str
) -> None:
    """Poll until no run is queued or running (the checks after say whether each ended
    done), failing early if a worker died or the deadline passes."""
    deadline = time.monotonic() + 120
    while True:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                f"SELECT count(*) FROM \"{schema}\".queue WHERE status IN ('queued', 'running')"
            ).fetchone()
        if row is not None and row[0] == 0:
            return
        for proc in workers:
            assert proc.poll() is None, f"{note}: a worker exited early: {proc.returncode}"
        assert time.monotonic() < deadline, f"{note}: {row} runs still queued after 120 s"
        time.sleep(0.05)


@pytest.mark.parametrize("trial", range(TRIALS))
def test_sigkill_a_worker_mid_run(trial: int, pg_dsn: str, pg_schema: str) -> None:
    rng = random.Random(SEED + trial)
    note = f"worker chaos seed {SEED}, trial {trial}"
    workgraph.setup_ledger(pg_dsn, pg_schema)
    PostgresStore(pg_dsn, schema=pg_schema).close()
    for _ in range(9):
        submit(pg_dsn, "tests.postgres.workgraph:chain", {}, schema=pg_schema)
    # A 2 s lease renewed every 0.2 s: a loaded 2-core CI machine can stall a healthy worker
    # for over a second, and a lease that short would hand its run over spuriously. No
    # --idle-exit: the survivors are stopped with SIGTERM once the queue is drained, instead
    # of each trial idling for seconds (test_four_workers_share_200_runs covers idle exit).
    args = ("--lease", "2", "--heartbeat", "0.2", "--poll", "0.2")
    procs = [_spawn(pg_dsn, pg_schema, *args, SG_NODE_SLEEP="0.02") for _ in range(3)]
    target = rng.randrange(1, 40)
    deadline = time.monotonic() + 60
    while _committed(pg_dsn, pg_schema) < target:
        assert time.monotonic() < deadline, note
        time.sleep(0.005)
    time.sleep(rng.uniform(0, 0.03))  # a random moment, not a guess about speed
    # Freeze every worker before reading who owns what: a running worker can finish its run
    # between the read and the kill, and the victim would then own nothing (a check-then-act
    # race). Stopped, the owners read here are still the owners when the victim dies.
    for proc in procs:
        proc.send_signal(signal.SIGSTOP)
    owners = [p for p in procs if p.pid in _owner_pids(pg_dsn, pg_schema)]
    victim = rng.choice(owners or procs)
    victim.send_signal(signal.SIGKILL)
    for proc in procs:
        if proc is not victim:
            proc.send_signal(signal.SIGCONT)
    survivors = [p for p in procs if p is not victim]
    _wait_until_drained(pg_dsn, pg_schema, survivors, note)
    for proc in survivors:
        proc.send_signal(signal.SIGTERM)  # idle now: a worker asked to stop exits with 0
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        expected = -signal.SIGKILL if proc is victim else 0
        assert proc.returncode == expected, f"{note}: {err.decode()}"
    attempts = _check_all_done(pg_dsn, pg_schema, expected_steps=8)
    if owners:
        assert max(a for _, a in attempts) == 2, f"{note}: the victim's run was taken over"
    # No committed step was executed twice: the only re-execution allowed is the victim's
    # step in flight (a worker runs one run at a time), redone by the run's next owner.
    keys = Counter(row[0] for row in workgraph.ledger_rows(pg_dsn, pg_schema, "executions"))
    assert sum(keys.values()) - len(keys) <= 1, f"{note}: {keys.most_common(3)}"


def test_run_that_kills_its_workers_is_dead_lettered(pg_dsn: str, pg_schema: str) -> None:
    workgraph.setup_ledger(pg_dsn, pg_schema)
    run_id = submit(
        pg_dsn, "tests.postgres.workgraph:suicide", {}, max_attempts=1, schema=pg_schema
    )
    first = _spawn(pg_dsn, pg_schema, "--lease", "0.3", "--max-runs", "1")
    _, err = first.communicate(timeout=60)
    assert first.returncode == 137, err.decode()
    second = _spawn(pg_dsn, pg_schema, "--lease", "0.3", "--poll", "0.1", "--idle-exit", "1.5")
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err.decode()
    queue = open_queue(pg_dsn, schema=pg_schema)
    try:
        item = queue.get(run_id)
    finally:
        queue.close()
    assert item.status == "dead"
    assert item.attempts == 2
    assert item.reason is not None
    assert "max_attempts=1" in item.reason
    with PostgresStore(pg_dsn, schema=pg_schema) as store:
        assert store.get_run(run_id).last_step == 1, "the first step survived"


def _claim_within(worker: Worker, seconds: float) -> Claim:
    """Poll ``worker.claim()`` until a run's lease has run out and it is taken, or fail."""
    deadline = time.monotonic() + seconds
    while (taken := worker.claim()) is None:
        assert time.monotonic() < deadline, f"nothing to claim within {seconds} s"
        time.sleep(0.02)
    return taken


@pytest.mark.parametrize("heartbeat", [False, True])
def test_a_worker_that_lost_its_lease_stops_without_writing(
    pg_dsn: str, pg_schema: str, heartbeat: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SG_LEDGER", pg_dsn)
    monkeypatch.setenv("SG_LEDGER_SCHEMA", pg_schema)
    workgraph.setup_ledger(pg_dsn, pg_schema)
    run_id = submit(pg_dsn, "tests.postgres.workgraph:chain", {}, schema=pg_schema)
    stale = Worker(pg_dsn, schema=pg_schema, lease_s=0.3, heartbeat_s=0.05 if heartbeat else 0)
    fresh = Worker(pg_dsn, schema=pg_schema, lease_s=30)
    # Heartbeats pass a gate: with it shut, the stale worker's next renewal waits, so the
    # lease can be expired and taken over without a renewal slipping in between.
    beats_open, beat_parked = threading.Event(), threading.Event()
    beats_open.set()
    renew = stale.queue.renew

    def gated_renew(claim: Claim, owner: str, lease_s: float) -> bool:
        if not beats_open.is_set():
            beat_parked.set()
            beats_open.wait(30)
        return renew(claim, owner, lease_s)

    monkeypatch.setattr(stale.queue, "renew", gated_renew)
    workgraph.HOLD_ARMED.set()
    workgraph.REACHED.clear()
    workgraph.RELEASE.clear()
    try:
        claim = stale.claim()
        assert claim is not None
        outcome: list[str] = []
        thread = threading.Thread(target=lambda: outcome.append(stale.process(claim)))
        thread.start()
        assert workgraph.REACHED.wait(30), "the stale worker reached the held step"
        if heartbeat:  # the worker is alive but its lease is taken: expire it by hand
            beats_open.clear()
            assert beat_parked.wait(30), "the heartbeat reached the gate (none in flight)"
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute(
                    f"UPDATE \"{pg_schema}\".queue SET lease_expires = now() - interval '1s'"
                )
        # Without heartbeats the 0.3 s lease of the hung worker runs out on its own.
        taken = _claim_within(fresh, 30)
        beats_open.set()  # the parked renewal now finds the lease taken: the worker stops
        assert (taken.run_id, taken.attempts) == (run_id, 2)
        assert fresh.process(taken) == "done"
        workgraph.RELEASE.set()
        thread.join(30)
        assert outcome == ["lost"]
    finally:
        beats_open.set()
        workgraph.RELEASE.set()
        stale.close()
        fresh.close()
        workgraph.close_ledger()
    queue = open_queue(pg_dsn, schema=pg_schema)
    try:
        item = queue.get(run_id)
    finally:
        queue.close()
    assert (item.status, item.lease_owner) == ("done", fresh.name)
    _check_all_done(pg_dsn, pg_schema, expected_steps=8)
