"""The CPU-time budget gate's verdict (``benchmarks.budgets``), on made-up figures: no timing.

Whether the gate measures well is shown by running it (``make budgets``); what it decides
from the figures it measured is pinned here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.budgets import (  # noqa: E402
    BUDGETS,
    HOT_PATHS,
    Budget,
    check_budgets,
    render,
)

TABLE = (
    Budget("chain10.invoke", 4.0, "node"),
    Budget("tool.dispatch", 40.0, "dispatch", tolerance=0.5),
)


def test_issue45_figures_within_budget_and_tolerance_pass() -> None:
    # Over the budget but within its tolerance is a pass: noise is not a regression.
    assert check_budgets({"chain10.invoke": 5.3, "tool.dispatch": 59.0}, TABLE) == []


def test_issue45_a_path_over_its_tolerance_fails_naming_figure_budget_and_tolerance() -> None:
    failures = check_budgets({"chain10.invoke": 5.5, "tool.dispatch": 10.0}, TABLE)
    assert failures == [
        "chain10.invoke: 5.50 µs/node is over its budget of 4 µs/node + 35% tolerance "
        "(limit 5.40), +38%"
    ]


def test_issue45_each_path_over_budget_is_named_and_a_missing_one_fails() -> None:
    failures = check_budgets({"tool.dispatch": 61.0}, TABLE)
    assert [f.split(":")[0] for f in failures] == ["chain10.invoke", "tool.dispatch"]
    assert "not measured" in failures[0]
    assert "+ 50% tolerance (limit 60.00)" in failures[1]


def test_issue45_every_hot_path_has_a_budget_and_the_table_shows_the_verdicts() -> None:
    assert [p.name for p in HOT_PATHS] == [b.path for b in BUDGETS]
    assert all(p.unit == b.unit for p, b in zip(HOT_PATHS, BUDGETS, strict=True))
    figures = {b.path: (b.budget, b.budget, 100.0) for b in BUDGETS}
    figures["tool.dispatch"] = (1e6, 1e6, 100.0)
    lines = render(figures, BUDGETS).splitlines()
    verdicts = {line.split()[0]: line.split()[-1] for line in lines[4:]}
    assert verdicts == {b.path: "OVER" if b.path == "tool.dispatch" else "ok" for b in BUDGETS}


def test_issue45_the_gate_exits_1_when_a_path_is_over_budget(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks import budgets
    from benchmarks.core_harness import main

    measured = {b.path: (b.budget, b.budget, 100.0) for b in BUDGETS}
    monkeypatch.setattr(budgets, "_measure_all", lambda quick, budgets=(): dict(measured))
    assert main(["--budgets", "--quick"]) == 0
    assert "all hot paths within their CPU budgets" in capsys.readouterr().out
    measured["chain10.sqlite"] = (1e3, 1e3, 100.0)
    assert main(["--budgets"]) == 1
    out = capsys.readouterr().out
    assert "CPU budget exceeded:\n  - chain10.sqlite: 1000.00 µs/step is over its budget" in out
