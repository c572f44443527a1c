"""``stargraph ui --secrets-from`` and the graphs' registered secrets mask the console."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import uvicorn
from click.testing import CliRunner
from starlette.testclient import TestClient

from stargraph.checkpoint import SqliteStore
from stargraph.cli._app import cli
from stargraph.tools import Secrets
from stargraph.ui import UiSettings, create_app
from tests.ui.ui_graphs import approval_graph, scripted_model

LOCAL = "http://127.0.0.1:8765"
KEY = "pk-9f8e7d6c5b4a"  # under a field name the console does not mask by itself


def _run(store: SqliteStore, services: dict[str, Any]) -> Any:
    app = approval_graph().compile(store=store, services=services)
    app.invoke({"item": f"widget {KEY}"}, run_id="order-1")
    return app


def test_issue43_console_masks_the_graphs_registered_secrets(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "runs.db")
    try:
        app = _run(store, {"model": scripted_model(), "vault": Secrets({"vendor": KEY})})
        client = TestClient(create_app(store, graphs=[app], settings=UiSettings()), base_url=LOCAL)
        page = client.get("/runs/order-1").text
        state = client.get("/runs/order-1/state?step=1").text
    finally:
        store.close()
    assert KEY not in page
    assert KEY not in state
    assert "[redacted:vendor]" in page
    assert "[redacted:vendor]" in state


def _served(monkeypatch: pytest.MonkeyPatch, args: list[str]) -> tuple[Any, list[str]]:
    """Run ``stargraph ui ARGS`` with a server that fetches pages instead of listening."""
    fetched: list[str] = []

    def run(self: uvicorn.Server) -> None:
        app: Any = self.config.app  # the console create_app made
        client = TestClient(app, base_url=LOCAL)
        fetched.append(client.get("/runs/order-1").text)
        fetched.append(client.get("/runs/order-1/state?step=1").text)

    monkeypatch.setattr(uvicorn.Server, "run", run)
    return CliRunner().invoke(cli, ["ui", *args]), fetched


def test_issue43_ui_secrets_from_masks_env_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "runs.db"
    store = SqliteStore(db)
    try:
        _run(store, {"model": scripted_model()})
    finally:
        store.close()
    monkeypatch.setenv("VENDOR_KEY", KEY)
    monkeypatch.setenv("OTHER_TOKEN", "another-value-1234")
    result, (page, state) = _served(
        monkeypatch, ["--db", str(db), "--secrets-from", "VENDOR_KEY, OTHER_TOKEN"]
    )
    assert result.exit_code == 0, result.output
    assert KEY not in page
    assert KEY not in state
    assert "[redacted:VENDOR_KEY]" in page
    assert "[redacted:VENDOR_KEY]" in state


def test_issue43_ui_secrets_from_names_an_unset_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    SqliteStore(tmp_path / "runs.db").close()
    result, fetched = _served(
        monkeypatch, ["--db", str(tmp_path / "runs.db"), "--secrets-from", "NOT_SET_ANYWHERE"]
    )
    assert result.exit_code == 2, result.output
    assert "NOT_SET_ANYWHERE" in result.output
    assert fetched == []
