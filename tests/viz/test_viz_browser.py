"""The HTML run report in a real browser: Debian's ``chromium``, headless, offline.

The report must render without a console error (it is a static page: no server, no network).
The browser logs page console messages to stderr (``--enable-logging=stderr --v=0``) as
``...:CONSOLE(line)] "message", source: url (line)``; a control page that does log an error
proves the check would see one. The screenshot is kept under the test's tmp dir and its path
printed (``pytest -rA`` / ``-s`` show it).

``scripts/ensure_chromium.sh`` installs the browser when it is missing (apt, as root); the
test runs it itself, so it never skips for want of a browser.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from stargraph import fathom, viz
from stargraph.checkpoint import SqliteStore
from stargraph.graph import END, START, Graph
from stargraph.nodes import SubgraphNode
from stargraph.skills import Skill, SkillKind

pytestmark = pytest.mark.browser  # Debian's headless chromium (scripts/ensure_chromium.sh)

ROOT = Path(__file__).resolve().parents[2]
_CONSOLE = re.compile(r":CONSOLE[:(]\d+\)?\]|Uncaught")


@pytest.fixture(scope="module")
def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        subprocess.run(["bash", str(ROOT / "scripts" / "ensure_chromium.sh")], check=True)
        found = shutil.which("chromium")
    assert found is not None, "scripts/ensure_chromium.sh did not install chromium"
    return found


def screenshot(chromium: str, page: Path, out: Path, profile: Path) -> list[str]:
    """Render ``page`` to ``out``; return the console lines chromium logged (any level:
    ``...:INFO:CONSOLE:1] "message", source: ...``, uncaught exceptions included)."""
    result = subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1280,2400",
            f"--screenshot={out}",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return [line for line in result.stderr.splitlines() if _CONSOLE.search(line)]


class Order(BaseModel):
    item: str = "widget"
    total: Annotated[float, fathom.Fact()] = 0.0
    note: str = ""
    big: bool = False


class Pricing(BaseModel):
    item: str = ""
    total: float = 0.0


def price(state: Pricing) -> dict[str, Any]:
    return {"total": 16.0 if state.item == "widget" else 1.0}


def review(state: Order) -> dict[str, Any]:
    return {"note": f"<b>{state.item}</b> costs {state.total}", "big": state.total > 10}


def approve(state: Order) -> dict[str, Any]:
    return {"note": state.note + " (approved)"}


def route(state: Order) -> str:
    return END


def report_graph() -> Graph[Order]:
    """A nested skill, a rule-routed edge and a plain node: every part of the report."""
    pricing = Skill.from_graph(
        Graph("pricing", state=Pricing)
        .with_node("price", price)
        .with_edge(START, "price")
        .with_edge("price", END),
        name="pricing",
        version="1.0.0",
        kind=SkillKind.WORKFLOW,
        description="prices an item",
        state_schema=Pricing,
    )
    rules = fathom.RulePack.from_spec(
        {
            "id": "desk",
            "version": "1",
            "rules": [
                {
                    "name": "big",
                    "when": [{"node": "review"}, {"state.total": {">=": 10}}],
                    "then": {"goto": "approve"},
                }
            ],
        }
    )
    return (
        Graph("report-demo", state=Order)
        .with_node(SubgraphNode.from_skill(pricing, site="pricing"))
        .with_node("review", review)
        .with_node("approve", approve)
        .with_edge(START, "pricing")
        .with_edge("pricing", "review")
        .with_conditional_edges("review", route, {"approve": "approve", END: END})
        .with_edge("approve", END)
        .with_rules(rules)
    )


def test_report_renders_in_headless_chromium_without_console_errors(
    chromium: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    graph = report_graph()
    with SqliteStore(tmp_path / "runs.db") as store:
        app = graph.compile(store=store)
        final = app.invoke({"item": "widget"}, run_id="r-1")
        assert final.note.endswith("(approved)")
        page = tmp_path / "report.html"
        page.write_text(viz.html_report(graph.to_ir(), store, "r-1"), encoding="utf-8")
    shot = tmp_path / "report.png"
    console = screenshot(chromium, page, shot, tmp_path / "profile")
    assert console == []
    assert shot.is_file()
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 10_000  # a rendered page, not a blank one
    with capsys.disabled():
        print(f"\nreport screenshot: {shot}")


def test_the_console_check_sees_errors(chromium: str, tmp_path: Path) -> None:
    page = tmp_path / "bad.html"
    page.write_text(
        "<!doctype html><html><body><p>x</p><script>console.error('boom');"
        "undefinedFunction();</script></body></html>",
        encoding="utf-8",
    )
    console = screenshot(chromium, page, tmp_path / "bad.png", tmp_path / "profile")
    assert any("boom" in line for line in console), console
    assert any("undefinedFunction" in line for line in console), console
