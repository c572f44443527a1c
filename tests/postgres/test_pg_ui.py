"""The run console over a real PostgreSQL store, served by uvicorn and read over HTTP.

The same pages and live events as over SQLite (``tests/ui``): the runs list, a run page, a
run gaining steps live, an answer that resumes the run, a nested skill run and a fork's
diff, all against the server ``conftest`` starts. On PostgreSQL the event streams wake on
the store's ``NOTIFY`` (``LISTEN`` on a connection per stream, closed when the client goes):
a commit by another process reaches the page with the poll interval set to an hour.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from stargraph.checkpoint import PostgresStore, StepRecord
from stargraph.checkpoint.conformance import make_run
from stargraph.testing import Reply
from stargraph.ui import UiSettings, create_app
from tests.serve.support import InThread
from tests.ui.served_graphs import scribe
from tests.ui.ui_graphs import (
    GATES,
    HeldServer,
    approval_graph,
    letter_model,
    loop_graph,
    scripted_model,
    trip_graph,
)
from tests.uvicorn_thread import UvicornThread

pytestmark = pytest.mark.postgres  # a PostgreSQL server (tests/postgres/pgcluster.py)

DEADLINE_S = 60.0


@pytest.fixture
def store(pg_dsn: str, pg_schema: str) -> Iterator[PostgresStore]:
    s = PostgresStore(pg_dsn, schema=pg_schema)
    try:
        yield s
    finally:
        s.close()


class Console(UvicornThread):
    """The console over ``store`` on a free loopback port, in a thread of the test."""

    def __init__(
        self, store: PostgresStore, graphs: list[Any], settings: UiSettings | None = None
    ) -> None:
        settings = settings or UiSettings(poll_s=0.05)
        app = create_app(store, graphs=graphs, settings=settings)
        super().__init__(app, before_stop=app.state.console.closing.set)
        self.http = httpx.Client(base_url=self.url, timeout=DEADLINE_S)

    def close(self) -> None:
        self.http.close()
        super().close()
        self.app.state.console.close()


@pytest.fixture
def serve() -> Iterator[Any]:
    started: list[Console] = []

    def start(
        store: PostgresStore, graphs: list[Any], settings: UiSettings | None = None
    ) -> Console:
        started.append(Console(store, graphs, settings))
        return started[-1]

    yield start
    for console in started:
        console.close()


def _wait_status(store: PostgresStore, run_id: str, status: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while store.get_run(run_id).status != status:
        assert time.monotonic() < deadline, store.get_run(run_id)
        time.sleep(0.02)


def test_runs_list_run_page_and_answer_over_postgres(store: PostgresStore, serve: Any) -> None:
    approval = approval_graph().compile(store=store, services={"model": scripted_model()})
    approval.invoke({"item": "widget", "api_key": "sk-live-0123456789"}, run_id="order-1")
    loop = loop_graph().compile(store=store)
    loop.invoke({"limit": 2}, run_id="loop-1")
    console = serve(store, [approval, loop])
    runs = console.http.get("/")
    assert runs.status_code == 200
    row = re.search(r'<tr data-run="order-1">(.*?)</tr>', runs.text)
    assert row is not None
    assert "interrupted" in row.group(1)
    assert ">150<" in row.group(1)  # the model call's tokens
    assert 'href="/runs/loop-1"' in runs.text
    assert "/runs/order-1" not in console.http.get("/?status=done").text
    page = console.http.get("/runs/order-1")
    assert page.status_code == 200
    assert 'class="msg role-user"' in page.text
    assert re.search(r'<g class="node node ran" data-node="draft">', page.text)
    assert "sk-live-0123456789" not in page.text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    answered = console.http.post(
        "/runs/order-1/answer",
        data={"csrf": csrf.group(1), "action": "approve"},
        headers={"origin": console.url},
    )
    assert answered.status_code == 303, answered.text  # to the run page
    _wait_status(store, "order-1", "done")
    assert approval.get_state("order-1").answer == {"approved": True}


def test_a_running_run_updates_live_over_postgres(store: PostgresStore, serve: Any) -> None:
    gate = GATES["pg-live"] = threading.Semaphore(0)
    loop = loop_graph().compile(store=store)
    worker = threading.Thread(
        target=loop.invoke, args=({"limit": 2, "gate": "pg-live"},), kwargs={"run_id": "live"}
    )
    worker.start()
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not [r for r in store.list_runs() if r.run_id == "live"]:
            assert time.monotonic() < deadline, "the run never started"
            time.sleep(0.02)
        console = serve(store, [loop])
        assert console.http.get("/runs/live").text.count('<tr class="step"') == 1
        events: list[dict[str, Any]] = []
        with console.http.stream("GET", "/runs/live/events") as stream:
            for line in stream.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
                    if len(events) == 1:
                        gate.release(2)  # let steps 1 and 2 commit
                    if events[-1]["status"] == "done":
                        break
        assert events[0] == {"last_step": 0, "status": "running"}
        steps = [e["last_step"] for e in events]
        assert steps == sorted(steps)
        assert events[-1] == {"last_step": 2, "status": "done"}
        rows = console.http.get("/runs/live/rows?after=0&upto=2").text
        assert [int(s) for s in re.findall(r'data-step="(\d+)"', rows)] == [1, 2]
    finally:
        gate.release(2)
        worker.join(DEADLINE_S)
    assert not worker.is_alive()


def test_child_runs_and_a_fork_diff_over_postgres(store: PostgresStore, serve: Any) -> None:
    trip = trip_graph().compile(store=store)
    trip.invoke({}, run_id="t1")
    trip.replay("t1", from_step=2, mutate={"city": "Bergen"}, new_run_id="t1b")
    console = serve(store, [trip])
    page = console.http.get("/runs/t1").text
    assert '<details class="child" data-url="/runs/t1%3A%3Ahotel%401.0/nested">' in page
    nested = console.http.get("/runs/t1%3A%3Ahotel%401.0/nested").text
    assert "booked Oslo" in nested
    diff = console.http.get("/diff", params={"a": "t1", "b": "t1b"}).text
    pairs = re.findall(r'<tr class="pair ([a-z-]+)" data-a="(\d*)" data-b="(\d*)">', diff)
    assert ("inserted", "", "2") in pairs
    assert ("differs", "2", "3") in pairs  # the hotel skill, re-run for Bergen
    assert "final state city: A = &quot;Oslo&quot;  B = &quot;Bergen&quot;" in diff


# Commits steps of run "far" in a process of its own, one per line read from stdin.
WRITER = """
import sys
from stargraph.checkpoint import PostgresStore, StepRecord
with PostgresStore(sys.argv[1], schema=sys.argv[2], application_name="far-writer") as store:
    for line in sys.stdin:
        step = int(line)
        store.commit_step("far", StepRecord(step=step), status="done" if step == 2 else "running")
        print(step, flush=True)
"""


def _listening(pg_dsn: str, channel: str) -> int:
    """How many connections LISTEN on ``channel`` now (other tests' schemas aside)."""
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'stargraph-listen' "
            "AND query = %s",
            (f'LISTEN "{channel}"',),
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_commit_by_another_process_wakes_the_event_stream_without_polling(
    store: PostgresStore, serve: Any, pg_dsn: str, pg_schema: str
) -> None:
    store.create_run(make_run("far"), StepRecord(step=0, snapshot={}))
    # The console would look at the store once an hour: only a NOTIFY can bring the steps.
    console = serve(store, [], UiSettings(poll_s=3600.0, recheck_s=3600.0))
    with subprocess.Popen(
        [sys.executable, "-c", WRITER, pg_dsn, pg_schema],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as writer:
        assert writer.stdin is not None
        assert writer.stdout is not None
        events: list[dict[str, Any]] = []
        with console.http.stream("GET", "/runs/far/events") as stream:
            for line in stream.iter_lines():  # each read is bounded by the client's timeout
                if not line.startswith("data: "):
                    continue
                events.append(json.loads(line[6:]))
                if len(events) == 1:
                    # The stream listens (it did before its first read of the store).
                    assert _listening(pg_dsn, store.channel) == 1
                step = events[-1]["last_step"]
                if step == 2:
                    break
                writer.stdin.write(f"{step + 1}\n")
                writer.stdin.flush()
                assert writer.stdout.readline().strip() == str(step + 1)
        writer.stdin.close()
        assert writer.wait(DEADLINE_S) == 0
    assert events == [
        {"last_step": 0, "status": "running"},
        {"last_step": 1, "status": "running"},
        {"last_step": 2, "status": "done"},
    ]
    # The client went away: its LISTEN connection is closed.
    deadline = time.monotonic() + DEADLINE_S
    while _listening(pg_dsn, store.channel) != 0:
        assert time.monotonic() < deadline, "the stream's LISTEN connection stayed open"
        time.sleep(0.02)


class _TwoHolds(HeldServer):
    """Holds the reply twice: before its first word (until ``go``), then after three."""

    def __init__(self, script: list[Reply]) -> None:
        super().__init__(script, hold_after=4)
        self.waiting = threading.Event()
        self.go = threading.Event()

    def chunks(self, reply: Reply, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        for sent, chunk in enumerate(super().chunks(reply, body)):
            if sent == 1:
                self.waiting.set()
                if not self.go.wait(120):
                    return  # the test never let go: the stream ends short
            yield chunk


def test_issue50_tokens_a_server_stores_wake_the_console_through_notify(
    store: PostgresStore, serve: Any, pg_dsn: str, pg_schema: str
) -> None:
    letter = "Dear Ada, the kettle ships on Monday."
    with _TwoHolds([Reply.text(letter)]) as model:
        app = scribe.compile(services={"model": letter_model(model)})
        api = InThread([app], pg_dsn, schema=pg_schema, workers=1)
        try:
            with httpx.Client(base_url=api.url, timeout=DEADLINE_S) as http:
                thread = http.post("/threads", json={}).json()["thread_id"]
                run_id = http.post(
                    f"/threads/{thread}/runs", json={"assistant_id": "scribe", "input": {}}
                ).json()["run_id"]
            assert model.waiting.wait(DEADLINE_S), "the served run never called the model"
            # The console would look once an hour: only the server's NOTIFY brings the words.
            console = serve(store, [], UiSettings(poll_s=3600.0, recheck_s=3600.0))
            seen: list[tuple[str, Any]] = []
            with console.http.stream("GET", f"/runs/{run_id}/events") as stream:
                event = ""
                for line in stream.iter_lines():  # each read is bounded by the client's timeout
                    if line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: "):
                        seen.append((event, json.loads(line[6:])))
                        if event == "run":
                            model.go.set()  # the page has read the store: now the words
                        elif event == "tokens" and seen[-1][1]:
                            # The server may store the first words in more than one
                            # write; the page shows each; the model holds after three.
                            text = seen[-1][1][0]["text"]
                            assert letter.startswith(text), text
                            if text == "Dear Ada, the":
                                break
            assert seen[0] == ("run", {"last_step": 0, "status": "running"})
            assert store.get_run(run_id).last_step == 0  # the step has not committed
            model.release.set()
            _wait_status(store, run_id, "done")
        finally:
            api.close()
