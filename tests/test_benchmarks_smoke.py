"""The benchmark workloads compute the same final state on every engine (no timing here).

Each workload is built at tiny sizes on stargraph, LangGraph and plain Python and must reach
its expected ``(counter, items)``; the harness must refuse to time engines that disagree.
The durable sections (:mod:`benchmarks.durable`) run their engines on SQLite files in a
temporary directory and must agree on the state each returns and reads back from its file.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

# `benchmarks` is a top-level package of the repository, importable from its root (stargraph
# also resolves the node refs `benchmarks.workloads:...` by import).
ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.core_harness import StateMismatch, check_agreement, main  # noqa: E402
from benchmarks.durable import (  # noqa: E402
    DURABLE_ENGINES,
    EngineSpec,
    PlainEngine,
    StargraphEngine,
    check_durable_agreement,
    measure_bytes,
    render_bytes,
    vacuumed_size,
)
from benchmarks.workloads import ENGINES, State, Workload, all_workloads, snapshot  # noqa: E402

WORKLOADS = {w.name: w for w in all_workloads()}


def test_core_workloads_are_registered() -> None:
    assert {"chain10", "chain100", "selfloop", "fanout", "send"} <= set(WORKLOADS)
    for workload in WORKLOADS.values():
        assert set(workload.builders) == set(ENGINES), workload.name


@pytest.mark.parametrize("size", [1, 3])
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_engines_agree_on_final_state(name: str, size: int) -> None:
    workload = WORKLOADS[name]
    finals = check_agreement(workload, size)
    assert set(finals.values()) == {workload.expected(size)}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_node_count_matches_executions(name: str) -> None:
    # Every node of the core workloads appends exactly one item, so the items count the
    # node executions the timing divides by.
    workload = WORKLOADS[name]
    _, items = workload.expected(4)
    assert len(items) == workload.nodes(4)


def test_repeated_invocations_do_not_leak_state() -> None:
    runner = WORKLOADS["chain10"].builders["stargraph"](3)
    assert snapshot(runner()) == snapshot(runner()) == (3, ("0", "1", "2"))


def _wrong(size: int) -> Callable[[], State]:
    """A builder whose runner returns a wrong final state."""
    return lambda: State(counter=size, items=["nope"])


def test_disagreeing_engine_aborts() -> None:
    workload = WORKLOADS["chain10"]
    broken: Workload = replace(workload, builders={**workload.builders, "plain": _wrong})
    with pytest.raises(StateMismatch, match=r"'chain10'.*engines disagree"):
        check_agreement(broken, 2)


def test_quick_run_prints_table(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["--quick", "--rounds", "1", "--only", "chain10,send", "--no-import-time"])
    out = capsys.readouterr().out
    assert status == 0
    assert "LangGraph/stargraph" in out
    assert "stargraph/plain" in out
    assert "chain10" in out
    assert "send" in out


def test_unknown_workload_is_rejected() -> None:
    with pytest.raises(SystemExit, match="unknown workload"):
        main(["--only", "nope"])


# ---------------------------------------------------------------------- durable sections


@pytest.mark.parametrize("size", [1, 3])
def test_durable_engines_agree_on_final_state(size: int, tmp_path: Path) -> None:
    # Every engine returns the expected state, reads it back from its file, and stored a row
    # per step (the check raises otherwise).
    finals = check_durable_agreement(size, tmp_path)
    assert set(finals) == {spec.name for spec in DURABLE_ENGINES}
    assert set(finals.values()) == {(size, tuple(str(i) for i in range(size)))}


def test_durable_engines_commit_each_run_under_a_new_id(tmp_path: Path) -> None:
    for spec in DURABLE_ENGINES:
        engine = spec.open(3, tmp_path / f"{spec.name}.db")
        try:
            engine.run()
            first = engine.last
            engine.run()
            assert engine.last != first, spec.name
            assert engine.stored() == (3, ("0", "1", "2")), spec.name
            assert engine.rows() >= 3, spec.name
        finally:
            engine.close()


def test_stargraph_durable_history_has_a_step_per_node(tmp_path: Path) -> None:
    engine = StargraphEngine(4, tmp_path / "sg.db")
    try:
        engine.run()
        assert [step.step for step in engine.app.history(engine.last)] == [0, 1, 2, 3, 4]
    finally:
        engine.close()


class _Forgetful(PlainEngine):
    """A plain engine whose file lost the last step."""

    def stored(self) -> tuple[int, tuple[str, ...]]:
        counter, items = super().stored()
        return counter - 1, items[:-1]


def test_durable_disagreeing_engine_aborts(tmp_path: Path) -> None:
    specs = [*DURABLE_ENGINES[:2], EngineSpec("plain", "broken", _Forgetful)]
    with pytest.raises(StateMismatch, match=r"(?s)durable \(chain of 2\).*plain.*stored"):
        check_durable_agreement(2, tmp_path, specs)


def test_bytes_are_measured_for_each_engine(tmp_path: Path) -> None:
    results = measure_bytes(5, tmp_path)
    assert set(results) == {"stargraph", "langgraph", "plain"}
    for name, result in results.items():
        assert result.rows >= 5, name
        assert 0 < result.payload <= result.row_bytes, name
        assert result.vacuumed > 0, name
    text, _ = render_bytes(5, results)
    assert "LangGraph/stargraph: payload" in text


def test_vacuumed_size_counts_the_checkpointed_file(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (x BLOB)")
    conn.executemany("INSERT INTO t VALUES (?)", [(b"x" * 1000,)] * 50)
    conn.commit()
    conn.execute("DELETE FROM t")
    conn.commit()
    conn.close()
    assert 0 < vacuumed_size(path) < 50 * 1000
    assert not (tmp_path / "x.db-wal").exists() or (tmp_path / "x.db-wal").stat().st_size == 0


def test_quick_run_prints_durable_sections(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["--quick", "--rounds", "1", "--only", "durable,bytes", "--no-import-time"])
    out = capsys.readouterr().out
    assert status == 0
    assert "durable: 10-node chain" in out
    assert "bytes: 100-node chain" in out
    for engine in ("stargraph-full", "langgraph-full", "plain"):
        assert engine in out
    assert "µs/node" not in out  # the core table was not selected


def test_concurrency_section_is_registered_and_its_fanout_agrees_between_runs() -> None:
    from benchmarks.bench_concurrency import jittered_fanout
    from benchmarks.core_harness import all_sections

    assert "concurrency" in all_sections()
    _, same = jittered_fanout(runs=3)
    assert same


def test_long_run_round_takes_the_mean_of_stargraphs_runs_around_langgraphs(
    tmp_path: Path,
) -> None:
    from benchmarks.bench_long_runs import _round, run_all

    ours, theirs, totals = _round(2, tmp_path, runs=3)
    assert (ours.engine, theirs.engine) == ("stargraph", "langgraph")
    assert len(totals) == 3
    assert ours.total_s == pytest.approx(sum(totals) / 3)
    assert ours.calls == theirs.calls == 2
    # Each stargraph run had a file of its own: three databases, and LangGraph's.
    assert len(list(tmp_path.glob("stargraph-*/stargraph-2.db"))) == 3
    assert (tmp_path / "langgraph-2.db").exists()

    results, notes, _ = run_all([2], rounds=1, runs=2)
    assert [r.engine for r in results] == ["stargraph", "langgraph"]
    assert "the mean of 2 runs a round" in notes[0]


def test_issue45_modes_section_is_registered_and_names_each_missed_target() -> None:
    from benchmarks.bench_modes import ROWS, render
    from benchmarks.core_harness import all_sections

    assert "modes" in all_sections()
    figures = dict.fromkeys(ROWS, (100.0, 3000.0))
    figures["stream(events)"] = (200.0, 3000.0)  # 2x our invoke: over 1.5x
    figures["ainvoke"] = (140.0, 1000.0)  # 1.4x our invoke (over 1.3x), 7x LangGraph
    text, misses = render("chain", figures)
    assert [line.split()[0] for line in text.splitlines()[2:]] == list(ROWS)
    assert misses == [
        "chain stream(events) is 2.00x our invoke (target <= 1.5x)",
        "chain stream(events) is 15.0x faster than LangGraph (target >= 20x)",
        "chain ainvoke is 1.40x our invoke (target <= 1.3x)",
        "chain ainvoke is 7.1x faster than LangGraph (target >= 20x)",
    ]


# ---------------------------------------------------------------------- agents section

AGENT_ANSWERS: dict[str, object] = {
    "react": "sum 5, product 20",
    "mapreduce": (10, tuple(sorted(["8", *(f"w{i:02d}" for i in range(8)), "9"]))),
    "skill": (7, tuple(str(i) for i in range(7))),
    "thread": tuple(
        message
        for i in range(5)
        for message in (f"user says {i}", f"bot: 'user says {i}' is message {2 * i + 1}")
    ),
    "hitl": ({"question": "refund A-17?"}, "A-17: refunded"),
    "prebuilt": "sum 5, product 20",
}


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Any]:
    from benchmarks.bench_agents import Scratch, react_script

    from stargraph.testing import ScriptedOpenAIServer

    with ScriptedOpenAIServer(react_script) as server:
        yield Scratch(tmp_path, lambda: server.base_url)


@pytest.mark.parametrize("name", sorted(AGENT_ANSWERS))
def test_issue45_agent_workloads_agree_on_both_engines_and_modes(name: str, scratch: Any) -> None:
    from benchmarks.bench_agents import (
        all_agent_workloads,
        build_agent_workload,
        check_agent_agreement,
    )
    from benchmarks.core_harness import all_sections

    assert "agents" in all_sections()
    workload = {w.name: w for w in all_agent_workloads()}[name]
    with ExitStack() as stack:
        built = build_agent_workload(workload, scratch, stack)
        answers = check_agent_agreement(workload, built)
        # A second run of each (a new thread, a new run id) answers the same again.
        again = check_agent_agreement(workload, built)
    assert set(answers) == {
        (e, m) for e in ("stargraph", "langgraph") for m in ("invoke", "stream")
    }
    assert set(map(repr, answers.values())) == {repr(AGENT_ANSWERS[name])}
    assert again == answers


def test_issue45_agent_workload_that_disagrees_aborts(scratch: Any) -> None:
    from benchmarks.bench_agents import (
        Built,
        all_agent_workloads,
        build_agent_workload,
        check_agent_agreement,
    )

    workload = {w.name: w for w in all_agent_workloads()}["skill"]

    def wrong_stream(scratch: Any) -> Built:
        built = workload.builders["stargraph"](scratch)
        return Built({**built.runners, "stream": lambda: (6, ())}, built.closers)

    broken = replace(workload, builders={**workload.builders, "stargraph": wrong_stream})
    with (
        ExitStack() as stack,
        pytest.raises(StateMismatch, match=r"(?s)'skill'.*stargraph  stream"),
    ):
        check_agent_agreement(broken, build_agent_workload(broken, scratch, stack))


def test_issue45_llmcall_section_is_registered_and_times_every_client() -> None:
    from benchmarks.bench_llmcall import per_call_us
    from benchmarks.core_harness import all_sections

    assert "llmcall" in all_sections()
    costs = per_call_us(calls=2, rounds=1)
    assert list(costs) == [
        "raw HTTP (http.client + orjson)",
        "openai create()",
        "openai create() + model_dump + from_openai",
        "OpenAIChatModel.complete",
    ]
    assert all(us > 0 for us in costs.values())


@pytest.mark.mcp
def test_issue49_mcp_section_is_registered_and_times_each_way_of_calling() -> None:
    from benchmarks.bench_mcp import DIRECT, DISPATCH, IN_RUN, mcp_section, per_call_us
    from benchmarks.core_harness import all_sections

    assert all_sections()["mcp"] is mcp_section
    # per_call_us itself checks that each way gets the server's echo back, and that the run
    # made every call.
    costs = per_call_us(calls=3, rounds=1)
    assert list(costs) == [DIRECT, DISPATCH, IN_RUN]
    assert all(us > 0 for us in costs.values())


def test_issue48_bench_check_counts_the_requests_each_check_makes(tmp_path: Path) -> None:
    # bench_check's pieces at a tiny size, no latency: recorded runs check identical with no
    # model request, and after the one-node edit as changed with one request per cassette.
    from benchmarks.bench_check import check, delayed_echo, live_runs

    from stargraph.testing import ScriptedOpenAIServer

    with ScriptedOpenAIServer(delayed_echo(0.0)) as server:
        live_runs(server.base_url, 3, tmp_path, 1)
        assert len(server.chat_requests) == 3 * 6
        assert check(server.base_url, tmp_path, "base", 2)[1] == 0
        assert len(server.chat_requests) == 3 * 6
        assert check(server.base_url, tmp_path, "prompt", 1)[1] == 1
        assert len(server.chat_requests) == 3 * 6 + 3
