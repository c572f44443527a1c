"""Workspace confinement (B12) and secrets (B13), end to end."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from stargraph.errors import ToolError, ToolNotAllowedError
from stargraph.llm import ChatMessage, ChatRequest, OpenAIChatModel
from stargraph.testing import Reply, ScriptedOpenAIServer
from stargraph.tools import (
    Arbiter,
    DirectoryArtifactStore,
    SqliteCommitLog,
    Tool,
    ToolCall,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    ToolResult,
    Workspace,
    builtin_tools,
    failure_of,
    tool,
)

ArbiterFactory = Callable[..., Arbiter]


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secret_dir = tmp_path / "outside"
    secret_dir.mkdir()
    (secret_dir / "passwd").write_text("root:x:0:0\n")
    return secret_dir


SYMLINK_OUT = "it resolves outside the workspace through a symlink"


@pytest.mark.parametrize(
    ("tool_name", "args", "reason"),
    [
        ("choir.fs.read", {"path": "../outside/passwd"}, "it contains '..'"),
        ("choir.fs.read", {"path": "a/../../outside/passwd"}, "it contains '..'"),
        ("choir.fs.read", {"path": "/etc/passwd"}, "it is absolute"),
        ("choir.fs.read", {"path": "link_file"}, SYMLINK_OUT),
        ("choir.fs.read", {"path": "link_dir/passwd"}, SYMLINK_OUT),
        ("choir.fs.write", {"path": "link_dir/new.txt", "content": "x"}, SYMLINK_OUT),
        ("choir.fs.write", {"path": "/tmp/evil.txt", "content": "x"}, "it is absolute"),
        ("choir.fs.search", {"pattern": "root", "path": "link_dir"}, SYMLINK_OUT),
        ("choir.fs.search", {"pattern": "root", "path": ".."}, "it contains '..'"),
    ],
)  # fmt: skip
def test_path_escapes_are_refused_with_a_typed_error(  # noqa: PLR0917 -- pytest fixtures
    make_arbiter: ArbiterFactory,
    workspace: Path,
    outside: Path,
    tool_name: str,
    args: dict[str, str],
    reason: str,
) -> None:
    (workspace / "link_file").symlink_to(outside / "passwd")
    (workspace / "link_dir").symlink_to(outside, target_is_directory=True)
    arbiter = make_arbiter(*builtin_tools())
    with pytest.raises(ToolNotAllowedError) as info:
        arbiter.dispatch(ToolCall(tool=tool_name, args=args))
    assert f"refused path={args['path']!r}: {reason};" in str(info.value)
    assert failure_of(info.value).code == "path_escape"
    assert sorted(p.name for p in outside.iterdir()) == ["passwd"]  # nothing written outside
    assert arbiter.commit_log.records()[-1].status == "denied"


def test_symlinks_inside_the_workspace_are_fine(
    make_arbiter: ArbiterFactory, workspace: Path
) -> None:
    (workspace / "real.txt").write_text("inside\n")
    (workspace / "alias.txt").symlink_to(workspace / "real.txt")
    arbiter = make_arbiter(*builtin_tools())
    assert arbiter.dispatch(ToolCall(tool="choir.fs.read", args={"path": "alias.txt"})).payload == (
        "inside\n"
    )


def test_search_does_not_follow_symlinks_out(
    make_arbiter: ArbiterFactory, workspace: Path, outside: Path
) -> None:
    (workspace / "notes.txt").write_text("root of the matter\n")
    (workspace / "sneaky").symlink_to(outside / "passwd")
    (workspace / "sneaky_dir").symlink_to(outside, target_is_directory=True)
    arbiter = make_arbiter(*builtin_tools())
    result = arbiter.dispatch(ToolCall(tool="choir.fs.search", args={"pattern": "root"}))
    assert result.payload == [{"path": "notes.txt", "line": 1, "text": "root of the matter"}]


def test_workspace_resolve_is_usable_directly(workspace: Path) -> None:
    ws = Workspace.at(workspace)
    assert ws.relative("./a//b/../c.txt".replace("/..", "")) == "a/b/c.txt"
    assert ws.relative(".") == "."
    with pytest.raises(ToolNotAllowedError, match="it contains a NUL byte"):
        ws.resolve("a\x00b", tool="t")


# --------------------------------------------------------------------------- secrets

SECRET = "sk-live-7f3a9c1e-SECRET-VALUE"
OTHER_SECRET = "hunter2-other-SECRET"


def _leaky_tools(received: list[str], tmp_path: Path) -> list[Tool]:
    @tool(id="demo.deploy@1.0.0", description="Deploy.", secret_resources=("api_key",))
    def deploy(ctx: ToolContext, target: str) -> ToolOutput:
        received.append(hashlib.sha256(ctx.secrets["api_key"].encode()).hexdigest())
        # A badly written tool echoes its secret everywhere; the arbiter must scrub it.
        key = ctx.secrets["api_key"]
        return ToolOutput(summary=f"deployed {target} with {key}", payload={"auth": key})

    @tool(id="demo.crash@1.0.0", description="Crash.", secret_resources=("api_key",))
    def crash(ctx: ToolContext) -> None:
        raise RuntimeError(f"bad credentials {ctx.secrets['api_key']}")

    @tool(id="demo.snoop@1.0.0", description="Snoop.")
    def snoop(ctx: ToolContext) -> list[str]:
        return sorted(ctx.secrets)  # declared nothing, so gets nothing

    return [deploy, crash, snoop]


def _external_leaky_tool(directory: Path) -> None:
    directory.mkdir()
    (directory / "leak.json").write_text(
        json.dumps(
            {
                "llm": {
                    "name": "ext.leak",
                    "description": "Leaks.",
                    "input_schema": {"type": "object", "properties": {}},
                },
                "runtime": {"version": "1.0.0", "secret_resources": ["api_key"]},
            }
        )
    )
    exe = directory / "leak"
    exe.write_text(
        f"#!{sys.executable}\nimport os, sys, json\n"
        "key = os.environ['STARGRAPH_SECRET_API_KEY']\n"
        "print(json.dumps({'summary': 'env had ' + key, 'payload': dict(os.environ)}))\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)


def test_a_secret_never_reaches_any_persisted_or_model_bound_byte(
    tmp_path: Path, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    received: list[str] = []
    _external_leaky_tool(tmp_path / "agent_tools")
    registry = ToolRegistry.build(
        builtins=[*_leaky_tools(received, tmp_path), *builtin_tools()],
        agent_dir=tmp_path / "agent_tools",
    )
    log = SqliteCommitLog(tmp_path / "state" / "stargraph.db")
    artifacts = DirectoryArtifactStore(tmp_path / "state" / "artifacts")
    results: list[ToolResult] = []
    script = [
        Reply.tool_calls(
            [
                ("call_1", "demo__deploy__v1_0_0", {"target": "prod"}),
                ("call_2", "demo__crash__v1_0_0", {}),
                ("call_3", "demo__snoop__v1_0_0", {}),
                ("call_4", "ext__leak__v1_0_0", {}),
            ]
        ),
        Reply.text("all done"),
    ]
    caplog.set_level(logging.DEBUG)
    with (
        ScriptedOpenAIServer(script) as server,
        OpenAIChatModel(
            "scripted-model", base_url=server.base_url, api_key="k", backoff=0
        ) as model,
        Arbiter(
            registry,
            workspace=workspace,
            commit_log=log,
            artifacts=artifacts,
            secrets={"api_key": SECRET, "other": OTHER_SECRET},
        ) as arbiter,
    ):
        messages = [ChatMessage.user("deploy it")]
        tools = tuple(registry.llm_tools())
        reply = model.complete(ChatRequest(messages=tuple(messages), tools=tools))
        messages.append(reply.message)
        for call in reply.message.tool_calls:
            try:
                result = arbiter.dispatch(ToolCall.from_openai(call, lane="core", node="act"))
            except ToolError as exc:
                result = ToolResult.from_error(exc, call_id=call.id)
                # What an engine would log: the whole traceback, causes included.
                logging.getLogger("engine").error("tool failed", exc_info=exc)
            results.append(result)
            content = result.to_tool_message("core")["content"]
            messages.append(ChatMessage.tool(call.id, content))
        final = model.complete(ChatRequest(messages=tuple(messages), tools=tools))
        assert final.message.content == "all done"
        requests = [json.dumps(r.body) for r in server.chat_requests]
    log.close()

    # The declaring tool really got the secret ...
    assert received == [hashlib.sha256(SECRET.encode()).hexdigest()]
    assert [r.status for r in results] == ["success", "error", "success", "success"]
    assert results[2].payload == []  # ... and an undeclaring tool got none.
    assert results[0].summary == "deployed prod with [redacted:api_key]"
    env = results[3].payload
    assert isinstance(env, dict)
    assert env["STARGRAPH_SECRET_API_KEY"] == "[redacted:api_key]"
    assert "STARGRAPH_SECRET_OTHER" not in env  # a secret it did not declare never reached it

    # ... but no byte that is persisted or sent to a model contains it.
    persisted = [p for p in (tmp_path / "state").rglob("*") if p.is_file()]
    assert any(p.name == "stargraph.db" for p in persisted)
    haystacks = {str(p): p.read_bytes() for p in persisted}
    haystacks["requests"] = "\n".join(requests).encode()
    haystacks["logs"] = caplog.text.encode()
    haystacks["results"] = "\n".join(r.model_dump_json() for r in results).encode()
    haystacks["llm_views"] = json.dumps(registry.llm_tools()).encode()
    for secret in (SECRET, OTHER_SECRET):
        for where, data in haystacks.items():
            assert secret.encode() not in data, f"secret leaked into {where}"
    assert b"[redacted:api_key]" in haystacks["requests"]  # the scrubbing was exercised
    assert "api_key" not in haystacks["llm_views"].decode()


def test_secrets_do_not_show_in_context_repr(workspace: Path) -> None:
    from stargraph.tools import Secrets

    secrets = Secrets({"api_key": SECRET})
    assert SECRET not in repr(secrets)
    ctx = ToolContext(
        tool="t.t@1.0.0",
        call_id=None,
        lane="core",
        node=None,
        workspace=Workspace.at(workspace),
        timeout_s=1,
        deadline=0,
        secrets=secrets,
    )
    assert SECRET not in repr(ctx)
    assert os.environ.get("STARGRAPH_SECRET_API_KEY") is None
