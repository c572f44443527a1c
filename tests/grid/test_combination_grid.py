"""The combination grid: every feature x store x driver, compared with plain ``invoke``.

A cell (``chain-sqlite-stream_updates``) runs one feature's story (its run, the answer to
its interrupt, a thread's second turn) on one store through one driver; it must reach the
final state the reference reaches - the same story by ``invoke`` on the in-memory store -
and leave a consistent record: each run's status, its number of steps, the steps' writes,
``stopped_by``, its turn and its child runs - and run each tool body as often (counted
across every process the cell used). Cells that cannot exist are listed with the reason in
``cells.IMPOSSIBLE``. The ``postgres`` cells need the server (``make test``); the
rest run in ``make check``.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.grid.cells import (
    DRIVERS,
    IMPOSSIBLE,
    REFERENCE,
    STORES,
    STREAM_MODES,
    Backend,
    Result,
    all_cells,
    cell_id,
    fork_point,
    run_cell,
    story_for,
)
from tests.grid.features import FEATURES, LEDGER


def _cells() -> Iterator[Any]:
    for feature, store, driver in all_cells():
        name = cell_id(feature, store, driver)
        if name not in IMPOSSIBLE:
            marks = [pytest.mark.postgres] if store == "postgres" else []
            yield pytest.param((feature, store, driver), id=name, marks=marks)


def _commits(summary: dict[str, Any]) -> int:
    """Steps committed after the first, over a run and its child runs."""
    nested = sum(_commits(child) for child in summary["children"].values())
    return int(summary["steps"]) - 1 + nested


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Result]:
    """The reference result of a feature, computed once."""
    made: dict[str, Result] = {}

    def get(feature: str) -> Result:
        if feature not in made:
            tmp = tmp_path_factory.mktemp(f"ref-{feature}")
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv(LEDGER, str(tmp / "effects.txt"))
                backend = Backend(REFERENCE[0], tmp)
                with story_for(FEATURES[feature], backend) as story:
                    made[feature] = run_cell(story, REFERENCE[1])
        return made[feature]

    return get


def _backend(store: str, tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    if store != "postgres":
        return Backend(store, tmp_path)
    dsn = request.getfixturevalue("grid_pg_dsn")
    return Backend(store, tmp_path, dsn=dsn, schema=request.getfixturevalue("grid_pg_schema"))


@pytest.mark.parametrize("cell", list(_cells()))
def test_cell(
    cell: tuple[str, str, str],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    reference: Callable[[str], Result],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    feature, store, driver = cell
    monkeypatch.setenv(LEDGER, str(tmp_path / "effects.txt"))
    expected = reference(feature)
    backend = _backend(store, tmp_path, request)
    try:
        with story_for(FEATURES[feature], backend) as story:
            story.forker = request.getfixturevalue("grid_forker")
            story.kill_at = max(1, sum(_commits(r) for r in expected.runs.values()) // 2)
            got = run_cell(story, driver)
    finally:
        backend.close()
    assert got.final == expected.final
    # Each tool body ran as often as in the reference, however many processes ran the story.
    assert got.effects == expected.effects
    if driver == "fork_as_node":
        fork = got.runs.pop("fork-1")
        parent = expected.runs[list(expected.runs)[-1]]
        step, _, _, _ = fork_point(parent)
        _same_fork(fork, parent, step)
    assert got.runs == expected.runs


def _same_fork(fork: dict[str, Any], parent: dict[str, Any], step: int) -> None:
    """A fork at ``step`` with what its node wrote, as that node, is the parent again: the
    same status and steps, the same writes but at ``step`` (written by the fork's update),
    and the parent's child runs of the steps after it."""
    assert (fork["status"], fork["stopped_by"], fork["error"], fork["steps"]) == (
        parent["status"], parent["stopped_by"], parent["error"], parent["steps"]
    )  # fmt: skip
    assert [w for _, _, w in fork["writes"][step - 1]] == [
        w for _, _, w in parent["writes"][step - 1]
    ]
    assert fork["writes"][step:] == parent["writes"][step:]
    assert fork["writes"][: step - 1] == parent["writes"][: step - 1]
    later = {
        k: v for k, v in parent["children"].items() if int(k.split("@")[1].split(".")[0]) > step
    }
    assert fork["children"] == later


def test_issue44_grid_lists_only_real_cells_as_impossible() -> None:
    real = {cell_id(*cell) for cell in all_cells()}
    assert set(IMPOSSIBLE) <= real, sorted(set(IMPOSSIBLE) - real)
    assert all(reason.strip() for reason in IMPOSSIBLE.values())
    # The reference cell and every driver of every feature on a durable store exist.
    assert not {n for n in IMPOSSIBLE if n.endswith("-memory-invoke")}
    assert len(real) == len(FEATURES) * len(STORES) * len(DRIVERS)


@pytest.mark.parametrize("feature", [f for f in FEATURES if FEATURES[f].storeless])
def test_issue44_grid_reference_is_the_storeless_invoke(
    feature: str, tmp_path: Path, reference: Callable[[str], Result]
) -> None:
    spec = FEATURES[feature]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    spec.prepare(workspace)
    with spec.serve(workspace) as services:
        final = spec.build().compile(services=services).invoke(spec.input)
    # A graph with an output model returns that model: the stored state's fields it names.
    expected = {k: v for k, v in reference(feature).final.items() if k in type(final).model_fields}
    assert final.model_dump(mode="json") == expected


def test_issue44_grid_streams_every_mode() -> None:
    from stargraph.runtime import CompiledGraph

    def literals(hint: Any) -> set[str]:
        args = typing.get_args(hint)
        return {a for a in args if isinstance(a, str)} | {m for a in args for m in literals(a)}

    # What stream(mode=...) is annotated to take: a grid without a new mode fails here.
    assert set(STREAM_MODES) == literals(typing.get_type_hints(CompiledGraph.stream)["mode"])
