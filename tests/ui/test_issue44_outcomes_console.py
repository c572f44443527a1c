"""The console tells a halted run from a done one (badge, filter, the run page's rule and
reason) and shows a fork nobody continued as ``pending``, with its continue form."""

from __future__ import annotations

import re

from starlette.testclient import TestClient

from stargraph.checkpoint import SqliteStore
from stargraph.ui import UiSettings, create_app
from tests.runtime.test_issue44_outcomes import budget, success

LOCAL = "http://127.0.0.1:8765"


def _client(store: SqliteStore) -> TestClient:
    halting, finishing = budget.compile(store=store), success.compile(store=store)
    halting.invoke({}, run_id="b-1")
    finishing.invoke({"finish_at": 2}, run_id="s-1")
    finishing.fork("s-1", 1, new_run_id="f-1")
    console = create_app(store, graphs=[halting, finishing], settings=UiSettings())
    return TestClient(console, base_url=LOCAL)


def _badge(page: str, run_id: str) -> str:
    row = re.search(rf'<tr[^>]*>(?:(?!</tr>).)*?/runs/{run_id}".*?</tr>', page, re.S)
    assert row is not None, page
    badge = re.search(r'<span class="status status-(\w+)">', row.group(0))
    assert badge is not None, row.group(0)
    return badge.group(1)


def test_issue44_console_halted_badge_filter_and_reason(store: SqliteStore) -> None:
    client = _client(store)
    runs = client.get("/")
    assert runs.status_code == 200, runs.text
    assert (_badge(runs.text, "b-1"), _badge(runs.text, "s-1")) == ("halted", "done")
    assert _badge(runs.text, "f-1") == "pending"
    assert '<option value="halted">halted</option>' in runs.text
    halted = client.get("/?status=halted").text
    assert "/runs/b-1" in halted
    assert "/runs/s-1" not in halted
    page = client.get("/runs/b-1").text
    assert '<span class="status status-halted">halted</span>' in page
    assert "<code>termination/error_budget</code>" in page
    assert '<span id="stop-reason">error_budget_exhausted</span>' in page


def test_issue44_console_halted_is_not_green(store: SqliteStore) -> None:
    css = _client(store).get("/static/ui.css")
    assert css.status_code == 200
    done = re.search(r"\.status-done\{color:(#[0-9a-f]+)\}", css.text)
    halted = re.search(r"\.status-halted\{color:(#[0-9a-f]+)\}", css.text)
    assert done is not None
    assert halted is not None
    assert halted.group(1) != done.group(1)


def test_issue44_console_pending_fork_offers_continue(store: SqliteStore) -> None:
    page = _client(store).get("/runs/f-1").text
    assert '<span class="status status-pending">pending</span>' in page
    assert 'id="continue"' in page
