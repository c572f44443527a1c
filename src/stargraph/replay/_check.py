"""Recorded runs as a regression suite: replay cassettes against a new graph version.

:func:`check_cassette` replays one cassette against a graph (``replay(cassette,
graph=new)``, see ``runtime._versions``) and says what became of it: ``identical`` (the
new graph reproduces the record), ``changed`` (it runs to the end, differing where the
graph changed: the regions, the final-state diff, a score if asked) or ``broken`` (the
replay failed: a changed region needs a service it was not given, a node raised, the
cassette is damaged). ``stargraph check`` runs it over many cassettes in parallel
processes, with JSON and JUnit XML output and exit codes for CI.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict

from stargraph._typed import TypedModel
from stargraph.checkpoint import MemoryStore
from stargraph.errors import ReplayError, StargraphError
from stargraph.runtime._versions import RegionReport, ReplayReport, region_hashes, replay_across

if TYPE_CHECKING:
    from stargraph.runtime import CompiledGraph

__all__ = ["CassetteCheck", "Verdict", "check_cassette", "check_cassettes", "record_again"]

Verdict = Literal["identical", "changed", "broken"]
"""What became of a cassette replayed against a new graph version."""


class CassetteCheck(TypedModel):
    """One cassette replayed against a new graph version (see :func:`check_cassette`).

    ``changed_regions``: the regions whose code or IR changed and that the run reached;
    ``regions``: the whole per-region report; ``changes``: how the final state differs from
    the recorded one; ``score``: the score function's value of the new final state (when
    one was given); ``error``: why the replay failed (``broken``)."""

    typed_error = ReplayError

    model_config = ConfigDict(frozen=True)

    path: str
    run_id: str
    verdict: Verdict
    changed_regions: tuple[str, ...] = ()
    regions: tuple[RegionReport, ...] = ()
    changes: tuple[str, ...] = ()
    score: float | None = None
    error: str | None = None
    seconds: float = 0.0
    recorded: bool = False


def _regions(cassette: Any, graph: CompiledGraph[Any], where: str) -> dict[str, str]:
    carried: dict[str, str] = dict(getattr(cassette, "regions", None) or {})
    if carried:
        return carried
    if cassette.run.graph_hash == graph.graph_hash:
        # A cassette from before region hashes, of this very graph: nothing changed.
        return region_hashes(graph.plan)
    raise ReplayError(
        f"cassette {where} carries no region hashes and was recorded by graph "
        f"{cassette.run.graph_hash}, not {graph.graph_hash}; record it again with "
        "export_cassette(..., graph=app) (or stargraph check --record with the graph that "
        "recorded it) before editing the graph",
        run_id=cassette.run.run_id,
    )


def check_cassette(
    path: str | Path,
    graph: CompiledGraph[Any],
    *,
    live: bool = True,
    score: Callable[[dict[str, Any]], float] | None = None,
    key: bytes | str | None = None,
) -> CassetteCheck:
    """Replay the cassette at ``path`` against ``graph`` and say what became of it.

    ``live``: changed regions run with ``graph``'s services (else a call they make breaks
    the check). ``score``: called with the new final state (JSON) of a cassette that ran to
    the end. ``key``: the cassette signing key, as for ``load_cassette``."""
    from stargraph.replay import load_cassette

    started = time.perf_counter()
    where = str(path)
    run_id = ""
    try:
        cassette = load_cassette(path, key=key)
        run_id = cassette.run.run_id
        report = replay_across(
            graph.steploop, cassette, _regions(cassette, graph, where), live=live
        )
    except StargraphError as exc:
        return CassetteCheck(
            path=where,
            run_id=run_id,
            verdict="broken",
            error=f"{type(exc).__name__}: {exc}",
            seconds=time.perf_counter() - started,
        )
    return _verdict(where, report, score, started)


def _verdict(
    where: str,
    report: ReplayReport,
    score: Callable[[dict[str, Any]], float] | None,
    started: float,
) -> CassetteCheck:
    value = None if score is None else float(score(report.final))
    return CassetteCheck(
        path=where,
        run_id=report.run_id,
        verdict="identical" if report.identical else "changed",
        changed_regions=report.changed_regions,
        regions=report.regions,
        changes=report.changes,
        score=value,
        seconds=time.perf_counter() - started,
    )


def check_cassettes(
    paths: Iterable[str | Path],
    graph: CompiledGraph[Any],
    *,
    live: bool = True,
    score: Callable[[dict[str, Any]], float] | None = None,
    key: bytes | str | None = None,
) -> list[CassetteCheck]:
    """:func:`check_cassette` for each of ``paths``, in this process, in order (``stargraph
    check`` spreads them over processes)."""
    return [check_cassette(p, graph, live=live, score=score, key=key) for p in paths]


def record_again(
    path: str | Path, graph: CompiledGraph[Any], *, key: bytes | str | None = None
) -> Path:
    """Refresh the cassette at ``path``: run ``graph`` live from the cassette's recorded
    input (same run id) and write the new recording over it, with ``graph``'s region
    hashes. What ``stargraph check --record`` does to the cassettes whose changes are
    accepted; every model call of the run is made again."""
    from stargraph.replay import export_cassette, load_cassette

    cassette = load_cassette(path, key=key)
    first = min(cassette.steps, key=lambda s: s.step)
    snapshot = first.snapshot or {}
    store = MemoryStore()
    app = graph.with_store(store)
    fields = app.plan.channels
    app.invoke({k: v for k, v in snapshot.items() if k in fields}, run_id=cassette.run.run_id)
    return export_cassette(store, cassette.run.run_id, path, key=key, graph=app)
