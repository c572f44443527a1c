"""The console as a client of ``stargraph serve``.

Live tokens of a run another process runs: ``stargraph serve``, in a process of its own,
runs the graph on the console's SQLite database, its model reply held mid-stream by the
scripted server of this test; the console's page, open on the run, shows the words sent so
far before the step commits, then the whole reply in the step once it does. And an answer
to an interrupt of a run the server started goes through the server's API, which resumes
it: the console needs no graph for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from stargraph.checkpoint import SqliteStore
from stargraph.client import Client
from stargraph.testing import Reply
from stargraph.ui import UiSettings
from tests.serve.support import DEADLINE_S, InProcess
from tests.ui.cdp import Browser, check_page
from tests.ui.served_graphs import scribe
from tests.ui.ui_graphs import HeldServer

pytestmark = pytest.mark.browser  # Debian's headless chromium (scripts/ensure_chromium.sh)

LETTER = "Dear Ada, the kettle ships on Monday. Regards, Bob"


def test_issue50_tokens_of_a_run_in_another_process_stream_to_the_page(
    browser: Browser,
    serve: Any,
    store: SqliteStore,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The scripted server sends the role chunk and three words, then holds the reply.
    with HeldServer([Reply.text(LETTER)], hold_after=4) as model:
        api = InProcess(
            "tests/ui/served_graphs.py:app",
            "--db",
            str(store.path),
            "--workers",
            "1",
            env={"SG_TEST_MODEL_URL": model.base_url},
        )
        try:
            with httpx.Client(base_url=api.url, timeout=DEADLINE_S) as http:
                thread = http.post("/threads", json={}).json()["thread_id"]
                started = http.post(
                    f"/threads/{thread}/runs", json={"assistant_id": "scribe", "input": {}}
                )
                assert started.status_code == 200, started.text
                run_id = started.json()["run_id"]
            assert model.held.wait(DEADLINE_S), "the served run never called the model"
            served = serve([scribe.compile(store=store)])
            browser.open(f"{served.url}/runs/{run_id}")
            text = "document.querySelector('#live-calls .live-call .text')"
            browser.wait_for(
                f"{text} && {text}.textContent === 'Dear Ada, the'",
                "the first words of the reply, while the model call is open in the server",
            )
            assert browser.eval("document.getElementById('live-output').hidden") is False
            record = store.get_run(run_id)
            assert (record.status, record.last_step) == ("running", 0)  # nothing committed
            who = browser.eval("document.querySelector('#live-calls .who').textContent")
            assert who == "assistant, streaming: write in step 1"
            check_page(browser, tmp_path / "served-tokens.png", capsys)
            model.release.set()
            browser.wait_for(
                "document.readyState === 'complete' && document.querySelector('#run-status') &&"
                " document.querySelector('#run-status').textContent === 'done'",
                "the served run to finish",
            )
        finally:
            api.close()
    assert browser.eval("document.getElementById('live-output').hidden") is True
    browser.eval("document.querySelector('details.call.llm').open = true")
    assert browser.eval("document.querySelector('.chat.reply .text').textContent") == LETTER
    assert browser.console_errors() == []


def test_issue50_an_answer_to_a_served_run_goes_through_the_servers_api(
    browser: Browser,
    serve: Any,
    store: SqliteStore,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    api = InProcess("tests/serve/graphs.py:review", "--db", str(store.path), "--workers", "1")
    try:
        with Client(api.url) as client:
            thread = client.create_thread()
            run_id = client.start(thread, "review", {"topic": "kettles"})["run_id"]
            client.join(thread, run_id)
            assert client.thread(thread)["status"] == "interrupted"
            # The console knows no graph: only the server can resume this run.
            served = serve([], UiSettings(poll_s=0.05, api=api.url))
            browser.open(f"{served.url}/runs/{run_id}")
            assert browser.eval("document.querySelector('#run-status').textContent") == (
                "interrupted"
            )
            via = browser.eval("document.getElementById('answer-via').textContent")
            assert api.url in via
            check_page(browser, tmp_path / "served-interrupt.png", capsys)
            browser.eval("document.querySelector('form.answer input[name=reason]').value = 'ok'")
            browser.click_and_wait_navigation("#approve")
            browser.wait_for(
                "document.readyState === 'complete' && document.querySelector('#run-status') &&"
                " document.querySelector('#run-status').textContent === 'done'",
                "the server to resume and finish the run",
            )
            turns = client.list_runs(thread)
            assert sorted(r["status"] for r in turns) == ["interrupted", "success"]
            assert client.state(thread)["values"]["verdict"] == str(
                {"approved": True, "reason": "ok"}
            )
    finally:
        api.close()
    assert browser.console_errors() == []
