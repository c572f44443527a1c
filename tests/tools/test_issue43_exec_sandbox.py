"""``choir.exec`` runs in a bubblewrap sandbox: it cannot see the agent's processes (nor the
API keys in their ``/proc`` entries), write outside the workspace, read ``/etc/shadow`` even
as root, or reach the network unless built to; where no sandbox can be made it refuses.

The agent is a child process started with a secret in its environment, as a real agent holds
its API key: ``/proc/<pid>/environ`` shows the environment a process started with, so only a
process started with the secret exposes it there.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stargraph.errors import ToolError
from stargraph.tools import Arbiter, ToolCall, builtin_tools, failure_of

ArbiterFactory = Callable[..., Arbiter]
SECRET = "sk-agent-9d2f41-SECRET"

_AGENT = textwrap.dedent(
    """
    import json, os, sys
    from stargraph.tools import Arbiter, ToolCall, ToolRegistry, builtin_tools
    workspace, commands = sys.argv[1], json.loads(sys.argv[2])
    results = []
    with Arbiter(ToolRegistry.build(builtins=builtin_tools()), workspace=workspace) as arbiter:
        for command in commands:
            call = ToolCall(tool="choir.exec", args={"command": command})
            results.append(arbiter.dispatch(call).payload)
    print(json.dumps({"pid": os.getpid(), "results": results}))
    """
)


def _agent(workspace: Path, *commands: str) -> tuple[int, list[dict[str, Any]]]:
    """Run ``commands`` through ``choir.exec`` in an agent process holding ``SECRET``."""
    env = {**os.environ, "OPENAI_API_KEY": SECRET, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", _AGENT, str(workspace), json.dumps(commands)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    report = json.loads(done.stdout)
    return report["pid"], report["results"]


def _exec(arbiter: Arbiter, command: str) -> dict[str, Any]:
    payload = arbiter.dispatch(ToolCall(tool="choir.exec", args={"command": command})).payload
    assert isinstance(payload, dict)
    return payload


def test_issue43_exec_cannot_read_the_agents_environment(workspace: Path) -> None:
    _, results = _agent(
        workspace,
        "cat /proc/$PPID/environ",
        "cat /proc/*/environ | rev",  # literal redaction alone would miss this one
        "grep -rl sk-agent /proc/*/environ",
    )
    for result in results:
        assert SECRET not in result["stdout"] + result["stderr"]
        assert SECRET[::-1] not in result["stdout"] + result["stderr"]
        assert result["sandbox"] == "bwrap"


def test_issue43_exec_sees_no_agent_process(workspace: Path) -> None:
    agent_pid, [listing, cmdlines] = _agent(
        workspace, "ls /proc", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"
    )
    pids = {name for name in listing["stdout"].split() if name.isdigit()}
    assert pids  # the sandbox has a /proc of its own, with its own processes in it
    assert str(agent_pid) not in pids
    assert "ToolRegistry.build" not in cmdlines["stdout"]  # the agent's own command line


def test_issue43_exec_cannot_write_outside_the_workspace(
    make_arbiter: ArbiterFactory, workspace: Path, tmp_path: Path
) -> None:
    arbiter = make_arbiter(*builtin_tools())
    before = sorted(p.name for p in tmp_path.iterdir())
    # Unique names outside, removed again should a broken sandbox let them through.
    stray = [
        Path(f"/usr/pwned-{os.getpid()}-{tmp_path.name}"),
        tmp_path.with_name("x" + tmp_path.name),
    ]
    command = (
        "touch ../outside; echo x > ../outside2; touch $HOME/in-home; "
        f"touch {tmp_path}/absolute; touch {stray[0]}; touch {stray[1]}; touch inside.txt"
    )
    try:
        _exec(arbiter, command)
        assert sorted(p.name for p in tmp_path.iterdir()) == before
        assert [path for path in stray if path.exists()] == []
        assert (workspace / "inside.txt").exists()  # the workspace is writable
    finally:
        for path in stray:
            path.unlink(missing_ok=True)


def test_issue43_exec_cannot_read_etc_shadow(make_arbiter: ArbiterFactory) -> None:
    """CI runs as root, who may read /etc/shadow outside the sandbox."""
    arbiter = make_arbiter(*builtin_tools())
    result = _exec(arbiter, "cat /etc/shadow /etc/gshadow")
    assert result["stdout"] == ""
    assert result["exit_code"] != 0
    # Programs still start: the libraries and the bits of /etc they need are there.
    ok = _exec(arbiter, "id -un; ls /etc")
    assert ok["exit_code"] == 0
    assert "shadow" not in ok["stdout"].split()


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP server on the host's loopback that answers each connection with b"hello"."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"hello\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    server.close()
    thread.join(timeout=10)


def test_issue43_exec_has_no_network_unless_built_with_it(
    make_arbiter: ArbiterFactory, listener: int
) -> None:
    command = f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{listener}; cat <&3'"
    offline = make_arbiter(*builtin_tools())
    result = _exec(offline, command)
    assert "hello" not in result["stdout"]
    assert result["exit_code"] != 0
    online = make_arbiter(*builtin_tools(exec_network=True))
    result = _exec(online, command)
    assert result["stdout"] == "hello\n"
    specs = {t.spec.name: t.spec for t in builtin_tools(exec_network=True)}
    assert specs["choir.exec"].network


def test_issue43_exec_refuses_to_run_without_bubblewrap(
    make_arbiter: ArbiterFactory,
    workspace: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    arbiter = make_arbiter(*builtin_tools())
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(ToolError, match=r"bubblewrap .*not installed.*apt-get install bubblewrap"):
        arbiter.dispatch(ToolCall(tool="choir.exec", args={"command": "touch ran"}))
    assert not (workspace / "ran").exists()
    # A bwrap the kernel refuses namespaces to is no sandbox either.
    broken = tmp_path / "broken-bin"
    broken.mkdir()
    (broken / "bwrap").write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
    )
    (broken / "bwrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{broken}:/usr/bin:/bin")
    with pytest.raises(ToolError, match="cannot make a sandbox here: bwrap: No perm") as info:
        arbiter.dispatch(ToolCall(tool="choir.exec", args={"command": "touch ran"}))
    assert failure_of(info.value).details == {"sandbox": "unavailable"}
    assert not (workspace / "ran").exists()


def test_issue43_exec_runs_unsandboxed_only_when_asked_and_says_so(
    make_arbiter: ArbiterFactory, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    arbiter = make_arbiter(*builtin_tools(exec_unsandboxed=True))
    result = arbiter.dispatch(ToolCall(tool="choir.exec", args={"command": "touch ran"}))
    assert result.summary == "exit code 0 (unsandboxed)"
    assert isinstance(result.payload, dict)
    assert result.payload["sandbox"] == "none"
    assert (workspace / "ran").exists()
    assert "without a sandbox" in caplog.text
    default, unsandboxed = (
        {t.spec.name: t.spec for t in tools}["choir.exec"]
        for tools in (builtin_tools(), builtin_tools(exec_unsandboxed=True))
    )
    assert default.spec_hash != unsandboxed.spec_hash  # the registry digest tells them apart
    assert "WITHOUT a sandbox" in unsandboxed.description
