"""PostgreSQL faults that leave nothing behind (issue 17 item 4): a worker's connection
killed in the middle of a commit (``pg_terminate_backend``) and the server restarted in the
middle of runs. Workers reconnect, resume from the last committed step, and every run
finishes exactly once: its history is contiguous and the side-effect ledger holds exactly
one entry per node execution of that history.

Each fault is made at a moment the test brings about and observes, never after a guessed
sleep: a trigger on the steps table makes the commit of a chosen step wait, inside its
statement, for an advisory lock the test holds; the test waits until every worker is
waiting there, then kills those connections or restarts the server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from stargraph.checkpoint import PostgresStore
from stargraph.errors import StoreUnavailableError
from stargraph.workers import open_queue, submit
from tests.postgres import pgcluster, workgraph

pytestmark = pytest.mark.postgres  # a PostgreSQL server (tests/postgres/pgcluster.py)

ROOT = Path(__file__).resolve().parents[2]  # on PYTHONPATH: workers import tests.postgres.*
DEADLINE_S = 60.0
STEPS = 6  # tests.postgres.faultgraph:chain


def _spawn(dsn: str, schema: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join([str(ROOT), full.get("PYTHONPATH", "")])
    full.update(SG_LEDGER=dsn, SG_LEDGER_SCHEMA=schema, **env)
    return subprocess.Popen(
        [sys.executable, "-m", "stargraph.workers", "--db", dsn, "--schema", schema, *args],
        env=full,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _wait_for(what: str, check: object) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def _check_each_run_finished_once(dsn: str, schema: str, ids: list[str]) -> Counter[str]:
    """Every queued run is done in the queue and the store, its steps are 0..STEPS, and
    the ledger holds one entry per node execution of the final histories. Returns how
    often each idempotency key was executed."""
    queue = open_queue(dsn, schema=schema)
    try:
        items = queue.items()
    finally:
        queue.close()
    assert sorted(item.run_id for item in items) == sorted(ids)
    executed = []
    with PostgresStore(dsn, schema=schema) as store:
        for item in items:
            assert item.status == "done", item
            run = store.get_run(item.run_id)
            assert (run.status, run.last_step) == ("done", STEPS), run
            steps = store.get_steps(item.run_id)
            assert [s.step for s in steps] == list(range(STEPS + 1)), item.run_id
            executed += [(item.run_id, w.node, s.step) for s in steps for w in s.writes]
    assert sorted(workgraph.ledger_rows(dsn, schema)) == sorted(executed)
    return Counter(row[0] for row in workgraph.ledger_rows(dsn, schema, "executions"))


def _finish(procs: list[subprocess.Popen[bytes]]) -> str:
    errors = []
    for proc in procs:
        _, err = proc.communicate(timeout=DEADLINE_S)
        assert proc.returncode == 0, err.decode()
        errors.append(err.decode())
    return "\n".join(errors)


HOLD_KEY = 1717


def _hold_commits_of_step(dsn: str, schema: str, step: int) -> psycopg.Connection[Any]:
    """Make every commit of ``step`` wait, inside its statement, while the returned
    connection lives (or until it runs ``pg_advisory_unlock``)."""
    holder = psycopg.connect(dsn, autocommit=True)
    holder.execute(
        f'CREATE FUNCTION "{schema}".hold_step() RETURNS trigger LANGUAGE plpgsql AS $$ '
        f"BEGIN IF NEW.step = {int(step)} THEN PERFORM pg_advisory_xact_lock({HOLD_KEY}); "
        "END IF; RETURN NEW; END $$"
    )
    holder.execute(
        f'CREATE TRIGGER hold BEFORE INSERT ON "{schema}".steps FOR EACH ROW '
        f'EXECUTE FUNCTION "{schema}".hold_step()'
    )
    holder.execute("SELECT pg_advisory_lock(%s)", (HOLD_KEY,))
    return holder


def _held_commits(dsn: str, schema: str) -> list[int]:
    """The backends whose commit waits on the hold (their statement writes ``steps``)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
            "AND wait_event_type = 'Lock' AND wait_event = 'advisory' AND query LIKE %s",
            (f'%INSERT INTO "{schema}".steps%',),
        ).fetchall()
    return [int(row[0]) for row in rows]


def test_a_connection_killed_mid_commit_is_retried_and_each_run_finishes_once(
    pg_dsn: str, pg_schema: str
) -> None:
    workgraph.setup_ledger(pg_dsn, pg_schema)
    PostgresStore(pg_dsn, schema=pg_schema).close()  # migrate before the workers race
    holder = _hold_commits_of_step(pg_dsn, pg_schema, 2)
    ids = [
        submit(pg_dsn, "tests.postgres.faultgraph:chain", {}, schema=pg_schema) for _ in range(4)
    ]
    args = ("--lease", "15", "--heartbeat", "1", "--poll", "0.2", "--idle-exit", "2")
    procs = [_spawn(pg_dsn, pg_schema, *args) for _ in range(2)]
    try:
        # Both workers are inside the commit of their run's step 2: kill them right there.
        victims: list[int] = []

        def every_worker_waits() -> bool:
            victims[:] = _held_commits(pg_dsn, pg_schema)
            return len(victims) == len(procs)

        _wait_for("every worker waits inside a commit", every_worker_waits)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for pid in victims:
                row = conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()
                assert row is not None
                assert row[0], pid
        holder.execute("SELECT pg_advisory_unlock(%s)", (HOLD_KEY,))
        stderr = _finish(procs)
    finally:
        holder.close()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    executions = _check_each_run_finished_once(pg_dsn, pg_schema, ids)
    assert "the database is unavailable" in stderr, stderr
    # Only a killed commit's step ran again (once per victim), and no run was re-claimed:
    # its worker reconnected and resumed it.
    assert sum(executions.values()) - len(executions) <= len(victims), executions
    queue = open_queue(pg_dsn, schema=pg_schema)
    try:
        assert {item.attempts for item in queue.items()} == {1}
    finally:
        queue.close()


def test_a_server_restart_mid_run_every_run_finishes_once() -> None:
    schema = "restart"
    with pgcluster.running_cluster() as cluster:
        dsn = cluster.dsn
        workgraph.setup_ledger(dsn, schema)
        PostgresStore(dsn, schema=schema).close()
        holder = _hold_commits_of_step(dsn, schema, 3)
        ids = [submit(dsn, "tests.postgres.faultgraph:chain", {}, schema=schema) for _ in range(6)]
        args = ("--lease", "20", "--heartbeat", "1", "--poll", "0.2", "--idle-exit", "2")
        procs = [_spawn(dsn, schema, *args) for _ in range(2)]
        try:
            _wait_for(
                "every worker waits inside a commit",
                lambda: len(_held_commits(dsn, schema)) == len(procs),
            )
            # Every connection drops (the hold's too: after the restart nothing waits).
            cluster.restart()
            stderr = _finish(procs)
        finally:
            holder.close()
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
        executions = _check_each_run_finished_once(dsn, schema, ids)
        assert "the database is unavailable" in stderr, stderr
        # A step cut off by the restart runs again (each worker had at most one in flight).
        assert sum(executions.values()) - len(executions) <= len(procs), executions


def test_an_unreachable_server_is_a_typed_error_naming_it(pg_cluster: pgcluster.Cluster) -> None:
    port = pgcluster.free_port()
    with pytest.raises(StoreUnavailableError, match=rf"127\.0\.0\.1:{port}.*server is up"):
        PostgresStore(f"postgresql://postgres@127.0.0.1:{port}/postgres", connect_timeout_s=2)


def test_sigterm_hands_a_workers_run_back_at_a_step_boundary(pg_dsn: str, pg_schema: str) -> None:
    """Issue 17 item 3 for workers: SIGTERM stops a worker's run at its next step boundary
    (``cancelled``, at the step reached) and queues it again at once, without waiting for
    the claim to lapse; the next worker resumes it, and every step's node runs once."""
    workgraph.setup_ledger(pg_dsn, pg_schema)
    PostgresStore(pg_dsn, schema=pg_schema).close()
    holder = _hold_commits_of_step(pg_dsn, pg_schema, 3)
    run_id = submit(pg_dsn, "tests.postgres.faultgraph:chain", {}, schema=pg_schema)
    first = _spawn(pg_dsn, pg_schema, "-v", "--lease", "30", "--idle-exit", "30")
    lines: list[str] = []
    seen = threading.Condition()

    def read() -> None:
        assert first.stderr is not None
        for raw in first.stderr:
            with seen:
                lines.append(raw.decode())
                seen.notify_all()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        _wait_for(
            "the worker waits inside step 3", lambda: len(_held_commits(pg_dsn, pg_schema)) == 1
        )
        first.send_signal(signal.SIGTERM)
        # Step 3 may finish once the worker has taken the signal in.
        with seen:
            assert seen.wait_for(
                lambda: any("is stopping" in line for line in lines), DEADLINE_S
            ), lines
        holder.execute("SELECT pg_advisory_unlock(%s)", (HOLD_KEY,))
        assert first.wait(DEADLINE_S) == 0, lines
        reader.join(DEADLINE_S)
    finally:
        holder.close()
        if first.poll() is None:
            first.kill()
        first.wait(DEADLINE_S)
        if first.stderr is not None:
            first.stderr.close()
    queue = open_queue(pg_dsn, schema=pg_schema)
    try:
        item = queue.get(run_id)
    finally:
        queue.close()
    assert (item.status, item.attempts, item.lease_owner) == ("queued", 0, None), item
    assert item.reason == "its worker stopped (SIGTERM); cancelled after step 3 and queued again"
    with PostgresStore(pg_dsn, schema=pg_schema) as store:
        record = store.get_run(run_id)
        assert (record.status, record.last_step, record.stopped_by, record.owner) == (
            "cancelled",
            3,
            "SIGTERM",
            None,
        )
    second = _spawn(pg_dsn, pg_schema, "--idle-exit", "1")
    _finish([second])
    executions = _check_each_run_finished_once(pg_dsn, pg_schema, [run_id])
    assert set(executions.values()) == {1}, "no step ran twice: it stopped between steps"
