"""The pieces behind the Studio-style run page, without a browser: the state diff, the
serve tables read for tokens, the answer routed to a server, the CLI's ``--api``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from stargraph.checkpoint import MemoryStore, SqliteStore
from stargraph.errors import CompileError
from stargraph.ui import UiSettings, create_app
from stargraph.ui._served import ServedText
from stargraph.ui._timeline import Change, state_changes
from tests.ui.ui_graphs import approval_graph, loop_graph, scripted_model

LOCAL = "http://127.0.0.1"


def test_issue50_state_changes_name_each_path_and_what_happened_to_it() -> None:
    before = {"n": 1, "log": ["a"], "gone": 1, "deep": {"x": 1, "y": [1]}, "same": "s"}
    after = {"n": 2, "log": ["a", "b"], "new": True, "deep": {"x": 1, "y": [2]}, "same": "s"}
    assert state_changes(before, after) == [
        Change("deep.y", "changed", [1], [2]),
        Change("gone", "removed", before=1),
        Change("log", "appended", ["a"], ["b"]),
        Change("n", "changed", 1, 2),
        Change("new", "added", after=True),
    ]
    assert state_changes(after, after) == []
    # A list that lost or reordered items is changed, not appended to.
    assert state_changes({"l": [1, 2]}, {"l": [2, 1, 3]}) == [
        Change("l", "changed", [1, 2], [2, 1, 3])
    ]


def test_issue50_inspector_and_timeline_over_http(store: SqliteStore) -> None:
    loop = loop_graph().compile(store=store)
    loop.invoke({"limit": 2}, run_id="loop-1")
    with TestClient(create_app(store, graphs=[loop]), base_url=LOCAL) as client:
        shown = client.get("/runs/loop-1/inspect?step=2")
        assert shown.status_code == 200
        assert '<tr class="changed" data-path="n">' in shown.text
        assert '<tr class="appended" data-path="log">' in shown.text
        assert client.get("/runs/loop-1/inspect?step=9").status_code == 404
        lines = client.get("/runs/loop-1/timeline?after=0&upto=2").text
        assert lines.count('<li class="tl-step"') == 2  # steps 1 and 2, as a live page asks
        nested = client.get("/runs/loop-1/timeline?nested=1").text
        assert '<ol class="tl nested">' in nested
        assert 'class="tl-select"' not in nested  # a child's steps are not chosen in place


def test_issue50_inspector_without_the_graph_says_why(store: SqliteStore) -> None:
    loop = loop_graph().compile(store=store)
    loop.invoke({"limit": 1}, run_id="loop-1")
    with TestClient(create_app(store), base_url=LOCAL) as client:
        shown = client.get("/runs/loop-1/inspect?step=1").text
    assert "does not know this run&#x27;s graph" in shown


def test_issue50_state_at_refuses_a_state_ref_that_is_no_pydantic_model(
    store: SqliteStore,
) -> None:
    from stargraph.viz import state_at

    loop = loop_graph().compile(store=store)
    loop.invoke({"limit": 1}, run_id="loop-1")
    ir = loop.ir.model_copy(
        update={"state": loop.ir.state.model_copy(update={"ref": "builtins:dict"})}
    )
    with pytest.raises(CompileError, match="not a pydantic model") as caught:
        state_at(ir, store, "loop-1")
    assert "model=CompiledGraph.state_model" in str(caught.value)
    assert state_at(ir, store, "loop-1", model=loop.state_model)["n"] == 1


def test_issue50_served_text_is_empty_without_serve_tables(store: SqliteStore) -> None:
    # A database no server used: nothing read, and no table made in it.
    served = ServedText(store)
    assert served.of("anything") == []
    assert served.started("anything") is None
    import sqlite3

    with sqlite3.connect(store.path) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert not {n for n in names if n.startswith("serve_")}
    assert ServedText(MemoryStore()).of("anything") == []


def test_issue50_without_api_an_answer_is_the_consoles_own(store: SqliteStore) -> None:
    approval = approval_graph().compile(store=store, services={"model": scripted_model()})
    approval.invoke({"item": "widget"}, run_id="order-1")
    settings = UiSettings(api="http://127.0.0.1:9")  # nothing listens there
    app = create_app(store, graphs=[approval], settings=settings)
    with TestClient(app, base_url=LOCAL) as client:
        page = client.get("/runs/order-1")
        # No server started this run: the console answers it and says nothing of a server.
        assert 'id="approve"' in page.text
        assert 'id="answer-via"' not in page.text
    app.state.console.close()


def test_issue50_cli_passes_api_to_the_console(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from stargraph import ui
    from stargraph.cli._app import cli

    seen: dict[str, Any] = {}

    def fake_create_app(store: Any, **kwargs: Any) -> Any:
        seen["settings"] = kwargs["settings"]
        raise SystemExit(0)  # stop before serving

    monkeypatch.setattr(ui, "create_app", fake_create_app)
    db = str(tmp_path / "runs.db")
    SqliteStore(db).close()  # the console opens a database that holds runs
    result = CliRunner().invoke(
        cli, ["ui", "--db", db, "--api", "http://127.0.0.1:8123", "--api-token", "t0k"]
    )
    assert result.exit_code == 0, result.output
    assert (seen["settings"].api, seen["settings"].api_token) == ("http://127.0.0.1:8123", "t0k")
