"""The README's llama.cpp setup, run as written against the real server.

The commands come out of README.md's endpoint section (the ``# llama.cpp`` lines of its setup
block) and the ``priced.py`` block, so the test follows the page: the server line starts
``llama-server`` (on a free port instead of 8080, which another program may hold), the
``export`` line and the example run in one shell, and ``priced.py`` must print what the
README says it prints. ``tests/test_docs.py`` runs the same ``priced.py`` against the scripted
server; this is the run against a real model.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.real_model import llamaserver
from tests.test_docs import _expected_output, _matches, blocks_of

pytestmark = pytest.mark.real_model  # a llama.cpp model server (scripts/ensure_llama_server.sh)

README = llamaserver.ROOT / "README.md"
RUN_TIMEOUT_S = 600  # only catches a hung server: every reply is bounded by max_tokens


def llama_cpp_lines() -> list[str]:
    """The commands under ``# llama.cpp`` in the README's setup block, up to the next comment."""
    for block in blocks_of(README):
        lines = block.body.splitlines()
        starts = [i for i, line in enumerate(lines) if line.startswith("# llama.cpp")]
        if block.lang == "sh" and starts:
            section = []
            for line in lines[starts[0] + 1 :]:
                if line.startswith("#"):
                    break
                section.append(line)
            return section
    raise AssertionError("README.md has no sh block with a '# llama.cpp' section")


def priced_block() -> str:
    (body,) = [b.body for b in blocks_of(README) if b.options.get("file") == "priced.py"]
    return body


@pytest.fixture
def readme_server(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """The README's server line, started from the repository root on a free port."""
    server_line, *_ = llama_cpp_lines()
    assert server_line.endswith(" &"), server_line
    port = llamaserver._free_port()
    argv = shlex.split(server_line.removesuffix(" &").replace("8080", str(port)))
    assert argv[0] == ".venv-llama/bin/llama-server", argv
    assert "--jinja" in argv, argv
    llamaserver.ensure()
    log_path = tmp_path / "readme-server.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        argv, cwd=llamaserver.ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
    )
    server = llamaserver.LlamaServer(process, port, log_path, None, log)
    alias = argv[argv.index("--alias") + 1]
    try:
        if not llamaserver._wait_ready(server, alias):
            pytest.fail(f"the README's llama-server did not start:\n{server.log_tail()}")
        yield alias, port
    finally:
        server.stop()


def shell(lines: list[str], port: int, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``lines`` in one bash, the README's ``.venv/bin/python`` being this interpreter."""
    script = "\n".join(
        line.replace("8080", str(port)).replace(".venv/bin/python", shlex.quote(sys.executable))
        for line in lines
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "STARGRAPH_"))}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    return subprocess.run(
        ["bash", "-ec", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def test_readme_llama_cpp_commands_and_priced_py_print_what_the_readme_says(
    readme_server: tuple[str, int], tmp_path: Path
) -> None:
    alias, port = readme_server
    _, export, example = llama_cpp_lines()
    assert export.startswith("export OPENAI_BASE_URL=http://127.0.0.1:8080/v1"), export
    assert f"STARGRAPH_MODEL={alias}" in export
    assert example == ".venv/bin/python examples/react_agent.py"

    # The example: the lines as the README has them, from the repository root.
    ran = shell([export, example], port, llamaserver.ROOT)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    said = readme_example_output()
    assert _matches(said, ran.stdout), f"the README says:\n{said}\nbut it printed:\n{ran.stdout}"

    # priced.py, saved as the README says, run after the same export line.
    (tmp_path / "priced.py").write_text(priced_block(), encoding="utf-8")
    priced = shell([export, f"{shlex.quote(sys.executable)} priced.py"], port, tmp_path)
    assert priced.returncode == 0, priced.stdout + priced.stderr
    expected = _expected_output(priced_block())
    assert expected is not None
    assert _matches(expected, priced.stdout), (
        f"README.md says priced.py prints:\n{expected}\nbut it printed:\n{priced.stdout}"
    )


def readme_example_output() -> str:
    """What the README says the example prints on the llama.cpp setup (the indented lines
    after the sentence that introduces them)."""
    text = README.read_text(encoding="utf-8")
    found = re.search(r"With the llama\.cpp lines the example prints:\n\n((?:    .*\n)+)", text)
    assert found is not None, "README.md no longer says what the llama.cpp example prints"
    return "\n".join(line.strip() for line in found[1].splitlines())
