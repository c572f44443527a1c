"""The built-in example tools: fs.read/write/search, exec, http.fetch (issue 6 item 7)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from stargraph.errors import ToolArgumentError, ToolNotAllowedError, ToolTimeoutError
from stargraph.tools import Arbiter, ToolCall, builtin_tools

ArbiterFactory = Callable[..., Arbiter]


@pytest.fixture
def arbiter(make_arbiter: ArbiterFactory) -> Arbiter:
    return make_arbiter(*builtin_tools())


def run(arbiter: Arbiter, name: str, **args: Any) -> Any:
    return arbiter.dispatch(ToolCall(tool=name, args=args))


def test_builtin_ids_follow_the_seed() -> None:
    specs = {t.spec.id: t.spec for t in builtin_tools()}
    assert sorted(specs) == [
        "choir.exec@1.0.0",
        "choir.fs.read@1.0.0",
        "choir.fs.search@1.0.0",
        "choir.fs.write@1.0.0",
        "choir.http.fetch@1.0.0",
    ]
    assert specs["choir.exec@1.0.0"].locks == ("workspace:X",)
    assert specs["choir.fs.read@1.0.0"].locks == ("file:{path}:S",)
    assert specs["choir.fs.write@1.0.0"].locks == ("file:{path}:X",)
    assert specs["choir.fs.write@1.0.0"].side_effect == "write"


def test_fs_write_then_read_with_head_and_tail(arbiter: Arbiter, workspace: Path) -> None:
    assert run(arbiter, "choir.fs.write", path="d/n.txt", content="1\n2\n3\n").summary == (
        "overwrite 6 bytes to d/n.txt"
    )
    run(arbiter, "choir.fs.write", path="d/n.txt", content="4\n", mode="append")
    assert (workspace / "d" / "n.txt").read_text() == "1\n2\n3\n4\n"
    assert run(arbiter, "choir.fs.read", path="d/n.txt").payload == "1\n2\n3\n4\n"
    assert run(arbiter, "choir.fs.read", path="d/n.txt", head=2).payload == "1\n2\n"
    tail = run(arbiter, "choir.fs.read", path="d/n.txt", tail=1)
    assert (tail.summary, tail.payload) == ("read 1 lines from d/n.txt", "4\n")
    with pytest.raises(
        ToolArgumentError,
        match="mode: Input should be 'overwrite', 'append', 'replace' or 'insert'",
    ):
        run(arbiter, "choir.fs.write", path="x", content="", mode="truncate")


def test_B19_fs_write_patches_by_lines_replace_a_range_insert_at_a_line_append(
    arbiter: Arbiter, workspace: Path
) -> None:
    (workspace / "p.txt").write_bytes(b"one\ntwo\r\nthree\nfour")
    replaced = run(
        arbiter, "choir.fs.write", path="p.txt", content="TWO\nTHREE", mode="replace",
        start_line=2, end_line=3,
    )  # fmt: skip
    assert replaced.summary == "replace lines 2-3 of p.txt with 2 lines"
    assert (workspace / "p.txt").read_bytes() == b"one\nTWO\nTHREE\nfour"
    run(arbiter, "choir.fs.write", path="p.txt", content="zero\n", mode="insert", start_line=1)
    inserted = run(
        arbiter, "choir.fs.write", path="p.txt", content="five", mode="insert", start_line=6
    )
    assert inserted.summary == "insert 1 lines at line 6 of p.txt"
    assert (workspace / "p.txt").read_bytes() == b"zero\none\nTWO\nTHREE\nfour\nfive\n"
    run(arbiter, "choir.fs.write", path="p.txt", content="", mode="replace", start_line=2,
        end_line=4)  # fmt: skip
    run(arbiter, "choir.fs.write", path="p.txt", content="six\n", mode="append")
    assert run(arbiter, "choir.fs.read", path="p.txt").payload == "zero\nfour\nfive\nsix\n"
    records = arbiter.commit_log.records()
    assert [r.status for r in records] == ["success"] * 6


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"mode": "replace", "end_line": 1}, "mode 'replace' needs start_line"),
        ({"mode": "replace", "start_line": 1}, "mode 'replace' needs end_line"),
        ({"mode": "replace", "start_line": 2, "end_line": 1}, "start_line <= end_line <= 2"),
        ({"mode": "replace", "start_line": 1, "end_line": 3}, "got start_line=1, end_line=3"),
        ({"mode": "insert", "start_line": 4}, "insert start_line=4 must be at most 3"),
        ({"mode": "insert", "start_line": 1, "end_line": 1}, "'insert' takes no end_line"),
        ({"mode": "overwrite", "start_line": 1}, "takes no start_line or end_line"),
        ({"mode": "append", "end_line": 1}, "takes no start_line or end_line"),
    ],
)
def test_B19_a_bad_line_patch_is_a_typed_error_and_leaves_the_file_as_it_was(
    arbiter: Arbiter, workspace: Path, args: dict[str, Any], message: str
) -> None:
    (workspace / "q.txt").write_text("a\nb\n")
    with pytest.raises(ToolArgumentError, match=message):
        run(arbiter, "choir.fs.write", path="q.txt", content="x", **args)
    assert (workspace / "q.txt").read_text() == "a\nb\n"


def test_B19_a_line_patch_stays_inside_the_workspace(arbiter: Arbiter, workspace: Path) -> None:
    outside = workspace.parent / f"{workspace.name}-outside.txt"
    outside.write_text("keep\n")
    (workspace / "link.txt").symlink_to(outside)
    with pytest.raises(ToolNotAllowedError):
        run(arbiter, "choir.fs.write", path="link.txt", content="x", mode="insert", start_line=1)
    with pytest.raises(ToolNotAllowedError):
        run(arbiter, "choir.fs.write", path=f"../{outside.name}", content="x", mode="replace",
            start_line=1, end_line=1)  # fmt: skip
    assert outside.read_text() == "keep\n"


def test_fs_search_finds_lines(arbiter: Arbiter, workspace: Path) -> None:
    (workspace / "src").mkdir()
    (workspace / "src" / "a.py").write_text("import os\nTODO: fix\n")
    (workspace / "b.txt").write_text("nothing\nTODO later\n")
    (workspace / "bin.dat").write_bytes(b"\xff\xfeTODO")
    result = run(arbiter, "choir.fs.search", pattern=r"^TODO")
    assert result.payload == [
        {"path": "b.txt", "line": 2, "text": "TODO later"},
        {"path": "src/a.py", "line": 2, "text": "TODO: fix"},
    ]
    limited = run(arbiter, "choir.fs.search", pattern="TODO", max_results=1)
    assert limited.summary == "1+ matches (truncated)"
    with pytest.raises(ToolArgumentError, match="pattern is not a valid regex"):
        run(arbiter, "choir.fs.search", pattern="(")


def test_exec_runs_in_the_workspace_with_a_minimal_environment(
    arbiter: Arbiter, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "must-not-leak")
    result = run(arbiter, "choir.exec", command="pwd; echo oops >&2; env; exit 4")
    assert result.summary == "exit code 4"
    assert result.payload["stdout"].splitlines()[0] == str(workspace.resolve())
    assert "must-not-leak" not in result.payload["stdout"]
    assert result.payload["stderr"] == "oops\n"


def test_exec_timeout_kills_the_command(make_arbiter: ArbiterFactory) -> None:
    from stargraph.tools import PythonTool, ToolSpec

    exec_tool = next(t for t in builtin_tools() if t.spec.id == "choir.exec@1.0.0")
    assert isinstance(exec_tool, PythonTool)
    fast = PythonTool(
        ToolSpec(**{**exec_tool.spec.model_dump(), "timeout_s": 0.3}),
        exec_tool.arguments,
        exec_tool._fn,
        ctx_param="ctx",
    )
    arbiter = make_arbiter(fast)
    started = time.monotonic()
    with pytest.raises(ToolTimeoutError, match=r"ran longer than 0\.3s"):
        run(arbiter, "choir.exec", command="sleep 20")
    assert time.monotonic() - started < 3


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        return

    def _reply(self, body: bytes) -> None:
        status = 200 if self.path == "/ok" else 404
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(body)

    def do_GET(self) -> None:
        self._reply(b"hello from loopback" if self.path == "/ok" else b"missing")

    def do_HEAD(self) -> None:
        self._reply(b"hello from loopback")


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def test_http_fetch_against_a_loopback_server(arbiter: Arbiter, server: str) -> None:
    ok = run(arbiter, "choir.http.fetch", url=f"{server}/ok")
    assert ok.payload == {
        "status": 200,
        "content_type": "text/plain",
        "body": "hello from loopback",
    }
    assert ok.summary == f"HTTP 200 from {server}/ok (19 bytes)"
    missing = run(arbiter, "choir.http.fetch", url=f"{server}/nope")
    assert missing.payload["status"] == 404
    assert missing.payload["body"] == "missing"
    head = run(arbiter, "choir.http.fetch", url=f"{server}/ok", method="HEAD")
    assert head.payload["body"] == ""
    truncated = run(arbiter, "choir.http.fetch", url=f"{server}/ok", max_bytes=5)
    assert truncated.payload["body"] == "hello"


def test_http_fetch_refuses_other_schemes(arbiter: Arbiter) -> None:
    with pytest.raises(ToolArgumentError, match="url must start with http:// or https://"):
        run(arbiter, "choir.http.fetch", url="file:///etc/passwd")


def test_every_free_string_a_model_writes_is_bounded_in_the_schema_it_is_offered() -> None:
    # A grammar-constrained server (llama.cpp) bounds an argument only by its schema: an
    # unbounded string lets a runaway model fill its whole context inside one tool call.
    unbounded = []
    for built in builtin_tools():
        properties = built.spec.llm_view()["function"]["parameters"]["properties"]
        for name, schema in properties.items():
            free = schema.get("type") == "string" and "enum" not in schema
            # A file's content is as long as the file: it is the one string left unbounded.
            if free and name != "content" and "maxLength" not in schema:
                unbounded.append(f"{built.spec.id}:{name}")
    assert unbounded == []


def test_a_path_longer_than_its_bound_is_a_typed_error_naming_the_argument(
    arbiter: Arbiter,
) -> None:
    with pytest.raises(ToolArgumentError, match="path: String should have at most 1024"):
        run(arbiter, "choir.fs.read", path="a" * 1025)
    with pytest.raises(ToolArgumentError, match="url: String should have at most 2048"):
        run(arbiter, "choir.http.fetch", url="http://x/" + "a" * 2048)
