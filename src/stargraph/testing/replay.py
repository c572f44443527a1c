"""The "replay every step" test mode: a live run whose every prefix must replay.

:func:`assert_replays_every_step` runs a graph live with its checkpoint store and, after
each committed step ``k``, replays the run so far (``app.replay(run_id, until_step=k)``) and
checks it equals the stored state at ``k`` (``app.get_state(run_id, k)``). At the end the
whole run is replayed once more as a stream, and its events must equal the live events.
These replays re-run the node bodies (``stub="must"``): what they check is that the code
still writes what it wrote::

    from stargraph.testing import assert_replays_every_step

    app = graph.compile(store=MemoryStore(), entropy=lambda: SeededEntropy(0))
    final = assert_replays_every_step(app, {"task": "..."}, run_id="r")

A node that is not deterministic given its inputs and recorded calls, or a replay bug that
only shows in the middle of a run (a rule decision, a join, a child run), fails at the first
step where replay and record part, with both states in the message.

:func:`assert_cassettes_pass` is the regression-suite mode: recorded runs (cassettes) replayed
against a new version of the graph, unchanged regions served from the record, each cassette
identical or changed only where the test allows.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from stargraph.errors import CompileError
from stargraph.replay import CassetteCheck, check_cassettes
from stargraph.runtime import CompiledGraph

__all__ = ["assert_cassettes_pass", "assert_replays_every_step"]

StateT = TypeVar("StateT", bound=BaseModel)


def assert_replays_every_step(
    app: CompiledGraph[StateT],
    input: Mapping[str, Any] | StateT | None,
    *,
    run_id: str,
) -> StateT:
    """Run ``app`` live as ``run_id``; after each committed step replay the run so far and
    assert it equals the stored state; finally assert the replayed event stream equals the
    live one. Returns the final state. ``app`` must have a checkpoint store."""
    store = app.store
    if store is None:
        raise CompileError.at(
            "compile(store=...)",
            "assert_replays_every_step needs a graph compiled with a checkpoint store",
            "compile(store=MemoryStore())",
            subject="the graph under test",
        )
    checked = -1
    live: list[dict[str, Any]] = []

    def check_new_steps() -> None:
        nonlocal checked
        try:
            last = store.get_run(run_id).last_step
        except LookupError:
            return
        for step in range(checked + 1, last + 1):
            replayed = app.replay(run_id, until_step=step, stub="must")
            stored = app.get_state(run_id, step)
            if replayed != stored:
                raise AssertionError(
                    f"run {run_id!r}: replaying steps 0..{step} gives\n  {replayed!r}\n"
                    f"but the run stored\n  {stored!r}"
                )
        checked = max(checked, last)

    # The stream is a generator suspended after each step's events: the steps the store
    # holds at that moment are committed, and are replayed while the run waits.
    for event in app.stream(input, run_id=run_id):
        live.append(event.model_dump(mode="json"))
        check_new_steps()
    check_new_steps()
    if checked < 0:
        raise AssertionError(f"run {run_id!r} committed no step to the store")
    replayed_events = [e.model_dump(mode="json") for e in app.replay_stream(run_id, stub="must")]
    if replayed_events != live:
        first = next(
            (i for i, (a, b) in enumerate(zip(live, replayed_events, strict=False)) if a != b),
            min(len(live), len(replayed_events)),
        )
        raise AssertionError(
            f"run {run_id!r}: the replayed event stream differs from the live one at event "
            f"#{first} (live {len(live)} events, replayed {len(replayed_events)}):\n"
            f"  live:     {live[first] if first < len(live) else None!r}\n"
            f"  replayed: {replayed_events[first] if first < len(replayed_events) else None!r}"
        )
    return app.get_state(run_id)


def assert_cassettes_pass(
    paths: Iterable[str | Path],
    graph: CompiledGraph[Any],
    *,
    allow_changed: Collection[str] = (),
    live: bool = True,
    score: Callable[[dict[str, Any]], float] | None = None,
) -> list[CassetteCheck]:
    """Replay each cassette against ``graph`` (a new version of the graph that recorded
    them; see ``stargraph.replay.check_cassette``) and assert that none is broken and each
    is identical, or changed only in regions named in ``allow_changed``. Returns the checks
    (their per-region reports, final-state diffs and scores) for further assertions::

        assert_cassettes_pass(sorted(Path("tests/cassettes").glob("*.json")), new_app,
                              allow_changed={"summarize"})

    The assertion message lists every failing cassette with its regions and state diff."""
    results = check_cassettes(paths, graph, live=live, score=score)
    allowed = set(allow_changed)
    problems = []
    for result in results:
        if result.verdict == "broken":
            problems.append(f"{result.path}: broken: {result.error}")
        elif result.verdict == "changed":
            regions = set(result.changed_regions)
            if not regions or not regions <= allowed:
                names = ", ".join(result.changed_regions) or "none (unchanged regions differ)"
                diff = "".join(f"\n    {line}" for line in result.changes)
                problems.append(f"{result.path}: changed in regions {names}{diff}")
    if problems:
        raise AssertionError(
            f"{len(problems)} of {len(results)} cassettes do not pass against graph "
            f"{graph.graph_hash}:\n  " + "\n  ".join(problems)
        )
    return results
