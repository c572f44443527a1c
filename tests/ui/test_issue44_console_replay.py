"""The console's replay page: it lists the node bodies a replay runs again before anything
runs, and its stub field serves their recorded writes instead (the graph's plain nodes
append to a file: ``tests/replay/effectgraph.py``)."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from stargraph.checkpoint import SqliteStore
from stargraph.ui import UiSettings, create_app
from tests.replay.effectgraph import effects, lines

LOCAL = "http://127.0.0.1:8765"
EFFECTS = ["record", "stamp", "touch a"]


def _setup(store: SqliteStore, ledger: Path, **settings: Any) -> TestClient:
    app = effects().compile(store=store)
    app.invoke({"ledger": str(ledger), "items": ["a"]}, run_id="e-1")
    assert lines(ledger) == EFFECTS
    console = create_app(store, graphs=[app], settings=UiSettings(**settings))
    return TestClient(console, base_url=LOCAL)


def _csrf(text: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', text)
    assert found is not None
    return found.group(1)


def _post(client: TestClient, form: dict[str, str]) -> Any:
    return client.post("/runs/e-1/replay", data=form, headers={"origin": LOCAL})


def test_issue44_console_replay_page_lists_the_rerun_nodes_before_it_runs(
    store: SqliteStore, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    client = _setup(store, ledger)
    run_page = client.get("/runs/e-1").text
    assert 'href="/runs/e-1/replay" id="replay-link"' in run_page
    page = client.get("/runs/e-1/replay")
    assert page.status_code == 200, page.text
    reruns = re.search(r'<p id="replay-reruns"[^>]*>(.*?)</p>', page.text, re.S)
    assert reruns is not None
    assert "<code>record</code>, <code>touch</code>, <code>audit/stamp</code>" in reruns.group(1)
    assert 'id="replay-stub" value="must"' in page.text
    assert "replay-outcome" not in page.text
    preview = _post(client, {"csrf": _csrf(page.text), "stub": "all", "action": "preview"})
    assert preview.status_code == 200, preview.text
    assert "No node body runs again" in preview.text
    assert 'id="replay-stub" value="all"' in preview.text
    assert lines(ledger) == EFFECTS  # showing the plan ran nothing


def test_issue44_console_replay_with_stub_leaves_the_file_alone(
    store: SqliteStore, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    client = _setup(store, ledger)
    csrf = _csrf(client.get("/runs/e-1/replay").text)
    for stub in ("all", "record, touch, audit/stamp"):
        done = _post(client, {"csrf": csrf, "stub": stub, "action": "replay"})
        assert done.status_code == 200, done.text
        assert "The replay matches its record (4 steps, offline" in done.text
        assert lines(ledger) == EFFECTS
    again = _post(client, {"csrf": csrf, "stub": "must", "action": "replay"})
    assert "The replay matches its record" in again.text
    assert lines(ledger) == sorted(EFFECTS + EFFECTS)  # the bodies ran, as the page said
    wrong = _post(client, {"csrf": csrf, "stub": "nope", "action": "replay"})
    assert wrong.status_code == 400
    assert "stub names 'nope', not a node of the graph" in html.unescape(wrong.text)
    refused = client.post(
        "/runs/e-1/replay",
        data={"stub": "all", "action": "replay"},
        headers={"origin": LOCAL},
    )
    assert refused.status_code == 403


def test_issue44_a_read_only_console_offers_no_replay(store: SqliteStore, tmp_path: Path) -> None:
    client = _setup(store, tmp_path / "ledger.txt", read_only=True)
    assert "replay-link" not in client.get("/runs/e-1").text
    assert client.get("/runs/e-1/replay").status_code == 403
