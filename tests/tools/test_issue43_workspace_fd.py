"""Workspace tools open files by descriptor, so a directory swapped for a symlink between the
check and the use cannot make them read or write outside the workspace.

A second process swaps ``ws/d`` between a real directory and a symlink to a directory outside
as fast as it can while the tools run through the arbiter. The escape assertions can only fail
if a tool escaped; the old check-then-open-by-path code escaped a few times in every thousand
calls, so a run of a few thousand calls catches it reliably.

A call succeeds only when it happens to find ``ws/d`` a real directory, and how often that is
depends on how the scheduler interleaves the two processes: on a loaded machine a fixed number
of calls may see it seldom or never. So the calls go on, past the first few thousand, until
enough of them have succeeded (the race was run with calls that passed the check, so the
escape assertions were not vacuous); the cap on the number of calls only catches a tool that
never succeeds at all.
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
# Successful calls each race must contain, and the cap that only catches a hang: calls succeed
# about one time in twenty under heavy load (one in five on an idle machine).
LANDED = 20
CAP = 20 * CALLS
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


def _race(
    arbiter: Arbiter, tool: str, args: dict[str, Any], landed: Callable[[Any], bool]
) -> list[Any]:
    """The payloads of the calls that succeeded while the swapper ran: at least ``CALLS``
    calls are made, and more until ``LANDED`` of those payloads satisfy ``landed``."""
    payloads: list[Any] = []
    calls = hits = 0
    while calls < CALLS or hits < LANDED:
        assert calls < CAP, (
            f"{tool}: only {hits} of {CAP} calls under the swapper succeeded; the tool "
            "refuses or fails even when it finds the real directory"
        )
        calls += 1
        try:
            payload = arbiter.dispatch(ToolCall(tool=tool, args=args)).payload
        except ToolError:  # refused (a symlink seen) or missing (the swap's gap): no escape
            continue
        hits += landed(payload)
        payloads.append(payload)
    return payloads


@pytest.mark.usefixtures("swapping")
def test_issue43_read_never_reads_through_a_swapped_symlink(
    make_arbiter: ArbiterFactory, outside: Path
) -> None:
    arbiter = make_arbiter(*builtin_tools())
    args = {"path": "d/secret.txt"}
    payloads = _race(arbiter, "choir.fs.read", args, lambda p: p == "inside\n")
    assert OUTSIDE_TEXT not in payloads
    assert set(payloads) == {"inside\n"}
    _outside_untouched(outside)


@pytest.mark.usefixtures("swapping")
@pytest.mark.parametrize("path", ["d/new.txt", "d/sub/new.txt", "d/secret.txt"])
def test_issue43_write_never_creates_or_changes_a_file_outside(
    make_arbiter: ArbiterFactory, outside: Path, path: str
) -> None:
    arbiter = make_arbiter(*builtin_tools())
    args = {"path": path, "content": "pwned\n"}
    _race(arbiter, "choir.fs.write", args, lambda _: True)
    _outside_untouched(outside)
