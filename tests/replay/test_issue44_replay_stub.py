"""Replay says what it re-executes, and serves recorded writes when asked.

A plain node's body is ordinary code: a replay serves its model, tool and ``ctx.once`` calls
from the record, but whatever else it does (here: appending to a file) happens again. The
replay lists those nodes before it starts (``replay_plan``), warns once when left to its
default, and with ``stub="all"`` or the nodes' names serves their recorded writes instead -
the file is left alone and the final state is the recorded one.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from stargraph.checkpoint import CheckpointStore, MemoryStore, Recording
from stargraph.errors import ReplayDivergenceError, ReplayEffectsWarning, ReplayError
from stargraph.replay import ReplayPlan, export_cassette, load_cassette
from tests.replay.effectgraph import effects, lines

pytestmark = pytest.mark.stores("memory", "sqlite")

EFFECTS = ["record", "stamp", "touch a", "touch b"]


def recorded(store: CheckpointStore, ledger: Path) -> object:
    """Run the graph live once as run ``r``; return its final state."""
    app = effects().compile(store=store)
    final = app.invoke({"ledger": str(ledger), "items": ["a", "b"]}, run_id="r")
    assert lines(ledger) == EFFECTS
    return final


def test_issue44_replay_plan_names_the_nodes_whose_bodies_run_again(
    store: CheckpointStore, tmp_path: Path
) -> None:
    recorded(store, tmp_path / "ledger.txt")
    app = effects().compile(store=store)
    plan = app.replay_plan("r")
    assert plan == ReplayPlan(
        run_id="r", stub="must", reruns=("record", "touch", "audit/stamp"), served=("think",)
    )
    assert not plan.offline
    assert "stub='all'" in plan.describe()
    every = app.replay_plan("r", stub="all")
    assert (every.reruns, every.served) == ((), ("think", "record", "touch", "audit"))
    assert every.offline
    named = app.replay_plan("r", stub=["touch", "audit/stamp"])
    assert (named.reruns, named.served) == (("record",), ("think", "touch", "audit/stamp"))
    # Working out the plan runs nothing.
    assert lines(tmp_path / "ledger.txt") == EFFECTS


@pytest.mark.parametrize(
    "stub", ["all", {"record", "touch", "audit/stamp"}, {"record", "touch", "audit"}]
)
def test_issue44_a_stubbed_replay_leaves_the_file_alone_and_ends_in_the_recorded_state(
    store: CheckpointStore, tmp_path: Path, stub: str | set[str]
) -> None:
    ledger = tmp_path / "ledger.txt"
    final = recorded(store, ledger)
    app = effects().compile(store=store)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an explicit stub warns of nothing
        assert app.replay("r", stub=stub) == final
        kinds = [event.kind for event in app.replay_stream("r", stub=stub)]
    assert kinds[-1] == "run_finished"
    assert app.replay("r", stub=stub) == app.get_state("r")
    assert lines(ledger) == EFFECTS  # no body ran again: nothing appended


def test_issue44_stub_must_reruns_the_bodies_knowingly_and_without_a_warning(
    store: CheckpointStore, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    final = recorded(store, ledger)
    app = effects().compile(store=store)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert app.replay("r", stub="must") == final
    assert lines(ledger) == sorted(EFFECTS + EFFECTS)  # the bodies ran again, as asked


def test_issue44_a_default_replay_warns_once_naming_the_nodes_and_the_option(
    store: CheckpointStore, tmp_path: Path
) -> None:
    final = recorded(store, tmp_path / "ledger.txt")
    app = effects().compile(store=store)
    for replay in (lambda: app.replay("r"), lambda: list(app.replay_stream("r"))):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            replay()
        found = [w for w in caught if issubclass(w.category, ReplayEffectsWarning)]
        # Once for the run and its child run together, pointing at the caller.
        assert len(found) == 1, [str(w.message) for w in found]
        message = str(found[0].message)
        assert "'record', 'touch', 'audit/stamp'" in message
        assert "stub='all'" in message
        assert "stub='must'" in message
        assert found[0].filename == __file__
    assert app.replay("r", stub="all") == final


def test_issue44_stub_all_still_checks_the_record_routing(
    store: CheckpointStore, tmp_path: Path
) -> None:
    recorded(store, tmp_path / "ledger.txt")
    app = effects().compile(store=store)
    recording = Recording.from_store(store, "r")
    # Edit what ``think`` wrote: the router, run again on the served writes, now picks
    # ``audit`` where the record went on to the ``touch`` tasks.
    steps = list(recording.steps)
    step1 = steps[1]
    steps[1] = step1.model_copy(
        update={
            "writes": tuple(
                w.model_copy(update={"writes": {"route": "end"}}) if w.node == "think" else w
                for w in step1.writes
            )
        }
    )
    edited = recording.model_copy(update={"steps": tuple(steps)})
    with pytest.raises(ReplayDivergenceError, match=r"scheduled \[\('audit', 0\)\]"):
        app.replay(edited, stub="all")


def test_issue44_stub_refuses_names_that_are_not_nodes(
    store: CheckpointStore, tmp_path: Path
) -> None:
    recorded(store, tmp_path / "ledger.txt")
    app = effects().compile(store=store)
    with pytest.raises(ReplayError, match=r"stub names 'nope', 'stamp', not a node.*audit/stamp"):
        app.replay("r", stub={"nope", "stamp"})
    with pytest.raises(ReplayError, match=r"to serve one node pass stub=\{'record'\}"):
        app.replay("r", stub="record")
    with pytest.raises(ReplayError, match="nothing to stub"):
        app.replay("r", from_step=2, stub="all")


def test_issue44_a_cassette_replays_with_its_child_stubbed_and_no_store(
    store: CheckpointStore, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger.txt"
    final = recorded(store, ledger)
    cassette = load_cassette(export_cassette(store, "r", tmp_path / "r.json"))
    offline = effects().compile()  # no store: the child comes from the cassette
    assert offline.replay_plan(cassette).reruns == ("record", "touch", "audit/stamp")
    assert offline.replay(cassette, stub={"record", "touch", "audit/stamp"}) == final
    assert lines(ledger) == EFFECTS


def test_issue44_a_child_replay_of_a_run_without_its_child_lists_the_subgraph_node(
    tmp_path: Path,
) -> None:
    store = MemoryStore()
    recorded(store, tmp_path / "ledger.txt")
    bare = Recording.from_store(store, "r")  # without its child run, replayed storeless
    plan = effects().compile().replay_plan(bare)
    assert plan.reruns == ("record", "touch", "audit")
