"""The everyday tooling keeps its promises: `make check` leaves out exactly the tests that need
more than the venv, pre-commit runs the venv's own tools, and ``src`` carries no tracking ids."""

from __future__ import annotations

import ast
import fcntl
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

NEEDS_MORE_THAN_THE_VENV = {"postgres", "ray", "browser", "graphviz", "real_model", "mcp"}
"""The markers of tests that need a server or a program the venv does not have."""


def _registered_markers() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    lines = config["tool"]["pytest"]["ini_options"]["markers"]
    return {re.split(r"[:(]", line, maxsplit=1)[0].strip() for line in lines}


def test_issue23_make_check_leaves_out_what_needs_more_than_the_venv_and_the_slow_tests() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    (expression,) = re.findall(r"^FAST_TESTS := (.+)$", makefile, flags=re.M)
    left_out = set(re.findall(r"not (\w+)", expression))
    assert left_out == NEEDS_MORE_THAN_THE_VENV | {"slow"}
    assert expression == " and ".join(f"not {m}" for m in re.findall(r"not (\w+)", expression))
    # A marker missing from pyproject.toml would make `-m` select nothing or fail.
    assert left_out <= _registered_markers()
    # check runs all three, side by side (one core each for mypy and pytest).
    (check,) = re.findall(r"^check: .*\n\t(.+)$", makefile, flags=re.M)
    assert check.split()[-3:] == ["lint", "typecheck", "pytest-fast"]


def test_issue23_pre_commit_runs_the_venv_tools_and_needs_no_network() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    assert [repo["repo"] for repo in config["repos"]] == ["local"]
    assert {hook["id"] for hook in hooks} == {"ruff", "ruff-format", "mypy"}
    for hook in hooks:
        assert hook["language"] == "system", hook
        program = hook["entry"].split()[0]
        assert program.startswith(".venv/bin/"), hook


def test_issue23_src_docstrings_and_comments_carry_no_tracking_ids() -> None:
    tracking = re.compile(r"issue [0-9]+|\b[A-E][0-9]{1,2}\b")
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted((ROOT / "src").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if tracking.search(line)
    ]
    assert found == [], "tracking ids belong in test names, not in src:\n" + "\n".join(found)


def test_issue23_src_says_interrupt_where_the_glossary_says_so() -> None:
    # docs/concepts/glossary.md: a run stopped to wait for an answer is "interrupted", never
    # parked, paused or suspended (a suspended generator is another thing, and stays).
    glossary = (ROOT / "docs" / "concepts" / "glossary.md").read_text(encoding="utf-8")
    (row,) = [line for line in glossary.splitlines() if line.startswith("| interrupt |")]
    assert row.rstrip(" |").endswith("park, pause, suspend")
    avoided = re.compile(r"\b(park|parks|parked|parking|pause|paused|pauses)\b", re.I)
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for folder in ("src", "docs")
        for path in sorted((ROOT / folder).rglob("*"))
        if path.suffix in {".py", ".md", ".js", ".html"} and path.name != "glossary.md"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if avoided.search(line)
    ]
    assert found == [], "say interrupt(ed), as the glossary does:\n" + "\n".join(found)


def test_every_slow_test_listed_in_conftest_exists() -> None:
    # Read from the syntax tree: several folders have a module named conftest.
    conftest = ast.parse((ROOT / "tests" / "conftest.py").read_text(encoding="utf-8"))
    (table,) = [
        node.value
        for node in conftest.body
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and node.target.id == "SLOW_TESTS"
        and node.value is not None
    ]
    assert isinstance(table, ast.Dict)
    slow_tests: dict[str, tuple[str, ...]] = ast.literal_eval(table)
    assert len(slow_tests) == len(table.keys), "a file is listed twice"
    stale = []
    for file, names in slow_tests.items():
        path = ROOT / file
        if not path.is_file():
            stale.append(file)
            continue
        defined = {
            node.name
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        }
        stale += [f"{file}::{name}" for name in names if name != "*" and name not in defined]
    assert stale == [], f"SLOW_TESTS in tests/conftest.py names tests that do not exist: {stale}"


def test_make_test_builds_the_model_server_in_the_background_first() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    (prerequisites,) = re.findall(r"^test: (.+)$", makefile, flags=re.M)
    assert prerequisites.split()[0] == "llama-background", "the build starts before the rest"
    (background,) = re.findall(r"^llama-background:\n\t(.+)$", makefile, flags=re.M)
    assert background == "bash scripts/ensure_llama_server.sh --background"
    pytest_recipe = makefile.split("\npytest:", 1)[1].split("\n\n", 1)[0]
    assert "ensure_llama_server" not in pytest_recipe, "pytest must not wait for the build"


def test_the_real_model_tests_are_collected_last() -> None:
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/real_model",
            "tests/test_habits.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout.splitlines()
    ids = [line for line in listed if "::" in line]
    real = [index for index, nodeid in enumerate(ids) if nodeid.startswith("tests/real_model/")]
    assert real, "tests/real_model was collected"
    assert ids[0].startswith("tests/test_habits.py"), ids[:3]
    assert real == list(range(len(ids) - len(real), len(ids))), "real_model tests come last"


def test_a_second_llama_provisioning_waits_for_the_one_in_progress(tmp_path: Path) -> None:
    venv = tmp_path / "llama"
    lock = Path(f"{venv}.lock")
    env = {**os.environ, "STARGRAPH_LLAMA_VENV": str(venv), "LLAMA_BASE_PY": "false"}
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a build in progress holds the lock
        waiting = subprocess.Popen(
            ["bash", str(ROOT / "scripts" / "ensure_llama_server.sh")],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            inode = os.stat(lock).st_ino
            deadline = time.monotonic() + 60
            while not _blocked_on(inode):
                assert waiting.poll() is None, waiting.communicate()[0]
                assert time.monotonic() < deadline, "the second call never waited on the lock"
                time.sleep(0.02)
            assert not venv.exists(), "nothing is touched while the other build runs"
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
        output, _ = waiting.communicate(timeout=60)
    # Once the lock is free it goes on (here to fail at once: its base Python is `false`).
    assert waiting.returncode != 0
    assert "cannot create a virtualenv with false" in output


def _blocked_on(inode: int) -> bool:
    """Whether some process waits for a lock on the file with this inode (``/proc/locks``)."""
    locks = Path("/proc/locks").read_text(encoding="utf-8").splitlines()
    return any("->" in line and f":{inode} " in line for line in locks)
