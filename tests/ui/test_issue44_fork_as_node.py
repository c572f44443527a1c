"""The console's fork form: route the edit as a node (``as_node``) and see the next tasks."""

from __future__ import annotations

import html
import json
import re
from typing import Any

from starlette.testclient import TestClient

from stargraph.checkpoint import SqliteStore
from stargraph.ui import UiSettings, create_app
from tests.runtime.test_issue44_fork_as_node import triage

LOCAL = "http://127.0.0.1:8765"


def _setup(store: SqliteStore) -> tuple[Any, TestClient]:
    app = triage().compile(store=store)
    app.invoke({"text": "my invoice"}, run_id="t-1")
    console = create_app(store, graphs=[app], settings=UiSettings())
    return app, TestClient(console, base_url=LOCAL)


def _form(client: TestClient) -> tuple[str, dict[str, str]]:
    page = client.get("/runs/t-1/fork?step=1")
    assert page.status_code == 200, page.text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    state = re.search(
        r'<textarea name="state" id="fork-state" rows="16">(.*?)</textarea>', page.text, re.S
    )
    assert csrf is not None
    assert state is not None
    edited = json.loads(html.unescape(state.group(1)))
    edited["category"] = "spam"
    return page.text, {"csrf": csrf.group(1), "step": "1", "state": json.dumps(edited)}


def _post(client: TestClient, form: dict[str, str]) -> Any:
    return client.post(
        "/runs/t-1/fork", data=form, headers={"origin": LOCAL}, follow_redirects=False
    )


def _next(page: str) -> str:
    found = re.search(r'<p id="fork-next">(.*?)</p>', page, re.S)
    assert found is not None, page
    return re.sub(r"<[^>]+>", "", found.group(1))


def test_issue44_console_fork_form_routes_as_node(store: SqliteStore) -> None:
    app, client = _setup(store)
    page, form = _form(client)
    assert '<option value="classify">classify</option>' in page
    assert "routing kept" in _next(page)
    assert _next(page).endswith(": investigate.")
    preview = _post(client, {**form, "as_node": "classify", "action": "preview"})
    assert preview.status_code == 200, preview.text
    assert _next(preview.text).endswith(": discard.")
    assert '<option value="classify" selected>' in preview.text
    assert '"spam"' in html.unescape(preview.text)  # the edit is kept in the form
    assert [r.run_id for r in app.list_runs()] == ["t-1"]  # a preview forks nothing
    done = _post(client, {**form, "as_node": "classify", "action": "fork"})
    assert done.status_code == 303, done.text
    new_id = done.headers["location"].removeprefix("/runs/")
    assert app.resume(new_id).log == ["classify", "discard"]


def test_issue44_console_fork_form_keeps_routing_and_refuses_unknown_nodes(
    store: SqliteStore,
) -> None:
    app, client = _setup(store)
    _, form = _form(client)
    kept = _post(client, {**form, "action": "preview"})
    assert _next(kept.text).endswith(": investigate.")
    bad = _post(client, {**form, "as_node": "nobody", "action": "fork"})
    assert bad.status_code == 400
    assert "nobody" in bad.text
    assert "classify" in bad.text
    assert [r.run_id for r in app.list_runs()] == ["t-1"]
