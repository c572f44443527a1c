"""The ReAct example runs offline and reports the answer and the stopping rule."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "react_agent.py"


def test_example_runs_offline(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    assert "final answer: The order costs 16.00 EUR." in out
    assert "stopped by:   exit/final_answer" in out
    assert out.count(" success ") == 3
