"""Starting ``stargraph serve`` for a test: in a thread of the test (uvicorn on a free
loopback port, the app from ``create_app``) or as the CLI in a process of its own (for the
tests that kill it). Every wait has a deadline, which only catches a hang."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

import httpx

from stargraph.serve import ServeSettings, create_app
from tests.uvicorn_thread import UvicornThread

DEADLINE_S: Final = 60.0
REPO: Final = Path(__file__).resolve().parents[2]


class InThread(UvicornThread):
    """``create_app(graphs, db)`` served by uvicorn in a thread; :meth:`close` stops it."""

    def __init__(self, graphs: list[Any], db: str | Path, **options: Any) -> None:
        settings = options.pop("settings", None) or ServeSettings()
        super().__init__(create_app(graphs, db, settings=settings, **options), lifespan="on")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class InProcess:
    """``stargraph serve ARGS`` in a process of its own, from the repository's folder."""

    def __init__(self, *args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        env = {**os.environ, **(env or {}), "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from stargraph.cli import main; main()",
                "serve",
                *args,
                "--port",
                str(self.port),
            ],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + DEADLINE_S
        while True:
            assert self.proc.poll() is None, self.output()
            assert time.monotonic() < deadline, "stargraph serve did not start"
            try:
                if httpx.get(f"{self.url}/ok", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.05)

    def output(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        assert self.proc.stdout is not None
        return self.proc.stdout.read().decode(errors="replace")

    def kill(self) -> None:
        """SIGKILL: no shutdown, no lease released."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(DEADLINE_S)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def sse(lines: Any) -> list[tuple[int, str, str]]:
    """``(id, event, data)`` of each event in the text lines of an SSE body."""
    out: list[tuple[int, str, str]] = []
    event = data = ""
    ident: int | None = None
    for line in lines:
        if line == "":
            if ident is not None:
                out.append((ident, event, data))
            event = data = ""
            ident = None
        elif line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
        elif line.startswith("id: "):
            ident = int(line[4:])
    return out
