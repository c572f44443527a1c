"""Golden runs (issue 8): recorded cassettes in ``tests/golden/`` that must replay unchanged.

For each golden graph (ReAct with three tool calls, a 20-branch fan-out, skills nested two
deep, a rule-routed loop):

- its cassette was recorded by *this* graph (else: regenerate, with the command to run);
- it replays offline - no store, no server, tool bodies raising - to the state the cassette
  holds, with the same event stream as the live run;
- running the graph live again (seeded entropy, the same scripted model) in the "replay every
  step" mode gives a recording identical to the cassette (``diff(...).identical``, the same
  recorded calls, the same child runs).

The tests depend on replay equality only, never on the cassette's bytes.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import pytest

from stargraph.checkpoint import MemoryStore, Recording
from stargraph.errors import ReplayMissError
from stargraph.graph import END
from stargraph.replay import Cassette, diff, export_cassette, load_cassette
from stargraph.runtime import CompiledGraph
from stargraph.testing import assert_replays_every_step

sys.path.insert(0, str(Path(__file__).resolve().parent / "golden"))

import golden_graphs
from golden_graphs import GOLDENS, REGENERATE, Golden, compile_golden

IDS = [g.name for g in GOLDENS]


def load(golden: Golden, app: CompiledGraph[Any]) -> Cassette:
    """The golden cassette, refusing (with the fix) one recorded by another graph."""
    recorded = load_cassette(golden.path).run.graph_hash
    if recorded != app.graph_hash:
        pytest.fail(
            f"golden graph {golden.name!r} changed: {golden.path.name} was recorded by graph "
            f"{recorded}, the graph now hashes to {app.graph_hash}. If the change is "
            f"intended, regenerate the golden runs with `{REGENERATE}` and commit the "
            "changed cassettes; otherwise undo the change to tests/golden/golden_graphs.py",
            pytrace=False,
        )
    return load_cassette(golden.path, graph_hash=app.graph_hash)


@contextmanager
def offline(golden: Golden, workdir: Path) -> Iterator[dict[str, Any]]:
    """Services for a replay: a dead model address, tool bodies that raise."""
    if not golden.llm:
        yield {}
        return
    golden_graphs.SWITCHES["tool_bodies_raise"] = True
    try:
        with golden_graphs.react_services(workdir, live=False) as services:
            yield services
    finally:
        golden_graphs.SWITCHES["tool_bodies_raise"] = False


def live(golden: Golden, workdir: Path) -> AbstractContextManager[dict[str, Any]]:
    """Services for a live run: a fresh scripted server for the ReAct graph."""
    return golden_graphs.react_services(workdir) if golden.llm else nullcontext({})


def stored(recording: Recording) -> MemoryStore:
    """A store holding ``recording`` (and its children) as if it had run there."""
    store = MemoryStore()
    for rec in (recording, *getattr(recording, "children", ())):
        first, *rest = rec.steps
        store.create_run(rec.run.model_copy(update={"status": "running", "last_step": 0}), first)
        for step in rest:
            store.commit_step(rec.run.run_id, step)
        store.set_status(
            rec.run.run_id, rec.run.status, error=rec.run.error, stopped_by=rec.run.stopped_by
        )
    return store


def calls(recording: Recording) -> list[tuple[Any, ...]]:
    return [
        (c.step, c.node, c.index, c.seq, c.kind, c.key, c.fingerprint, c.value)
        for s in recording.steps
        for c in s.calls
    ]


@pytest.mark.parametrize("golden", GOLDENS, ids=IDS)
def test_golden_cassette_replays_offline(golden: Golden, tmp_path: Path) -> None:
    with offline(golden, tmp_path) as services:
        app = compile_golden(golden, services=services)
        cassette = load(golden, app)
        events = list(app.replay_stream(cassette))
        final = app.replay(cassette)
        app.close()
        # The state the cassette implies: its steps read back through a store.
        store = stored(cassette)
        reader = compile_golden(golden, services=services, store=store)
        from_store = list(reader.replay_stream(golden.run_id))
    # The rules golden is stopped by its max_steps rule: halted, not done.
    assert cassette.run.status == ("halted" if golden.name == "rules" else "done")
    implied = reader.get_state(golden.run_id)
    assert final == implied
    assert events[-1].kind == "run_finished"
    assert events[-1].state == implied.model_dump(mode="json")
    assert [e.model_dump(mode="json") for e in events] == [
        e.model_dump(mode="json") for e in from_store
    ]
    store.close()


@pytest.mark.parametrize("golden", GOLDENS, ids=IDS)
def test_golden_graph_rerun_live_replays_every_step_and_matches(
    golden: Golden, tmp_path: Path
) -> None:
    store = MemoryStore()
    with live(golden, tmp_path) as services:
        app = compile_golden(golden, services=services, store=store)
        cassette = load(golden, app)
        final = assert_replays_every_step(app, golden.input, run_id=golden.run_id)
        app.close()
    rerun = Recording.from_store(store, golden.run_id)
    result = diff(cassette, rerun)
    assert result.identical, f"live re-run differs from {golden.path.name}: {result}"
    assert calls(rerun) == calls(cassette)
    children = sorted(
        r.run_id for r in store.list_runs() if r.run_id.startswith(golden.run_id + "::")
    )
    assert children == [c.run.run_id for c in cassette.children]
    for child in cassette.children:
        again = Recording.from_store(store, child.run.run_id)
        assert diff(child, again).identical
        assert calls(again) == calls(child)
    with offline(golden, tmp_path) as services:
        assert compile_golden(golden, services=services).replay(cassette) == final
    store.close()


def test_golden_runs_cover_what_issue_8_asks_for() -> None:
    by_name = {g.name: g for g in GOLDENS}
    react = load(by_name["react"], compile_golden(by_name["react"]))
    tools = [c for c in calls(react) if c[4] != "llm"]
    assert len([c for c in calls(react) if c[4] == "llm"]) == 4
    assert len(tools) >= 3
    fan = load(by_name["fanout"], compile_golden(by_name["fanout"]))
    assert max(len(s.writes) for s in fan.steps) == 20
    nested = load(by_name["nested"], compile_golden(by_name["nested"]))
    assert [c.run.run_id for c in nested.children] == [
        "golden-nested::middle@1.0",
        "golden-nested::middle@1.0::inner@1.0",
    ]
    rules = load(by_name["rules"], compile_golden(by_name["rules"]))
    assert rules.run.stopped_by == "termination/max_steps"


def test_nested_replay_serves_children_from_the_cassette(tmp_path: Path) -> None:
    golden = next(g for g in GOLDENS if g.name == "nested")
    empty = MemoryStore()
    app = compile_golden(golden, store=empty)
    cassette = load(golden, app)
    events = list(app.replay_stream(cassette))
    # The children replayed from the cassette: their events bubbled up, nothing was stored.
    paths = {tuple(getattr(e, "path", ())) for e in events}
    assert {("middle",), ("middle", "inner")} <= paths
    assert empty.list_runs() == []
    # Without its children the parent cannot replay its subgraph node: a miss, named.
    bare = cassette.model_copy(update={"children": ()})
    with pytest.raises(ReplayMissError, match=re.escape("golden-nested::middle@1.0")):
        app.replay(bare)
    empty.close()


def test_an_edited_golden_graph_fails_with_the_regenerate_command() -> None:
    golden = next(g for g in GOLDENS if g.name == "fanout")
    edited = Golden(
        golden.name,
        lambda: (
            golden.build()
            .with_node("extra", golden_graphs.stamp)
            .with_edge("split", "extra")
            .with_edge("extra", END)
        ),
        golden.input,
    )
    edited.path = golden.path
    with pytest.raises(pytest.fail.Exception, match=re.escape("make_golden.py")):
        load(edited, compile_golden(edited))


def test_a_fork_of_the_nested_run_replays_its_copied_children(tmp_path: Path) -> None:
    golden = next(g for g in GOLDENS if g.name == "nested")
    store = MemoryStore()
    app = compile_golden(golden, store=store)
    app.invoke(golden.input, run_id="n")
    fork = app.fork("n", 2, new_run_id="n-fork")  # step 2 ran the skill: its child is under "n"
    final = app.resume(fork)
    assert app.replay("n-fork") == final
    assert app.replay("n-fork", until_step=2) == app.get_state("n", 2)
    path = export_cassette(store, "n-fork", tmp_path / "fork.json")
    cassette = load_cassette(path, graph_hash=app.graph_hash)
    assert [c.run.run_id for c in cassette.children] == [
        "n::middle@1.0",
        "n::middle@1.0::inner@1.0",
    ]
    assert compile_golden(golden).replay(cassette) == final
    store.close()
