"""A real OpenAI-compatible model server for the tests: llama-cpp-python serving SmolLM2-135M.

``scripts/ensure_llama_server.sh`` builds it into ``.venv-llama`` (``make test`` calls it; so
does :func:`ensure` when the suite runs without make). :func:`start` launches one server on a
free loopback port and waits until it answers, with a deadline; :meth:`LlamaServer.stop` ends
it by its pid. A server that cannot be built or started fails the tests with its log; nothing
is ever skipped.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Final

import pytest

ROOT: Final = Path(__file__).resolve().parents[2]
VENV: Final = Path(os.environ.get("STARGRAPH_LLAMA_VENV") or ROOT / ".venv-llama")
MODEL_FILE: Final = VENV / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
ALIAS: Final = "smollm2-135m"
"""The model name the server answers to."""
API_KEY: Final = "sk-real-model-tests"
"""The key the session's server asks for."""
ENSURE_SCRIPT: Final = ROOT / "scripts" / "ensure_llama_server.sh"
# The model loads in about 2 s; the deadline only bounds a server that never comes up.
READY_DEADLINE_S: Final = 120.0
BUILD_DEADLINE_S: Final = 40 * 60.0


@dataclass
class LlamaServer:
    """One running server process."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    api_key: str | None
    _log: IO[bytes] = field(repr=False)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self.process.pid

    def log_tail(self, lines: int = 40) -> str:
        """The end of the server's output, for failure messages."""
        self._log.flush()
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the server (by pid) and wait until it has exited; idempotent."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
        self._log.close()

    @property
    def running(self) -> bool:
        """Whether the process is still alive."""
        return self.process.poll() is None


def ensure() -> None:
    """Build the server and fetch the model if needed, once per session.

    The script checks what is there within a second; while a build it started in the
    background (``make test``) is still running, it waits for that build under its lock.
    """
    if _ENSURED:
        return
    result = subprocess.run(
        ["bash", str(ENSURE_SCRIPT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=BUILD_DEADLINE_S,
        check=False,
    )
    if result.returncode != 0:
        log = ROOT / ".venv-llama.log"
        background = log.read_text(errors="replace")[-3000:] if log.is_file() else ""
        pytest.fail(
            f"the llama.cpp test server could not be provisioned by {ENSURE_SCRIPT.name} "
            f"(exit {result.returncode}); run `bash scripts/ensure_llama_server.sh` to see why:"
            f"\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            + (f"\nthe background build's log ({log}):\n{background}" if background else ""),
            pytrace=False,
        )
    _ENSURED.append(True)


_ENSURED: list[bool] = []
"""Set once :func:`ensure` has succeeded in this process."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start(log_dir: Path, *, api_key: str | None = None, attempts: int = 3) -> LlamaServer:
    """Start a server on a free 127.0.0.1 port; return once it answers ``GET /v1/models``.

    The port is picked by binding port 0 and letting it go, so another process can take it
    first; a server that exits before it is ready is started again on a new port.
    """
    ensure()
    failures: list[str] = []
    for attempt in range(attempts):
        port = _free_port()
        log_path = log_dir / f"llama-server-{port}.log"
        log = log_path.open("wb")
        command = [
            str(VENV / "bin" / "python"),
            "-m",
            "llama_cpp.server",
            "--model",
            str(MODEL_FILE),
            "--model_alias",
            ALIAS,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--chat_format",
            "chatml-function-calling",
            # The model's whole trained context: an agent's eight bounded steps (256
            # tokens each, plus tool results and the tool prompt) once outgrew 4096.
            "--n_ctx",
            "8192",
            "--n_threads",
            "2",
            "--seed",
            "0",
        ]
        if api_key is not None:
            command += ["--api_key", api_key]
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        server = LlamaServer(process, port, log_path, api_key, log)
        if _wait_ready(server):
            return server
        server.stop()
        failures.append(f"attempt {attempt + 1} (port {port}):\n{server.log_tail()}")
    pytest.fail(
        "the llama.cpp test server did not start; its output:\n" + "\n\n".join(failures),
        pytrace=False,
    )


def _wait_ready(server: LlamaServer) -> bool:
    """Poll ``GET /v1/models`` until it answers, the process exits, or the deadline passes."""
    deadline = time.monotonic() + READY_DEADLINE_S
    request = urllib.request.Request(server.base_url + "/models")
    if server.api_key is not None:
        request.add_header("Authorization", f"Bearer {server.api_key}")
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                payload = json.loads(response.read())
                return any(m.get("id") == ALIAS for m in payload.get("data", ()))
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        # Between polls: wait for the process to exit (a failed start), at most 0.1 s.
        try:
            server.process.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            continue
        return False
    return False
