"""Runs stored before requests were deltas and snapshots referred back still load, replay,
fork and resume; what a resume writes is in the new format (read old, write new)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from stargraph.checkpoint import Recording, SqliteStore
from stargraph.errors import ReplayDivergenceError
from stargraph.ir import content_hash
from stargraph.replay import export_cassette, load_cassette
from tests.checkpoint import old_format
from tests.checkpoint.old_format import CALLS, FIXTURE, RUN_ID


# The fixture was written by older node code (the ReAct nodes may have changed since):
# resuming it under the current code warns, as any upgrade does.
@pytest.mark.filterwarnings("ignore::stargraph.errors.CodeHashWarning")
def test_issue19_a_run_stored_in_the_old_format_loads_replays_and_resumes(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    shutil.copyfile(FIXTURE, path)
    with SqliteStore(path) as store:
        old = store.get_steps(RUN_ID)
        # The fixture is in the old format: whole requests, snapshots holding every channel.
        assert not any(c.base for s in old for c in s.calls)
        assert not any(s.carried for s in old)
        assert [s.step for s in old if s.snapshot is not None] == [0, 4, 8, 12]
        assert "trajectory" in (old[12].snapshot or {})
        stopped = store.get_run(RUN_ID)
        assert (stopped.status, stopped.last_step) == ("failed", 15)

        app = old_format.app(store, tmp_path / "ws", broken=False)
        for step in range(stopped.last_step + 1):
            state = app.get_state(RUN_ID, step)
            written = [
                m
                for s in old[1 : step + 1]
                for w in s.writes
                for m in w.writes.get("trajectory", [])
            ]
            first = old[0].snapshot
            assert first is not None
            assert len(state.trajectory) == len(written) + len(first["trajectory"])
        # The fixture's act node told the model each result as a JSON envelope; today's
        # tells it the payload. Replay re-runs act and reports that change (it never papers
        # over a node writing something else), naming the node and what it wrote.
        with pytest.raises(ReplayDivergenceError, match="node 'act' wrote") as diverged:
            app.replay(RUN_ID)
        assert '"payload":"observation 0 of the old-format run"' in str(diverged.value)

        final = app.resume(RUN_ID)
        assert final.final_answer == "finished"
        assert len(final.tool_calls) == CALLS
        new = store.get_steps(RUN_ID, start=stopped.last_step + 1)
        # Written by this code: model requests after the first since the resume are deltas,
        # and snapshots leave the trajectory to the steps' writes.
        llm = [c for s in new for c in s.calls if c.kind == "llm"]
        assert len(llm) >= 3
        assert not llm[0].base
        assert all(c.base for c in llm[1:])
        snapshots = [s for s in new if s.snapshot is not None]
        assert snapshots
        assert all(s.carried.get("trajectory") == 12 for s in snapshots)
        assert app.get_state(RUN_ID) == final

        # The whole run (old steps and new) reads back with whole requests, and replays.
        recording = Recording.from_store(store, RUN_ID)
        for entry in (c for s in recording.steps for c in s.calls if c.kind == "llm"):
            assert not entry.base
            assert content_hash(entry.request) == entry.fingerprint
        # Its old steps were written by the envelope-telling act (see above): a replay
        # of the whole run, from the store or a cassette, reports it the same way.
        with pytest.raises(ReplayDivergenceError, match="node 'act' wrote"):
            app.replay(recording)
        cassette = load_cassette(export_cassette(store, RUN_ID, tmp_path / "run.json"))
        assert cassette.steps == recording.steps
        with pytest.raises(ReplayDivergenceError, match="node 'act' wrote"):
            app.replay(cassette)

        # A fork from an old-format step resumes like the original.
        fork = app.fork(RUN_ID, 9)
        forked = app.resume(fork)
        assert forked.final_answer == final.final_answer
        assert forked.tool_calls == final.tool_calls
