"""Fixtures of the console's browser tests: Debian's headless ``chromium`` (installed by
``scripts/ensure_chromium.sh`` when missing, so these tests never skip for want of it), a
browser over DevTools per test, and the console served by uvicorn in a thread."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stargraph.checkpoint import SqliteStore
from stargraph.ui import UiSettings, create_app
from tests.ui.cdp import Browser
from tests.uvicorn_thread import UvicornThread

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        subprocess.run(["bash", str(ROOT / "scripts" / "ensure_chromium.sh")], check=True)
        found = shutil.which("chromium")
    assert found is not None, "scripts/ensure_chromium.sh did not install chromium"
    return found


@pytest.fixture
def browser(chromium: str, tmp_path: Path) -> Iterator[Browser]:
    b = Browser(chromium, tmp_path / "profile")
    try:
        yield b
    finally:
        b.close()


class Served(UvicornThread):
    """The console served by uvicorn on a free loopback port, in a thread."""

    def __init__(
        self, store: SqliteStore, graphs: list[Any], settings: UiSettings | None = None
    ) -> None:
        app = create_app(store, graphs=graphs, settings=settings or UiSettings(poll_s=0.05))
        console = app.state.console
        super().__init__(
            app, before_stop=console.closing.set, timeout_graceful_shutdown=5
        )  # closing ends the event streams

    def close(self) -> None:
        super().close()
        self.app.state.console.close()


@pytest.fixture
def serve(store: SqliteStore) -> Iterator[Any]:
    started: list[Served] = []

    def start(graphs: list[Any], settings: UiSettings | None = None) -> Served:
        served = Served(store, graphs, settings)
        started.append(served)
        return served

    yield start
    for served in started:
        served.close()
