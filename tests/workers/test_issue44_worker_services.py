"""Workers run graphs that need services: a ReAct agent (a real ``openai`` client on the
scripted OpenAI-compatible server, an arbiter with a tool) submitted on SQLite is finished by
an in-process ``Worker(services=...)`` and by a ``stargraph worker --services module:fn``
process, with the final state of a plain ``invoke``; a worker without the services fails the
run with a typed error naming the node, the key and the fix; a worker whose graph hashes
otherwise than the submitted one refuses the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stargraph.checkpoint import SqliteStore
from stargraph.errors import CheckpointError
from stargraph.testing import ScriptedOpenAIServer
from stargraph.workers import Worker, submit
from stargraph.workers.__main__ import main as workers_main
from tests.workers import agent44
from tests.workers.agent44 import AGENT, COMPILED, PIN, plain_invoke

ROOT = Path(__file__).resolve().parents[2]  # on PYTHONPATH: workers import tests.workers.*


def stored_state(db: Path, run_id: str) -> Any:
    with SqliteStore(db) as store:
        return agent44.agent().compile(store=store).get_state(run_id)


@pytest.mark.parametrize("ref", [AGENT, COMPILED], ids=["factory", "compiled"])
def test_issue44_in_process_worker_services_finish_an_agent(tmp_path: Path, ref: str) -> None:
    expected = plain_invoke(tmp_path)
    db = tmp_path / "runs.db"
    run_id = submit(db, ref, agent44.TASK, graph_hash=PIN)
    with ScriptedOpenAIServer() as server:
        server.set_script(agent44.script())
        made: list[dict[str, Any]] = []

        def services() -> dict[str, Any]:
            made.append(agent44.make_services(server.base_url, tmp_path))
            return made[-1]

        with Worker(db, services=services, lease_s=30) as worker:
            assert worker.run_once() == "done", worker.queue.get(run_id).reason
            assert worker.run_once() is None
        assert len(made) == 1, "the services function is called once per worker"
        assert len(server.chat_requests) == 2
    assert stored_state(db, run_id) == expected
    assert expected.final_answer == "It is 42."


def test_issue44_stargraph_worker_services_subprocess_finishes_an_agent(tmp_path: Path) -> None:
    expected = plain_invoke(tmp_path)
    db = tmp_path / "runs.db"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    cli = [sys.executable, "-c", "from stargraph.cli import main; main()"]

    def stargraph(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*cli, *args],
            cwd=ROOT,
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=300,  # only to catch a hang
            check=False,
        )

    queued = stargraph(
        "submit", COMPILED, "--db", str(db), "--input", json.dumps(agent44.TASK), "--run-id", "a-1"
    )
    assert queued.returncode == 0, queued.stderr
    assert queued.stdout == "a-1\n"
    with ScriptedOpenAIServer() as server:
        server.set_script(agent44.script())
        worked = stargraph(
            "worker",
            "--db",
            str(db),
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
    assert json.loads(worked.stdout) == {"run_id": "a-1", "outcome": "done"}
    assert stored_state(db, "a-1") == expected


def test_issue44_a_worker_without_the_services_fails_the_run_with_a_typed_error(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    run_id = submit(db, AGENT, agent44.TASK)
    with Worker(db, lease_s=30) as worker:
        assert worker.run_once() == "failed"
        reason = worker.queue.get(run_id).reason or ""
        record = worker.store.get_run(run_id)
    assert record.status == "failed"
    assert reason.startswith("MissingServiceError: node 'think' "), reason
    assert (record.error or "").startswith("node 'think' "), record.error
    for text in (reason, record.error or ""):
        assert "needs services['model'], which this worker was not given" in text
        assert "Worker(db, services={'model': ...})" in text
        assert "stargraph worker --services module:fn" in text
        assert "KeyError" not in text


def test_issue44_a_worker_refuses_a_run_whose_graph_it_builds_otherwise(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run_id = submit(db, AGENT, agent44.TASK, graph_hash="sha256:" + "0" * 64)
    with Worker(db, lease_s=30) as worker:
        assert worker.run_once() == "failed"
        reason = worker.queue.get(run_id).reason or ""
        with pytest.raises(LookupError):
            worker.store.get_run(run_id)  # nothing ran
    assert reason.startswith("GraphHashMismatch: ")
    assert f"{AGENT} builds {PIN} in this worker" in reason


def test_issue44_a_plain_node_missing_a_worker_service_is_a_typed_error(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    missing = submit(db, "tests.workers.agent44:priced", {"item": "tea"})
    with Worker(db, lease_s=30) as worker:
        assert worker.run_once() == "failed"
        record = worker.store.get_run(missing)
    assert (record.error or "").startswith("node 'price' of run "), record.error
    assert "needs services['prices'], which this worker was not given" in (record.error or "")
    given = submit(db, "tests.workers.agent44:priced", {"item": "tea"})
    with Worker(db, lease_s=30, services={"prices": {"tea": 3}}) as worker:
        assert worker.run_once() == "done"
    assert stored_state_of(agent44.priced(), db, given).price == 3
    # A KeyError of the node's own data is no missing service and keeps its own error.
    broken = submit(db, "tests.workers.agent44:broken", {"item": "tea"})
    with Worker(db, lease_s=30) as worker:
        assert worker.run_once() == "failed"
        reason = worker.queue.get(broken).reason or ""
    assert "KeyError: 'tea'" in reason
    assert "MissingServiceError" not in reason


def stored_state_of(graph: Any, db: Path, run_id: str) -> Any:
    with SqliteStore(db) as store:
        return graph.compile(store=store).get_state(run_id)


def test_issue44_python_m_stargraph_workers_takes_services(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = plain_invoke(tmp_path)
    db = tmp_path / "runs.db"
    run_id = submit(db, AGENT, agent44.TASK, graph_hash=PIN)
    with ScriptedOpenAIServer() as server:
        server.set_script(agent44.script())
        monkeypatch.setenv("SG44_BASE_URL", server.base_url)
        monkeypatch.setenv("SG44_WORKSPACE", str(tmp_path))
        args = ["--db", str(db), "--services", "tests.workers.agent44:services"]
        assert workers_main([*args, "--max-runs", "1", "--idle-exit", "60"]) == 0
    assert stored_state(db, run_id) == expected


def test_issue44_worker_services_that_are_no_mapping_are_refused(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    with pytest.raises(CheckpointError, match="returned a list, not a mapping"):
        Worker(db, services=lambda: [1, 2])  # type: ignore[arg-type]
    with pytest.raises(CheckpointError, match="raised ZeroDivisionError: integer division"):
        Worker(db, services=lambda: {"model": 1 // 0})
    with pytest.raises(CheckpointError, match="takes a mapping or a function"):
        Worker(db, services=42)  # type: ignore[arg-type]
    assert workers_main(["--db", str(db), "--services", "tests.workers.agent44:nothing"]) == 2
