"""The console's errors are pages with its security headers, and any run id opens."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from stargraph.checkpoint import SqliteStore
from stargraph.ui import RunGraph, UiSettings, create_app
from tests.ui.ui_graphs import loop_graph

LOCAL = "http://127.0.0.1:8765"
HEADERS = ("content-security-policy", "x-content-type-options", "referrer-policy")


def _client(store: SqliteStore, graphs: Any = (), **settings: Any) -> TestClient:
    app = create_app(store, graphs=graphs, settings=UiSettings(**settings))
    return TestClient(app, base_url=LOCAL, raise_server_exceptions=False)


def _is_page(response: Any, status: int) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("text/html"), response.headers
    for name in HEADERS:
        assert name in response.headers, (name, response.headers)
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    assert response.text.startswith("<!DOCTYPE html>"), response.text
    assert f'<h1 class="error">{status} ' in response.text


@pytest.fixture
def client(store: SqliteStore) -> TestClient:
    app = loop_graph().compile(store=store)
    app.invoke({"limit": 2}, run_id="loop-1")
    return _client(store, [app])


@pytest.mark.parametrize(
    "path",
    [
        "/runs/nobody",
        "/runs/nobody/rows",
        "/runs/nobody/state",
        "/runs/nobody/events",
        "/runs/nobody/nested",
        "/runs/nobody/fork?step=0",
        "/diff?a=nobody&b=loop-1",
        "/no/such/page",
    ],
)
def test_issue43_unknown_run_or_page_is_a_404_page(client: TestClient, path: str) -> None:
    response = client.get(path)
    _is_page(response, 404)


@pytest.mark.parametrize(
    "path",
    [
        "/runs/loop-1?page=x",
        "/runs/loop-1?page=-1",
        "/runs/loop-1/rows?after=abc",
        "/runs/loop-1/rows?after=-3",
        "/runs/loop-1/rows?after=1&upto=x",
        "/runs/loop-1/rows?after=2&upto=1",
        "/runs/loop-1/state?step=x",
        "/runs/loop-1/state?step=-1",
        "/runs/loop-1/state?step=%C2%B2",  # a digit to str.isdigit, not to int()
        "/runs/loop-1/fork?step=x",
        "/diff?a=loop-1&b=loop-1&page=x",
    ],
)
def test_issue43_bad_query_values_are_400_pages(client: TestClient, path: str) -> None:
    response = client.get(path)
    _is_page(response, 400)
    assert "?" in response.text  # names the query value it refused


def test_issue43_a_step_past_the_run_is_a_404_page(client: TestClient) -> None:
    response = client.get("/runs/loop-1/state?step=99")
    _is_page(response, 404)
    assert "no step 99" in response.text


def test_issue43_a_wrong_method_is_a_405_page(client: TestClient) -> None:
    response = client.post("/runs/loop-1/rows", headers={"origin": LOCAL})
    _is_page(response, 405)
    assert response.headers["allow"] == "GET"


def test_issue43_gate_refusals_carry_the_headers(store: SqliteStore) -> None:
    refused = _client(store, token="s3cret-token").get("/")
    _is_page(refused, 401)
    assert "needs its token" in refused.text


def test_issue43_an_unexpected_failure_is_a_500_page_without_traceback(
    store: SqliteStore,
) -> None:
    app = loop_graph().compile(store=store)
    app.invoke({"limit": 1}, run_id="loop-1")

    def broken(graph_hash: str) -> RunGraph | None:
        raise RuntimeError("resolver exploded near sk-live-0123456789")

    response = _client(store, broken).get("/runs/loop-1")
    _is_page(response, 500)
    assert "RuntimeError" in response.text
    assert "exploded" not in response.text
    assert "sk-live-0123456789" not in response.text
    assert "Traceback" not in response.text


@pytest.mark.parametrize(
    "run_id", ["a/rows", "a/state", "team/a/nested", "x%2Fy/events", "sp ace/é/fork"]
)
def test_issue43_run_ids_with_slashes_open(store: SqliteStore, run_id: str) -> None:
    app = loop_graph().compile(store=store)
    app.invoke({"limit": 2}, run_id=run_id)
    app.invoke({"limit": 1}, run_id="a")  # the run "a/rows" must not open as a's rows
    client = _client(store, [app])
    page = client.get(f"/runs/{quote(run_id, safe='')}")
    assert page.status_code == 200, page.text
    assert f'data-run="{run_id}"' in page.text
    assert "<h1>Run " in page.text
    rows = client.get(f"/runs/{quote(run_id, safe='')}/rows?after=0&upto=2")
    assert rows.status_code == 200, rows.text
    assert 'data-step="2"' in rows.text
    state = client.get(f"/runs/{quote(run_id, safe='')}/state?step=2")
    assert state.status_code == 200, state.text
    assert '"n": 2' in state.text
    # The runs list links to each run by its whole id.
    assert f'href="/runs/{quote(run_id, safe="")}"' in client.get("/").text
