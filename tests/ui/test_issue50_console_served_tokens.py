"""Live tokens of a run that another process runs: ``stargraph serve`` in a process of its own
runs the graph on the console's SQLite database, its model reply held mid-stream by the
scripted server of this test; the console's page, open on the run, shows the words sent so
far before the step commits, then the whole reply in the step once it does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from stargraph.checkpoint import SqliteStore
from stargraph.testing import Reply
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
