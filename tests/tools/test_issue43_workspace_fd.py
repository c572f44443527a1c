"""Workspace tools open files by descriptor, so a directory swapped for a symlink between the
check and the use cannot make them read or write outside the workspace.

A second process swaps ``ws/d`` between a real directory and a symlink to a directory outside
as fast as it can while the tools run through the arbiter a bounded number of times. Each
assertion can only fail if a tool escaped; the old check-then-open-by-path code escaped a few
times in every thousand calls, so a run of a few thousand calls catches it reliably.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stargraph.errors import ToolError
from stargraph.tools import Arbiter, ToolCall, builtin_tools

ArbiterFactory = Callable[..., Arbiter]

CALLS = 3000
OUTSIDE_TEXT = "OUTSIDE-SECRET\n"

# Swaps ws/d (a directory) for a symlink to the outside directory and back, forever; a tool
# that creates parents may recreate ws/d in the gap, which the swapper clears and goes on.
_SWAPPER = r"""
import os, shutil, sys
ws, outside = sys.argv[1], sys.argv[2]
d, keep = os.path.join(ws, "d"), os.path.join(ws, ".d_real")

def restore():
    while True:
        try:
            if os.path.islink(d):
                os.unlink(d)
            elif os.path.isdir(d):
                shutil.rmtree(d)
            os.rename(keep, d)
            return
        except OSError:
            pass

print("ready", flush=True)
while True:
    os.rename(d, keep)
    try:
        os.symlink(outside, d)
        os.unlink(d)
    except OSError:
        pass
    restore()
"""


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text(OUTSIDE_TEXT)
    return folder


@pytest.fixture
def swapping(workspace: Path, outside: Path) -> Iterator[None]:
    """``workspace/d`` (holding ``secret.txt`` = "inside") swapped with a symlink out."""
    (workspace / "d").mkdir()
    (workspace / "d" / "secret.txt").write_text("inside\n")
    proc = subprocess.Popen(
        [sys.executable, "-c", _SWAPPER, str(workspace), str(outside)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        proc.stdout.close()
        yield
        assert proc.poll() is None, "the swapper died: the race was not exercised"
    finally:
        proc.kill()
        proc.wait()


def _outside_untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT


def _calls(arbiter: Arbiter, tool: str, args: dict[str, Any]) -> Iterator[Any]:
    """The payload of each of ``CALLS`` calls (``None`` for a refused or failed one)."""
    for _ in range(CALLS):
        try:
            yield arbiter.dispatch(ToolCall(tool=tool, args=args)).payload
        except ToolError:  # refused (a symlink seen) or missing (the swap's gap): no escape
            yield None


@pytest.mark.usefixtures("swapping")
def test_issue43_read_never_reads_through_a_swapped_symlink(
    make_arbiter: ArbiterFactory, outside: Path
) -> None:
    arbiter = make_arbiter(*builtin_tools())
    payloads = list(_calls(arbiter, "choir.fs.read", {"path": "d/secret.txt"}))
    assert OUTSIDE_TEXT not in payloads
    assert "inside\n" in payloads  # the reads did run, not only fail
    _outside_untouched(outside)


@pytest.mark.usefixtures("swapping")
@pytest.mark.parametrize("path", ["d/new.txt", "d/sub/new.txt", "d/secret.txt"])
def test_issue43_write_never_creates_or_changes_a_file_outside(
    make_arbiter: ArbiterFactory, outside: Path, path: str
) -> None:
    arbiter = make_arbiter(*builtin_tools())
    written = list(_calls(arbiter, "choir.fs.write", {"path": path, "content": "pwned\n"}))
    assert len(written) == CALLS
    _outside_untouched(outside)
