"""Progress output (plain lines and the rich live view), the entry point, and import cost."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from stargraph.cli._live import LiveView, PlainView, describe_event, watch
from stargraph.cli._output import waiting_message
from stargraph.runtime import (
    Event,
    NodeFinished,
    NodeStarted,
    RuleDecided,
    RunFailed,
    RunFinished,
    RunInterrupted,
    RunStarted,
    StepCompleted,
)

EVENTS: list[Event] = [
    RunStarted(run_id="r", step=0, graph_hash="sha256:abc"),
    NodeStarted(run_id="r", step=1, node="plan"),
    NodeStarted(run_id="r", step=1, path=("step-3",), node="t0"),
    NodeFinished(run_id="r", step=1, path=("step-3",), node="t0", writes={"x": 1}),
    NodeFinished(run_id="r", step=1, node="plan", writes={"big": "y" * 500}, attempts=2),
    StepCompleted(run_id="r", step=1, nodes=("plan",), next=("work",)),
    RuleDecided(run_id="r", step=1, decision="goto", rule="again", target="work", reason="r"),
    RunFinished(
        run_id="r",
        step=1,
        state={"x": 1},
        stopped_by="termination/max_steps",
        status="halted",
        stop_reason="max_steps_exceeded",
    ),
]


def test_describe_event_lines() -> None:
    lines = [describe_event(e) for e in EVENTS]
    assert lines[0] == "run r started (graph sha256:abc)"
    assert lines[1] is None
    assert lines[5] is None
    assert lines[3] == '[step 1] step-3/t0 finished: {"x": 1}'
    assert lines[4] is not None
    assert lines[4].startswith("[step 1] plan finished after 2 attempts")
    assert lines[4].endswith("…")
    assert len(lines[4]) < 220
    assert lines[6] == "[step 1] rule again: goto -> work (r)"
    assert lines[7] == "[step 1] run r halted by rule termination/max_steps: max_steps_exceeded"
    failed = RunFailed(run_id="r", step=2, node="n", error="boom", error_type="NodeError")
    assert describe_event(failed) == "[step 2] run r failed in n: NodeError"
    assert describe_event(RunInterrupted(run_id="r", step=2)) == "[step 2] run r is waiting"


def test_plain_view_writes_lines() -> None:
    out = io.StringIO()
    assert list(watch(EVENTS, PlainView(out))) == EVENTS
    assert out.getvalue().count("\n") == 5


def test_live_view_draws_a_panel_and_logs_lines() -> None:
    from rich.console import Console

    out = io.StringIO()
    view = LiveView(Console(file=out, force_terminal=True, width=100))
    for event in watch(EVENTS, view):
        if isinstance(event, NodeStarted) and not event.path:
            assert view.running == ["plan"]
    text = out.getvalue()
    assert "stargraph" in text
    assert "again: goto" in text
    assert "run r halted by rule termination/max_steps" in text
    assert view.nodes_done == 2


def test_watch_closes_the_view_when_the_stream_fails() -> None:
    closed: list[bool] = []

    class Probe(PlainView):
        def close(self) -> None:
            closed.append(True)

    def boom() -> Iterator[Event]:
        yield EVENTS[0]
        raise RuntimeError("stream broke")

    with pytest.raises(RuntimeError):
        list(watch(boom(), Probe(io.StringIO())))
    assert closed == [True]


@pytest.mark.parametrize(
    ("interrupt", "text"),
    [
        ({"kind": "before", "nodes": ["b"], "step": 2}, "interrupted before node(s) 'b' at step 2"),
        ({"kind": "after", "nodes": ["c"], "step": 4}, "interrupted after node(s) 'c' at step 4"),
        ({"kind": "rule", "rule": "p/ask", "reason": "check"}, "rule p/ask interrupted the run"),
        ("odd", '"odd"'),
    ],
)
def test_waiting_messages(interrupt: object, text: str) -> None:
    message = waiting_message("r 1", interrupt, "my graph.json", "x/db.sqlite")
    assert message.startswith(f"run r 1 is waiting: {text}")
    assert message.endswith("--graph 'my graph.json' --db x/db.sqlite")


def _python(*code: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "\n".join(code)],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
    )


def test_importing_the_cli_package_is_light() -> None:
    done = _python(
        "import sys, stargraph",
        "before = set(sys.modules)",
        "import stargraph.cli",
        "added = set(sys.modules) - before",
        "print(sorted(m for m in added if m.split('.')[0] in ('click', 'rich', 'clips')))",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.replace("'", '"')) == []


def test_main_entry_point_in_a_fresh_process(tmp_path: Path) -> None:
    from stargraph.examples.basics import chain_graph

    ir = chain_graph().to_ir()
    (tmp_path / "g.json").write_text(ir.to_json())
    main = "from stargraph.cli import main; import sys; main(sys.argv[1:])"
    done = subprocess.run(
        [sys.executable, "-c", main, "hash", "g.json"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert (done.returncode, done.stdout) == (0, f"{ir.graph_hash}\n")
    done = subprocess.run(
        [sys.executable, "-c", main, "run", "g.json", "-q"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["counter"] == 3
    done = subprocess.run(
        [sys.executable, "-c", main, "show", "nope"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("error: no run 'nope'")


def test_issue44_the_live_clock_ticks_without_events() -> None:
    """The panel given to rich's Live was built once per event: its refresh thread redrew
    the same text, so "elapsed" stood still while a node waited on a model."""
    from rich.console import Console

    now = [100.0]
    out = io.StringIO()
    view = LiveView(Console(file=out, force_terminal=True, width=100), clock=lambda: now[0])
    try:
        view.show(EVENTS[0])
        now[0] = 112.5
        view.live.refresh()  # what the refresh thread does between events
        assert "12.5s" in out.getvalue()
        now[0] = 130.0
        view.live.refresh()
        assert "30.0s" in out.getvalue()
    finally:
        view.close()
