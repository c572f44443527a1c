"""Workers on PostgreSQL run an agent that needs services: a ReAct agent (a real ``openai``
client on the scripted server, an arbiter with a tool) queued on PostgreSQL is finished by
an in-process ``Worker(services=...)`` and by a ``stargraph worker --services module:fn``
process, with the final state of a plain ``invoke``; without the services the run fails with
the typed error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stargraph.checkpoint import PostgresStore
from stargraph.testing import ScriptedOpenAIServer
from stargraph.workers import Worker, submit
from tests.workers import agent44
from tests.workers.agent44 import AGENT, COMPILED, PIN, plain_invoke

pytestmark = pytest.mark.postgres  # a PostgreSQL server (tests/postgres/pgcluster.py)

ROOT = Path(__file__).resolve().parents[2]  # on PYTHONPATH: workers import tests.workers.*


def stored_state(dsn: str, schema: str, run_id: str) -> Any:
    with PostgresStore(dsn, schema=schema) as store:
        return agent44.agent().compile(store=store).get_state(run_id)


def test_issue44_pg_in_process_worker_services_finish_an_agent(
    tmp_path: Path, pg_dsn: str, pg_schema: str
) -> None:
    expected = plain_invoke(tmp_path)
    run_id = submit(pg_dsn, AGENT, agent44.TASK, schema=pg_schema, graph_hash=PIN)
    with ScriptedOpenAIServer() as server:
        server.set_script(agent44.script())
        with Worker(
            pg_dsn,
            schema=pg_schema,
            lease_s=30,
            services=lambda: agent44.make_services(server.base_url, tmp_path),
        ) as worker:
            assert worker.run_once() == "done", worker.queue.get(run_id).reason
    assert stored_state(pg_dsn, pg_schema, run_id) == expected


def test_issue44_pg_stargraph_worker_services_subprocess_finishes_an_agent(
    tmp_path: Path, pg_dsn: str, pg_schema: str
) -> None:
    expected = plain_invoke(tmp_path)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    db = ["--db", pg_dsn, "--schema", pg_schema]

    def stargraph(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", "from stargraph.cli import main; main()", *args],
            cwd=ROOT,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=300,  # only to catch a hang
            check=False,
        )

    queued = stargraph(
        "submit", COMPILED, *db, "--input", json.dumps(agent44.TASK), "--run-id", "p-1"
    )
    assert queued.returncode == 0, queued.stderr
    with ScriptedOpenAIServer() as server:
        server.set_script(agent44.script())
        worked = stargraph(
            "worker",
            *db,
            "--services",
            "tests.workers.agent44:services",
            "--max-runs",
            "1",
            "--idle-exit",
            "120",
            SG44_BASE_URL=server.base_url,
            SG44_WORKSPACE=str(tmp_path),
        )
    assert worked.returncode == 0, worked.stderr
    assert json.loads(worked.stdout) == {"run_id": "p-1", "outcome": "done"}
    assert stored_state(pg_dsn, pg_schema, "p-1") == expected


def test_issue44_pg_a_worker_without_the_services_fails_the_run_with_a_typed_error(
    pg_dsn: str, pg_schema: str
) -> None:
    run_id = submit(pg_dsn, AGENT, agent44.TASK, schema=pg_schema)
    with Worker(pg_dsn, schema=pg_schema, lease_s=30) as worker:
        assert worker.run_once() == "failed"
        reason = worker.queue.get(run_id).reason or ""
        record = worker.store.get_run(run_id)
    assert reason.startswith("MissingServiceError: node 'think' "), reason
    assert record.status == "failed"
    assert "needs services['model'], which this worker was not given" in (record.error or "")
