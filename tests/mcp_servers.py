"""The third-party MCP servers the tests drive, as scripts/ensure_mcp_servers.sh installs them.

``ensure()`` runs that script (a no-op once its stamp is there), so a test run straight from
pytest provisions them too; a server that is still missing fails the test, never skips it.
``everything_http()`` starts server-everything in its streamable HTTP mode on a free port.
"""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEST = ROOT / ".mcp-servers"
BIN = DEST / "node" / "node_modules" / ".bin"
EVERYTHING = BIN / "mcp-server-everything"
FILESYSTEM = BIN / "mcp-server-filesystem"
TIME = DEST / "time" / "bin" / "mcp-server-time"


@functools.cache
def ensure() -> None:
    """Install the servers (idempotent); raise naming the script when that fails."""
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "ensure_mcp_servers.sh")],
        capture_output=True,
        text=True,
        check=False,
    )
    missing = [str(p) for p in (EVERYTHING, FILESYSTEM, TIME) if not p.exists()]
    if done.returncode != 0 or missing:
        raise RuntimeError(
            f"scripts/ensure_mcp_servers.sh failed (status {done.returncode}, missing "
            f"{missing}): {done.stderr[-2000:]}"
        )


def everything() -> list[str]:
    """server-everything over stdio."""
    ensure()
    return [str(EVERYTHING)]


def filesystem(root: Path) -> list[str]:
    """server-filesystem allowed to touch ``root`` only."""
    ensure()
    return [str(FILESYSTEM), str(root)]


def time_server() -> list[str]:
    """mcp-server-time, answering in UTC."""
    ensure()
    return [str(TIME), "--local-timezone", "UTC"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def everything_http(deadline_s: float = 60.0) -> Iterator[str]:
    """server-everything's streamable HTTP mode on a free port: yields its ``/mcp`` URL."""
    ensure()
    port = _free_port()
    env = {**os.environ, "PORT": str(port)}
    proc = subprocess.Popen(
        [str(EVERYTHING), "streamableHttp"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        end = time.monotonic() + deadline_s  # only catches a hang
        seen: list[str] = []
        for line in proc.stderr:
            seen.append(line)
            if "listening on port" in line:
                break
            if time.monotonic() > end:
                break
        else:
            raise RuntimeError(f"server-everything (HTTP) exited: {''.join(seen)[-2000:]}")
        if not any("listening on port" in line for line in seen):
            raise RuntimeError(f"server-everything (HTTP) did not listen: {''.join(seen)}")
        # Drained from here on, so a chatty server never blocks on a full pipe.
        drain = threading.Thread(target=proc.stderr.read, daemon=True)
        drain.start()
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


def python() -> str:
    """This interpreter, for the SDK-made servers of the tests."""
    return sys.executable
