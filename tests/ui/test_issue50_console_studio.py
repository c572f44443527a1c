"""The run page as Studio lays it out, in headless Chromium: the graph and the chosen step's
state side by side, a timeline of steps and their events (model calls, tool calls, rule
decisions, interrupts) with each step's state diff, and child skill runs nested in it.

Fixtures (``browser``, ``serve``) are in ``conftest.py``; screenshots are kept under the
test's tmp dir and their paths printed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stargraph.checkpoint import SqliteStore
from stargraph.testing import ScriptedOpenAIServer
from tests.ui.cdp import Browser, check_page
from tests.ui.ui_graphs import (
    approval_graph,
    desk_app,
    desk_script,
    loop_graph,
    scripted_model,
    trip_graph,
)

pytestmark = pytest.mark.browser  # Debian's headless chromium (scripts/ensure_chromium.sh)

CHIPS = (
    "[...document.querySelectorAll('#timeline > li.tl-step[data-step=\"{step}\"] .ev')]"
    ".map(e => e.className.replace('ev ev-', '') + ':' + e.textContent)"
)


def _diff_rows(browser: Browser) -> list[list[str]]:
    rows: list[list[str]] = browser.eval(
        "[...document.querySelectorAll('#state-diff tbody tr')]"
        ".map(tr => [...tr.children].map(td => td.textContent))"
    )
    return rows


def test_issue50_graph_and_chosen_step_state_side_by_side_with_its_diff(
    browser: Browser,
    serve: Any,
    store: SqliteStore,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    loop = loop_graph().compile(store=store)
    loop.invoke({"limit": 3}, run_id="loop-1")
    served = serve([loop])
    browser.open(served.url + "/runs/loop-1")
    steps = browser.eval(
        "[...document.querySelectorAll('#timeline > li')].map(l => l.dataset.step)"
    )
    assert steps == ["0", "1", "2", "3"]
    # The newest step is shown at first: what it changed, field by field.
    browser.wait_for(
        "document.getElementById('inspector').dataset.ready === '3'", "step 3 in the inspector"
    )
    assert _diff_rows(browser) == [
        ["log", "appended", "2 items", '+ ["tick 3"]'],
        ["n", "changed", "2", "3"],
    ]
    # Choosing step 1 shows step 1, and the graph marks the node that ran in it.
    browser.eval("document.querySelector('#timeline button.tl-select[data-step=\"1\"]').click()")
    browser.wait_for(
        "document.getElementById('inspector').dataset.ready === '1'", "step 1 in the inspector"
    )
    assert _diff_rows(browser) == [
        ["log", "appended", "0 items", '+ ["tick 1"]'],
        ["n", "changed", "0", "1"],
    ]
    assert '"n": 1' in browser.eval("document.getElementById('inspect-state').textContent")
    assert browser.eval(
        "[...document.querySelectorAll('svg.graph g.node.selected')].map(g => g.dataset.node)"
    ) == ["tick"]
    assert browser.eval("document.querySelector('li.tl-step.selected').dataset.step") == "1"
    # Side by side: the graph's pane ends left of the inspector, their tops level.
    graph, inspector = browser.eval(
        "['.graph-pane', '#inspector'].map(s => { const r = document.querySelector(s)"
        ".getBoundingClientRect(); return {left: r.left, right: r.right, top: r.top,"
        " width: r.width}; })"
    )
    assert graph["right"] <= inspector["left"]
    assert graph["top"] == inspector["top"]
    assert graph["width"] > 400
    assert inspector["width"] > 400
    check_page(browser, tmp_path / "studio.png", capsys)
    # Step 0 is the input: every field comes in.
    browser.eval("document.querySelector('#timeline button.tl-select[data-step=\"0\"]').click()")
    browser.wait_for("document.getElementById('inspector').dataset.ready === '0'", "step 0")
    assert [row[:2] for row in _diff_rows(browser)] == [
        ["gate", "added"],
        ["limit", "added"],
        ["log", "added"],
        ["n", "added"],
        ["tag", "added"],
    ]


def test_issue50_timeline_shows_model_calls_tool_calls_and_rule_decisions(
    browser: Browser,
    serve: Any,
    store: SqliteStore,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with ScriptedOpenAIServer(desk_script) as server:
        app = desk_app(server, store, tmp_path)
        app.invoke({"task": "Order A-17 arrived broken."}, run_id="desk-1")
    served = serve([app])
    browser.open(served.url + "/runs/desk-1")
    lines = browser.eval(
        "[...document.querySelectorAll('#timeline > li')].map(l =>"
        " [...l.querySelectorAll('.ev')].map(e => e.className.replace('ev ev-', '')))"
    )
    kinds = [kind for line in lines for kind in line]
    assert kinds.count("llm") == 2  # asked for the tool, then answered
    assert kinds.count("tool") == 1
    assert "rule" in kinds
    tool = browser.eval("document.querySelector('#timeline .ev-tool').textContent")
    assert tool == "tool desk.lookup@1.0.0"
    rule = browser.eval(
        "[...document.querySelectorAll('#timeline .ev-rule')].map(e => e.textContent)"
    )
    assert rule == ["rule exit/final_answer: finish"]
    # The tool's step, chosen: its state diff says what the tool call added.
    step = browser.eval(
        "document.querySelector('#timeline .ev-tool').closest('li.tl-step').dataset.step"
    )
    browser.eval(f"document.querySelector('button.tl-select[data-step=\"{step}\"]').click()")
    browser.wait_for(
        f"document.getElementById('inspector').dataset.ready === '{step}'", "the tool's step"
    )
    changed = [row[0] for row in _diff_rows(browser)]
    assert changed, "the tool's step changed nothing in the state"
    assert "arrived broken" in browser.eval("document.getElementById('state-diff').textContent")
    check_page(browser, tmp_path / "inspector-react.png", capsys)
    browser.eval("document.getElementById('timeline').scrollIntoView()")
    check_page(browser, tmp_path / "timeline-react.png", capsys)


def test_issue50_timeline_shows_an_interrupt_waiting_then_answered(
    browser: Browser,
    serve: Any,
    store: SqliteStore,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    approval = approval_graph().compile(store=store, services={"model": scripted_model()})
    approval.invoke({"item": "widget"}, run_id="order-1")
    served = serve([approval])
    browser.open(served.url + "/runs/order-1")
    waiting = browser.eval("document.querySelector('#timeline > li:last-child .ev-interrupt')")
    assert waiting is not None
    assert browser.eval(
        "document.querySelector('#timeline > li:last-child .ev-interrupt').textContent"
    ) == ("waiting on an interrupt in ask")
    # The run parks in step 2, not committed: its last committed step says what it waits on.
    assert browser.eval(CHIPS.format(step=1)) == [
        "node:draft",
        "llm:model call",
        "interrupt:waiting on an interrupt in ask",
    ]
    browser.eval("document.getElementById('timeline').scrollIntoView()")
    check_page(browser, tmp_path / "timeline-waiting.png", capsys)
    browser.click_and_wait_navigation("#approve")
    browser.wait_for(
        "document.readyState === 'complete' && document.querySelector('#run-status') &&"
        " document.querySelector('#run-status').textContent === 'done'",
        "the approved run to finish",
    )
    answered = browser.eval(
        "[...document.querySelectorAll('#timeline .ev-interrupt')].map(e => e.textContent)"
    )
    assert answered == ["interrupt answered"]


def test_issue50_child_skill_run_nests_labelled_in_the_timeline(
    browser: Browser,
    serve: Any,
    store: SqliteStore,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    trip = trip_graph().compile(store=store)
    trip.invoke({}, run_id="trip-1")
    served = serve([trip])
    browser.open(served.url + "/runs/trip-1")
    summary = browser.eval(
        "document.querySelector('#timeline details.tl-child > summary').innerText"
    )
    # The child run is named by the skill node's own count of runs (its first), not the step.
    assert summary == "skill run of hotel trip-1::hotel@1.0"
    child_line = browser.eval(
        "document.querySelector('#timeline details.tl-child').closest('li.tl-step').dataset.step"
    )
    assert child_line == "2"  # under the step whose node ran the skill
    nested = "document.querySelectorAll('#timeline details.tl-child ol.tl.nested > li').length"
    assert browser.eval(nested) == 0  # not loaded until opened
    browser.eval("document.querySelector('#timeline details.tl-child > summary').click()")
    browser.wait_for(
        "document.querySelector('#timeline details.tl-child').dataset.ready", "the child's steps"
    )
    assert browser.eval(nested) == 3
    head = browser.eval("document.querySelector('#timeline .tl-child-head').innerText")
    assert "graph hotel" in head
    assert browser.eval(
        "[...document.querySelectorAll('#timeline ol.tl.nested .ev-node')].map(e => e.textContent)"
    ) == ["look", "book"]
    browser.eval("document.getElementById('timeline').scrollIntoView()")
    check_page(browser, tmp_path / "timeline-child.png", capsys)


def test_issue50_runs_grouped_by_thread_and_searched_by_id(
    browser: Browser,
    serve: Any,
    store: SqliteStore,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    loop = loop_graph().compile(store=store)
    loop.invoke({"limit": 1}, run_id="a-1", thread_id="chat-A")
    loop.invoke({"limit": 1}, run_id="b-1", thread_id="chat-B")
    loop.invoke({"limit": 1}, run_id="solo")
    loop.invoke({"limit": 2}, run_id="a-2", thread_id="chat-A")  # the newest run
    served = serve([loop])
    browser.open(served.url + "/")
    rows = browser.eval(
        "[...document.querySelectorAll('#run-rows tr')].map(tr =>"
        " tr.classList.contains('thread') ? 'thread ' + tr.dataset.thread : tr.dataset.run)"
    )
    # Newest first, a thread's runs together where its newest run stands.
    assert rows == ["thread chat-A", "a-2", "a-1", "solo", "thread chat-B", "b-1"]
    heading = browser.eval("document.querySelector('#run-rows tr.thread').innerText")
    assert heading == "thread chat-A 2 runs"
    check_page(browser, tmp_path / "runs-threads.png", capsys)
    # Searching by part of an id, as a person types it into the box.
    browser.eval("document.getElementById('run-search').value = 'SOL'")
    browser.click_and_wait_navigation("form.filters button[type=submit]")
    shown = browser.eval("[...document.querySelectorAll('#run-rows tr')].map(tr => tr.dataset.run)")
    assert shown == ["solo"]
    # A thread's id finds its runs.
    browser.open(served.url + "/?q=chat-b")
    shown = browser.eval(
        "[...document.querySelectorAll('#run-rows tr[data-run]')].map(tr => tr.dataset.run)"
    )
    assert shown == ["b-1"]


def test_issue50_a_run_page_opened_before_its_run_exists_opens_it_when_stored(
    browser: Browser,
    serve: Any,
    store: SqliteStore,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    loop = loop_graph().compile(store=store)
    served = serve([loop])
    browser.open(served.url + "/runs/later")
    assert browser.eval("document.querySelector('h1.error').textContent") == "404 Not found"
    browser.wait_for("window.sgLive && window.sgLive.events > 0", "the runs' event stream")
    # A failed load of the page itself is what the 404 is: not a console error of the page.
    browser.events.clear()
    loop.invoke({"limit": 2}, run_id="later")
    browser.wait_for(
        "document.readyState === 'complete' && document.querySelector('#run-status') &&"
        " document.querySelector('#run-status').textContent === 'done'",
        "the page to open the run once it is stored",
    )
    assert browser.eval("document.querySelectorAll('#timeline > li').length") == 3
    check_page(browser, tmp_path / "opened-later.png", capsys)
