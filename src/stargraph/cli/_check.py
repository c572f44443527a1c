"""``stargraph check CASSETTES... --graph new.py``: recorded runs as a regression suite.

Each cassette is replayed against the new graph version (``stargraph.replay.check_cassette``)
in a pool of processes: unchanged regions are served from the record (no model call),
changed ones run their new code with the graph's services (``--offline``: a call they make
breaks the cassette instead). Per cassette the verdict is ``identical``, ``changed`` (the
regions that changed, the final-state diff, ``--score module:fn`` of the new final state) or
``broken`` (the replay failed). ``--json FILE`` and ``--junit FILE`` (``-`` for stdout)
write machine-readable results; ``--record`` refreshes the changed cassettes (their runs are
made again, live, with the new graph).

Exit status: 0 every cassette identical (with ``--record``: none broken), 1 some changed,
3 some broken (2 is a usage error).
"""

from __future__ import annotations

import concurrent.futures
import importlib
import json
import multiprocessing
import os
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from stargraph.cli import _load
from stargraph.cli._load import CliUsageError

__all__ = ["check_command", "junit_xml"]

EXIT_CHANGED = 1
EXIT_BROKEN = 3

# One graph (and score function) per worker process, loaded once by the pool's initializer.
_WORKER: dict[str, Any] = {}


def _score_fn(spec: str | None) -> Callable[[dict[str, Any]], float] | None:
    if spec is None:
        return None
    module_name, colon, attr = spec.partition(":")
    if not colon or not module_name or not attr:
        raise CliUsageError(f"--score expects module:function, got {spec!r}")
    _load.importable_cwd()
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise CliUsageError(f"--score {spec}: cannot load it ({exc})") from exc
    if not callable(fn):
        raise CliUsageError(f"--score {spec} is not a function")
    return fn  # type: ignore[no-any-return]


def _init(graph_spec: str, score_spec: str | None) -> None:
    _load.importable_cwd()
    target = _load.load_target(graph_spec)
    _WORKER["graph"] = _load.compile_target(target)
    _WORKER["score"] = _score_fn(score_spec)


def _check(path: str, live: bool, record: bool) -> dict[str, Any]:
    from stargraph.replay import check_cassette, record_again

    graph = _WORKER["graph"]
    result = check_cassette(path, graph, live=live, score=_WORKER["score"])
    if record and result.verdict == "changed":
        record_again(path, graph)
        result = result.model_copy(update={"recorded": True})
    return result.model_dump(mode="json")


def junit_xml(results: Sequence[dict[str, Any]]) -> str:
    """The results as a JUnit XML test suite: a changed cassette is a failure, a broken one
    an error."""
    suite = ET.Element(
        "testsuite",
        name="stargraph check",
        tests=str(len(results)),
        failures=str(sum(r["verdict"] == "changed" for r in results)),
        errors=str(sum(r["verdict"] == "broken" for r in results)),
        time=f"{sum(r['seconds'] for r in results):.3f}",
    )
    for result in results:
        case = ET.SubElement(
            suite,
            "testcase",
            classname="cassettes",
            name=result["path"],
            time=f"{result['seconds']:.3f}",
        )
        if result["verdict"] == "changed":
            failure = ET.SubElement(
                case,
                "failure",
                message="changed in regions " + ", ".join(result["changed_regions"]),
            )
            failure.text = "\n".join(result["changes"])
        elif result["verdict"] == "broken":
            error = ET.SubElement(case, "error", message=str(result["error"]))
            error.text = str(result["error"])
    return ET.tostring(suite, encoding="unicode")


def _write(target: str, text: str) -> None:
    if target == "-":
        click.echo(text)
    else:
        Path(target).write_text(text + "\n", encoding="utf-8")


def _line(result: dict[str, Any]) -> str:
    verdict = result["verdict"]
    head = f"{verdict:9} {result['path']}"
    if verdict == "changed":
        head += " (regions: " + (", ".join(result["changed_regions"]) or "none") + ")"
        if result.get("score") is not None:
            head += f" score {result['score']:g}"
        if result.get("recorded"):
            head += " - recorded again"
    elif verdict == "broken":
        head += f": {result['error']}"
    return head


@click.command("check")
@click.argument("cassettes", nargs=-1, required=True, type=click.Path(exists=True))
@click.option(
    "--graph", "graph_spec", required=True, help="The new graph version (file or module)."
)
@click.option("--processes", "-j", type=click.IntRange(min=1), help="Worker processes.")
@click.option("--offline", is_flag=True, help="Changed regions get no live services.")
@click.option("--score", "score_spec", metavar="MODULE:FN", help="Score each new final state.")
@click.option("--json", "json_out", metavar="FILE", help="Write the results as JSON (- : stdout).")
@click.option("--junit", "junit_out", metavar="FILE", help="Write JUnit XML (- : stdout).")
@click.option("--record", is_flag=True, help="Record the changed cassettes again, live.")
def check_command(
    *,
    cassettes: tuple[str, ...],
    graph_spec: str,
    processes: int | None,
    offline: bool,
    score_spec: str | None,
    json_out: str | None,
    junit_out: str | None,
    record: bool,
) -> None:
    """Replay CASSETTES against the graph --graph and report each: identical, changed (the
    regions and the final-state diff) or broken. Exit 0 all identical, 1 some changed, 3
    some broken."""
    _score_fn(score_spec)  # a bad --score is a usage error before any work
    paths = sorted(
        {
            str(p)
            for c in cassettes
            for p in ([*Path(c).glob("*.json")] if Path(c).is_dir() else [Path(c)])
        }
    )
    workers = processes or min(len(paths), os.cpu_count() or 1)
    if workers <= 1:
        _init(graph_spec, score_spec)
        results = [_check(p, not offline, record) for p in paths]
    else:
        # Spawned, not forked: the parent may hold threads (a model client's pool).
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=context, initializer=_init, initargs=(graph_spec, score_spec)
        ) as pool:
            results = list(
                pool.map(_check, paths, [not offline] * len(paths), [record] * len(paths))
            )
    for result in results:
        click.echo(_line(result), err=json_out == "-" or junit_out == "-")
    if json_out is not None:
        _write(json_out, json.dumps(results, indent=2, sort_keys=True))
    if junit_out is not None:
        _write(junit_out, junit_xml(results))
    counts = {
        v: sum(r["verdict"] == v for r in results) for v in ("identical", "changed", "broken")
    }
    click.echo(
        f"{len(results)} cassettes: {counts['identical']} identical, {counts['changed']} "
        f"changed, {counts['broken']} broken",
        err=True,
    )
    if counts["broken"]:
        raise SystemExit(EXIT_BROKEN)
    if counts["changed"] and not record:
        raise SystemExit(EXIT_CHANGED)
