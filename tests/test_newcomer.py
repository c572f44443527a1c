"""The getting-started path, end to end, as a newcomer walks it: an empty folder, the files
the page says to save, and only the commands the page shows, each in a subprocess.

The commands and the code come from docs/getting-started.md itself, so the page cannot drift
from what works. Then the README's first snippet, run twice in a row as its page says.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_docs import ROOT, Block, _commands, blocks_of

BIN = Path(sys.executable).parent


def _env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "STARGRAPH_")) and k != "PYTHONPATH"
    }
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def _shell(folder: Path, line: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["bash", "-ec", line],
        cwd=folder,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, (line, result.stdout, result.stderr)
    return result


def _page_steps(page: str) -> list[Block]:
    """The blocks a reader acts on: files to save (python) and commands to type (sh)."""
    return [
        b
        for b in blocks_of(ROOT / page)
        if (b.lang == "python" and "file" in b.options) or (b.lang == "sh" and "sh" in b.options)
    ]


@pytest.mark.slow
def test_getting_started_from_an_empty_folder(tmp_path: Path) -> None:
    steps = _page_steps("docs/getting-started.md")
    assert [b.lang for b in steps] == ["python", "sh"]
    saved, typed = steps
    assert saved.options["file"] == "first.py"
    (tmp_path / "first.py").write_text(saved.body, encoding="utf-8")
    assert list(tmp_path.iterdir()) == [tmp_path / "first.py"]  # nothing else to start with

    first = _shell(tmp_path, "python first.py").stdout.splitlines()
    assert first[0].startswith("sha256:")
    assert first[1] == "counter=2 items=['x', 'x']"
    assert first[-1] == "run_finished 2 None"

    outputs = {line: _shell(tmp_path, line) for line in _commands(typed.body)}
    by_command = {line.split()[1]: result for line, result in outputs.items()}
    assert set(by_command) == {"compile", "run", "runs", "show", "replay", "draw"}
    assert by_command["compile"].stdout.strip() == first[0]  # the script's hash, as imported
    assert json.loads(by_command["run"].stdout) == {"counter": 7, "items": ["x", "x"]}
    listed = by_command["runs"].stdout
    assert "cli-1" in listed
    assert listed.count(" done ") == 3  # the CLI's run and the two the script made
    assert "status     done" in outputs["stargraph show cli-1"].stdout
    assert (tmp_path / "run.html").stat().st_size > 1000
    assert "matches its record (2 steps, offline)" in by_command["replay"].stderr
    assert by_command["draw"].stdout.startswith("flowchart")


@pytest.mark.slow
def test_the_readme_first_snippet_runs_twice_in_a_row(tmp_path: Path) -> None:
    """It used to raise RunNotResumableError at ``app.resume("r-1")``, and a second run said
    "run 'r-1' already exists"."""
    [snippet] = [b for b in _page_steps("README.md") if b.lang == "python" and b.index == 1]
    (tmp_path / "first.py").write_text(snippet.body, encoding="utf-8")
    printed = [_shell(tmp_path, "python first.py").stdout for _ in range(2)]
    expected = "counter=1 items=['x']\ninterrupted\ncounter=2 items=['x', 'x']\n"
    expected += "counter=2 items=['x', 'x']\n"
    assert printed == [expected, expected]
