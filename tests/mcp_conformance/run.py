"""Run the MCP conformance suite against stargraph: ``python -m tests.mcp_conformance.run``.

Two sides, each checked against ``baseline.yml`` (the scenarios stargraph does not pass,
with why): the suite fails on an unexpected failure and on a listed scenario that passes.

* **server**: ``stargraph mcp serve --http`` on a free port, serving the graphs of
  :mod:`tests.mcp_conformance.graphs`, and every server scenario against it;
* **client**: stargraph's MCP client (:mod:`tests.mcp_conformance.client`) under each client
  scenario, one at a time (run all at once, 26 Python processes time out on a small machine).

``--quick`` runs the client's core scenarios only (what the pytest test does); ``make
mcp-conformance`` runs everything, the OAuth scenarios included. The suite is installed by
``scripts/ensure_mcp_conformance.sh``.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DEST = ROOT / ".mcp-servers" / "conformance"
NODE = DEST / "node_modules" / "node" / "bin" / "node"
SUITE = DEST / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
BASELINE = HERE / "baseline.yml"
GRAPHS = ("simple_text", "error_handling", "with_progress", "elicitation")
CORE_CLIENT = ("initialize", "tools_call", "sse-retry", "elicitation-sep1034-client-defaults")
HANG_S = 300.0  # only catches a hang


def ensure() -> None:
    """Install the suite (idempotent); raise naming the script when that fails."""
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "ensure_mcp_conformance.sh")],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not NODE.exists() or not SUITE.exists():
        raise RuntimeError(
            f"scripts/ensure_mcp_conformance.sh failed (status {done.returncode}): "
            f"{done.stderr[-2000:]}"
        )


def _env() -> dict[str, str]:
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    return {**os.environ, "PYTHONPATH": path + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _suite(args: Sequence[str], out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(NODE), str(SUITE), *args, "--expected-failures", str(BASELINE), "-o", str(out)],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=out,
        timeout=HANG_S,
        check=False,
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stargraph() -> str:
    return str(Path(sys.executable).parent / "stargraph")


@contextmanager
def serving(tmp: Path) -> Iterator[str]:
    """``stargraph mcp serve --http`` with the conformance graphs: yields its URL."""
    with serving_graphs(tmp, [f"{HERE / 'graphs.py'}:{name}" for name in GRAPHS]) as url:
        yield url


@contextmanager
def serving_graphs(tmp: Path, graphs: Sequence[str]) -> Iterator[str]:
    """``stargraph mcp serve GRAPHS --http`` on a free port, in ``tmp`` with its database
    there: yields the server's URL once it accepts connections."""
    port = _free_port()
    where = ["--db", str(tmp / "runs.db"), "--http", f"127.0.0.1:{port}"]
    proc = subprocess.Popen(
        [_stargraph(), "mcp", "serve", *graphs, *where],
        env=_env(),
        cwd=tmp,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        # The server prints where it serves once it listens: it can be called at once.
        line = proc.stderr.readline()
        if "serving on" not in line:
            raise RuntimeError(f"stargraph mcp serve did not start: {line}{proc.stderr.read()}")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def server_side(tmp: Path) -> subprocess.CompletedProcess[str]:
    """Every server scenario against ``stargraph mcp serve --http``."""
    ensure()
    with serving(tmp) as url:
        return _suite(["server", "--url", url], tmp)


def client_scenarios() -> list[str]:
    """Every client scenario the suite lists."""
    ensure()
    listed = subprocess.run(
        [str(NODE), str(SUITE), "list"], capture_output=True, text=True, check=True
    ).stdout
    _, _, client = listed.partition("Client scenarios")
    return [line.split()[1] for line in client.splitlines() if line.strip().startswith("- ")]


def client_side(tmp: Path, scenario: str) -> subprocess.CompletedProcess[str]:
    """One client scenario against stargraph's MCP client."""
    ensure()
    command = f"{sys.executable} {HERE / 'client.py'}"
    return _suite(["client", "--command", command, "--scenario", scenario], tmp)


def main(argv: Sequence[str] | None = None) -> int:
    """Both sides; 1 if either leaves the baseline."""
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m tests.mcp_conformance.run")
    parser.add_argument("--quick", action="store_true", help="the client's core scenarios only")
    quick = parser.parse_args(argv).quick
    failed = []
    with tempfile.TemporaryDirectory(prefix="stargraph-conformance-") as tmp:
        done = server_side(Path(tmp))
        print(done.stdout[done.stdout.find("=== SUMMARY") :])
        if done.returncode != 0:
            failed.append("server")
        for scenario in CORE_CLIENT if quick else client_scenarios():
            done = client_side(Path(tmp), scenario)
            verdict = "as the baseline says" if done.returncode == 0 else "LEAVES THE BASELINE"
            print(f"client {scenario}: {verdict}")
            if done.returncode != 0:
                print(done.stdout[-3000:])
                failed.append(scenario)
    print("conformance: " + (f"failed {failed}" if failed else "as the baseline says"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
