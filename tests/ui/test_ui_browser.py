"""The run console in a real browser: Debian's headless ``chromium`` over DevTools.

The console is served by uvicorn in a thread of the test (port 0, the address read back from
the bound socket); the graphs run in other threads against the same SQLite store. Every
wait is a deadline-bounded poll of the page (see ``cdp.py``). Screenshots at 1280x800 are
kept under the test's tmp dir (their paths are printed) and every page is checked for
console errors and for anything sticking out past the right edge.

``scripts/ensure_chromium.sh`` installs the browser when it is missing (apt, as root); the
fixture runs it itself, so these tests never skip for want of a browser.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from stargraph.checkpoint import SqliteStore
from stargraph.errors import RunNotFoundError
from stargraph.testing import Reply
from tests.ui.cdp import Browser, check_page
from tests.ui.ui_graphs import (
    GATES,
    HeldServer,
    approval_graph,
    letter_graph,
    letter_model,
    loop_graph,
    scripted_model,
    trip_graph,
)

pytestmark = pytest.mark.browser  # Debian's headless chromium (scripts/ensure_chromium.sh)

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 60.0


def _approval_run(store: SqliteStore) -> Any:
    app = approval_graph().compile(store=store, services={"model": scripted_model()})
    app.invoke({"item": "widget", "api_key": "sk-live-0123456789"}, run_id="order-1")
    return app


def test_runs_list_then_run_with_taken_path(
    browser: Browser,
    serve: Any,
    store: SqliteStore,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    approval = _approval_run(store)
    loop = loop_graph().compile(store=store)
    loop.invoke({"limit": 4}, run_id="loop-" + "x" * 90)  # a long id must wrap, not overflow
    served = serve([approval, loop])
    browser.open(served.url + "/")
    assert browser.eval("document.querySelectorAll('#run-rows tr').length") == 2
    check_page(browser, tmp_path / "runs.png", capsys)

    browser.click_and_wait_navigation('a[href="/runs/order-1"]')
    assert browser.eval("location.pathname") == "/runs/order-1"
    ran = browser.eval(
        "[...document.querySelectorAll('svg.graph g.node.ran')].map(g => g.dataset.node)"
    )
    assert sorted(ran) == ["__start__", "draft"]
    # The node the run waits in (ask, interrupted) is marked as next, not as ran.
    assert browser.eval("document.querySelector('g.node.next').dataset.node") == "ask"
    # Highlighted means drawn differently, not just a class name: the stroke is green.
    stroke = browser.eval(
        "getComputedStyle(document.querySelector('g.node.ran[data-node=draft] rect')).stroke"
    )
    plain = browser.eval(
        "getComputedStyle(document.querySelector('g.node[data-node=finish] rect')).stroke"
    )
    assert stroke == "rgb(26, 127, 55)"
    assert plain != stroke
    # The model call renders as chat bubbles once opened; the state loads on demand.
    browser.eval("document.querySelector('details.call.llm').open = true")
    assert browser.eval("document.querySelectorAll('.chat .msg').length") == 3
    browser.eval("document.querySelector('details.state').open = true")
    browser.wait_for(
        "document.querySelector('details.state pre').textContent.includes('redacted:api_key')",
        "the masked state to load",
    )
    check_page(browser, tmp_path / "run.png", capsys)
    browser.eval("document.querySelector('svg.graph').scrollIntoView()")
    check_page(browser, tmp_path / "run-graph.png", capsys)


def test_running_run_gains_steps_live(
    browser: Browser,
    serve: Any,
    store: SqliteStore,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    gate = GATES["browser-live"] = threading.Semaphore(0)
    loop = loop_graph().compile(store=store)
    worker = threading.Thread(
        target=loop.invoke,
        args=({"limit": 3, "gate": "browser-live"},),
        kwargs={"run_id": "live"},
    )
    worker.start()
    try:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                store.get_run("live")
                break
            except RunNotFoundError:  # not stored yet
                assert time.monotonic() < deadline, "the run never started"
                time.sleep(0.02)
        served = serve([loop])
        browser.open(served.url + "/runs/live")
        rows = "document.querySelectorAll('#step-rows tr.step').length"
        assert browser.eval(rows) == 1  # just the input
        browser.eval("window.__samePage = true")
        browser.wait_for("window.sgLive && window.sgLive.events > 0", "the event stream")
        gate.release()
        browser.wait_for(f"{rows} === 2", "step 1 to appear live")
        gate.release()
        browser.wait_for(f"{rows} === 3", "step 2 to appear live")
        assert browser.eval("window.__samePage") is True  # appended, not reloaded
        assert browser.eval("document.getElementById('last-step').textContent") == "2"
        check_page(browser, tmp_path / "live.png", capsys)
        gate.release()
        # The run finishing changes its status: the page reloads itself to show it.
        browser.wait_for(
            "document.readyState === 'complete' && document.querySelector('#run-status') &&"
            " document.querySelector('#run-status').textContent === 'done'",
            "the run to show as done",
        )
        assert browser.eval(rows) == 4
        assert browser.console_errors() == []
    finally:
        gate.release(3)
        worker.join(DEADLINE_S)
    assert not worker.is_alive()


def test_approve_an_interrupt_and_see_the_run_finish(
    browser: Browser,
    serve: Any,
    store: SqliteStore,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    approval = _approval_run(store)
    served = serve([approval])
    browser.open(served.url + "/runs/order-1")
    assert browser.eval("document.querySelector('#run-status').textContent") == "interrupted"
    check_page(browser, tmp_path / "interrupt.png", capsys)
    browser.click_and_wait_navigation("#approve")
    browser.wait_for(
        "document.readyState === 'complete' && document.querySelector('#run-status') &&"
        " document.querySelector('#run-status').textContent === 'done'",
        "the approved run to finish",
    )
    ran = browser.eval(
        "[...document.querySelectorAll('svg.graph g.node.ran')].map(g => g.dataset.node)"
    )
    assert sorted(ran) == ["__end__", "__start__", "ask", "draft", "finish"]
    assert approval.get_state("order-1").answer == {"approved": True}
    check_page(browser, tmp_path / "approved.png", capsys)


def test_approve_and_watch_the_model_reply_stream_in(
    browser: Browser,
    serve: Any,
    *,
    store: SqliteStore,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STARGRAPH_SECRET_SHOP_KEY", "sk-live-0123456789")
    letter = "Dear Ada, sk-live-0123456789 ships on Monday. Regards, Bob"
    # The scripted server sends the role chunk and three words, then holds the reply.
    with HeldServer([Reply.text(letter)], hold_after=4) as server:
        app = letter_graph().compile(store=store, services={"model": letter_model(server)})
        app.invoke({"to": "Ada"}, run_id="letter-1")
        served = serve([app])
        browser.open(served.url + "/runs/letter-1")
        assert browser.eval("document.getElementById('live-output').hidden") is True
        browser.click_and_wait_navigation("#approve")
        assert server.held.wait(DEADLINE_S), "the model call never started"
        text = "document.querySelector('#live-calls .live-call .text')"
        browser.wait_for(
            f"{text} && {text}.textContent === 'Dear Ada, [redacted:shop_key]'",
            "the first words of the reply, while the model call is open",
        )
        assert browser.eval("document.getElementById('live-output').hidden") is False
        assert store.get_run("letter-1").status == "running"
        who = browser.eval("document.querySelector('#live-calls .who').textContent")
        assert who == "assistant, streaming: write in step 2"
        check_page(browser, tmp_path / "tokens.png", capsys)
        server.release.set()
        browser.wait_for(
            "document.readyState === 'complete' && document.querySelector('#run-status') &&"
            " document.querySelector('#run-status').textContent === 'done'",
            "the run to finish",
        )
    assert browser.eval("document.getElementById('live-output').hidden") is True
    # The whole reply is in the step that ran the model, as a chat.
    browser.eval("document.querySelector('details.call.llm').open = true")
    reply = browser.eval("document.querySelector('.chat.reply .text').textContent")
    assert reply == letter.replace("sk-live-0123456789", "[redacted:shop_key]")
    assert browser.console_errors() == []


def test_fork_a_run_replay_it_and_diff_the_two_side_by_side(
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
    browser.click_and_wait_navigation('a[href="/runs/loop-1/fork?step=1"]')
    assert browser.eval("location.pathname") == "/runs/loop-1/fork"
    assert browser.eval("JSON.parse(document.getElementById('fork-state').value).n") == 1
    check_page(browser, tmp_path / "fork.png", capsys)
    # Edit the state as a person would: the limit in the JSON box goes from 3 to 5.
    browser.eval(
        "const box = document.getElementById('fork-state');"
        " const state = JSON.parse(box.value); state.limit = 5;"
        " box.value = JSON.stringify(state, null, 2)"
    )
    browser.click_and_wait_navigation("#counterfactual")
    new_id = browser.eval("decodeURIComponent(location.pathname)").removeprefix("/runs/")
    assert new_id.startswith("loop-1~from2-")
    browser.wait_for(
        "document.readyState === 'complete' && document.querySelector('#run-status') &&"
        " document.querySelector('#run-status').textContent === 'done'",
        "the counterfactual run to finish",
    )
    assert loop.get_state(new_id).n == 5
    browser.click_and_wait_navigation("#diff-parent")
    assert browser.eval("location.pathname") == "/diff"
    pairs = browser.eval(
        "[...document.querySelectorAll('#diff-rows tr.pair')]"
        ".map(tr => [tr.className.replace('pair ', ''), tr.dataset.a, tr.dataset.b])"
    )
    # Aligned past the inserted update, the fork's step 3 is the parent's step 2 (the same
    # tick, the same writes); the runs part where the parent stopped at its limit of 3.
    assert pairs == [
        ["same", "0", "0"],
        ["same", "1", "1"],
        ["inserted", "", "2"],
        ["same", "2", "3"],
        ["differs", "3", "4"],
        ["only-b", "", "5"],
        ["only-b", "", "6"],
    ]
    # Side by side: in a row, A's cell ends left of where B's begins, on the same line.
    a_cell, b_cell = browser.eval(
        "[...document.querySelectorAll('#diff-rows tr.pair.differs')[0].children]"
        ".filter((td, i) => i === 1 || i === 3)"
        ".map(td => { const r = td.getBoundingClientRect();"
        " return {left: r.left, right: r.right, top: r.top, width: r.width}; })"
    )
    assert a_cell["right"] <= b_cell["left"]
    assert a_cell["top"] == b_cell["top"]
    assert a_cell["width"] > 200
    assert b_cell["width"] > 200
    assert "next: A = []  B = ['tick']" in browser.eval("document.body.textContent")
    check_page(browser, tmp_path / "diff.png", capsys)
    browser.eval("document.querySelector('#diff-rows tr.inserted').scrollIntoView()")
    check_page(browser, tmp_path / "diff-steps.png", capsys)


def test_a_child_run_expands_in_its_parent(
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
    nested = "document.querySelectorAll('details.child table.nested tr.step').length"
    assert browser.eval(nested) == 0  # not loaded until opened
    browser.eval("document.querySelector('details.child > summary').click()")
    browser.wait_for("document.querySelector('details.child').dataset.ready", "the child's steps")
    assert browser.eval(nested) == 3
    shown = browser.eval("document.querySelector('details.child .nested').innerText")
    assert "look at hotels in Oslo" in shown
    assert "booked Oslo" in shown
    browser.eval("document.querySelector('details.child').scrollIntoView()")
    check_page(browser, tmp_path / "child.png", capsys)
    browser.click_and_wait_navigation("details.child .nested-run a")
    assert browser.eval("decodeURIComponent(location.pathname)") == "/runs/trip-1::hotel@1.0"
    check_page(browser, tmp_path / "child-page.png", capsys)


def test_the_console_check_sees_errors_and_overflow(
    browser: Browser, serve: Any, store: SqliteStore
) -> None:
    served = serve([])
    browser.open(served.url + "/")
    browser.eval("console.error('boom')")
    browser.eval(
        "const d = document.createElement('div'); d.style.width = '3000px';"
        " d.textContent = 'x'; document.body.appendChild(d)"
    )
    assert any("boom" in e for e in browser.console_errors())
    assert browser.overflowing() != []
