"""Row B18: the seed's 14 built-in tools ship as example plugins with local fakes, and B8's
"execute (local or delegated)" step has a real host-delegated path.

Every test drives the real engine path: plugins registered through the pluggy hooks, a
``Registry``-built ``Arbiter`` (validate, allowlist, paths, policies, locks, execute or
delegate, commit, release), the services on 127.0.0.1 over their real protocols (HTTP JSON
for Brave and Notion, SMTP, IMAP), and one ReAct run against the scripted OpenAI server.
"""

from __future__ import annotations

import json
import threading
import time
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from stargraph.errors import (
    LockTimeoutError,
    ToolArgumentError,
    ToolError,
    ToolNotAllowedError,
    ToolSpecError,
    ToolTimeoutError,
)
from stargraph.llm import OpenAIChatModel
from stargraph.plugin import Registry, get_plugin_manager
from stargraph.skills.react import react_graph
from stargraph.testing import RecordedRequest, Reply, ScriptedOpenAIServer
from stargraph.tools import (
    Arbiter,
    HostHandlers,
    HostRequest,
    HostTool,
    ToolCall,
    ToolContext,
    ToolRegistry,
    ToolResult,
    failure_of,
    host_tool,
    load_manifest,
    tool,
)
from stargraph.tools.builtins import (
    BUILTIN_TOOLS,
    DEMO_NOTION,
    BrowseArgs,
    LocalServices,
    MemoryStore,
    web_browse,
)
from tests.support import data

NOTION_DB = next(iter(DEMO_NOTION))

# The seed's table: (tool, locks, host-executed, side effect).
SEED_TABLE = {
    "choir.exec": (("workspace:X",), False, "write"),
    "choir.fs.read": (("file:{path}:S",), False, "read"),
    "choir.fs.write": (("file:{path}:X",), False, "write"),
    "choir.fs.search": (("file:{path}:S",), False, "read"),
    "choir.tts.speak": (("choirtmp:X",), False, "write"),
    "choir.web.search": ((), False, "read"),
    "choir.web.browse": (("browser_tab:{tab}:X",), True, "external"),
    "choir.notion.query": ((), False, "read"),
    "choir.email.send": ((), False, "external"),
    "choir.email.receive": ((), False, "external"),
    "choir.email.check": ((), False, "read"),
    "choir.memory.query": (("memory:S",), True, "read"),
    "choir.memory.upsert": (("memory:X",), True, "write"),
    "choir.memory.compact": (("memory:X",), False, "write"),
}
RUNTIME_KEYS = {"locks", "executor", "side_effect", "timeout_s", "secret_resources", "exec_path"}


@pytest.fixture
def services() -> Iterator[LocalServices]:
    with LocalServices() as running:
        yield running


@pytest.fixture
def registry(services: LocalServices) -> Registry:
    return Registry.build(get_plugin_manager(plugins=services.plugins, entry_points=False))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def arbiter(registry: Registry, services: LocalServices, workspace: Path) -> Iterator[Arbiter]:
    with registry.arbiter(workspace, host=services.host, secrets=dict(services.secrets)) as arb:
        yield arb


def run(arbiter: Arbiter, tool_name: str, **args: Any) -> ToolResult:
    return arbiter.dispatch(ToolCall(tool=tool_name, args=args, call_id=f"c-{tool_name}"))


def statuses(arbiter: Arbiter) -> list[tuple[str, str, str]]:
    return [(r.kind, r.tool.partition("@")[0], r.status) for r in arbiter.commit_log.records()]


# --------------------------------------------------------------------------- the fourteen


def test_B18_the_fourteen_builtins_register_through_the_plugin_hooks(
    registry: Registry,
) -> None:
    names = {name.partition("@")[0]: name for name in registry.tools}
    assert set(BUILTIN_TOOLS) <= set(names)
    assert len(BUILTIN_TOOLS) == 14
    for name in BUILTIN_TOOLS:
        spec = registry.tools[names[name]].spec
        locks, hosted, effect = SEED_TABLE[name]
        assert (spec.locks, spec.executor == "host", spec.side_effect) == (locks, hosted, effect)
        # Both views: the LLM view carries no runtime key, whatever the tool.
        view = spec.llm_view()["function"]
        assert set(view) == {"name", "description", "parameters"}
        assert not RUNTIME_KEYS & set(json.dumps(view["parameters"]).split('"'))
        assert view["description"]
    # exec and fs.* come from stargraph's own plugin, the ten others from example plugins:
    # the same hook, a different provider.
    providers = {name: registry.provider("tool", names[name]) for name in BUILTIN_TOOLS}
    assert {providers[n] for n in BUILTIN_TOOLS[:4]} == {"stargraph"}
    assert "stargraph" not in {providers[n] for n in BUILTIN_TOOLS[4:]}
    # Secrets are declared by the tools that need them, and only by them.
    secrets = {n: registry.tools[names[n]].spec.secret_resources for n in BUILTIN_TOOLS}
    assert {n: s for n, s in secrets.items() if s} == {
        "choir.web.search": ("brave_api_key",),
        "choir.notion.query": ("notion_token",),
        "choir.email.send": ("email_password",),
        "choir.email.receive": ("email_password",),
        "choir.email.check": ("email_password",),
    }


def test_B18_every_builtin_runs_through_one_arbiter_and_is_committed(
    arbiter: Arbiter, services: LocalServices, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("the login page is done\n", encoding="utf-8")
    run(arbiter, "choir.fs.write", path="out/plan.txt", content="ship it")
    assert data(run(arbiter, "choir.fs.read", path="notes.txt")) == "the login page is done\n"
    assert data(run(arbiter, "choir.fs.search", pattern="login")) == [
        {"path": "notes.txt", "line": 1, "text": "the login page is done"}
    ]
    assert data(run(arbiter, "choir.exec", command="cat out/plan.txt"))["stdout"] == "ship it"

    spoken = data(run(arbiter, "choir.tts.speak", text="hello"))
    assert spoken["path"].startswith(".choirtmp/send/")

    found = data(run(arbiter, "choir.web.search", q="capital of France", count=2))
    assert found["results"][0]["url"] == services.site.url_of("/paris")
    page = data(run(arbiter, "choir.web.browse", url=found["results"][0]["url"]))
    assert page["title"] == "Paris"
    assert "Paris is the capital of France." in page["text"]
    assert "changed by script" not in page["text"]  # scripts are not page text
    assert page["links"] == [services.site.url_of("/lyon")]

    tasks = data(run(arbiter, "choir.notion.query", database_id=NOTION_DB, contains="login"))
    assert [row["properties"]["Name"] for row in tasks["results"]] == [
        "Ship the login page",
        "Plan the login audit",
    ]

    sent = run(arbiter, "choir.email.send", to=[services.address], subject="hi", body="hello")
    assert data(sent)["delivered"] == [services.address]
    check = data(run(arbiter, "choir.email.check"))
    assert (check["messages"], check["unseen"]) == (1, 1)
    assert check["new"] == [{"id": 1, "from": services.address, "subject": "hi"}]
    inbox = data(run(arbiter, "choir.email.receive"))["messages"]
    assert [(m["subject"], m["body"]) for m in inbox] == [("hi", "hello\n")]
    assert data(run(arbiter, "choir.email.check"))["unseen"] == 0

    stored = data(run(arbiter, "choir.memory.upsert", text="Ada prefers Python."))
    assert stored["status"] == "created"
    recalled = data(run(arbiter, "choir.memory.query", mode="semantic", query="Ada prefers"))
    assert recalled[0]["text"] == "Ada prefers Python."
    compacted = data(run(arbiter, "choir.memory.compact", scope="knowledge", keep=0))
    assert compacted["folded"] == 1

    # One commit record per call, plus an audit record for each external side effect.
    assert statuses(arbiter) == [
        ("call", "choir.fs.write", "success"),
        ("call", "choir.fs.read", "success"),
        ("call", "choir.fs.search", "success"),
        ("call", "choir.exec", "success"),
        ("call", "choir.tts.speak", "success"),
        ("call", "choir.web.search", "success"),
        ("call", "choir.web.browse", "success"),
        ("audit", "choir.web.browse", "success"),
        ("call", "choir.notion.query", "success"),
        ("call", "choir.email.send", "success"),
        ("audit", "choir.email.send", "success"),
        ("call", "choir.email.check", "success"),
        ("call", "choir.email.receive", "success"),
        ("audit", "choir.email.receive", "success"),
        ("call", "choir.email.check", "success"),
        ("call", "choir.memory.upsert", "success"),
        ("call", "choir.memory.query", "success"),
        ("call", "choir.memory.compact", "success"),
    ]
    assert arbiter.commit_log.verify_chain() is None
    # The credentials went to the services, in their headers, and nowhere else.
    assert services.brave is not None
    assert services.brave.requests[0].headers["x-subscription-token"] == "brave-local-key"
    assert services.notion.requests[0].headers["authorization"].endswith("notion_token")
    for result in arbiter.commit_log.records():
        ref = result.artifact_ref
        if ref is not None:
            text = arbiter.artifacts.get(ref).decode()
            assert not any(secret in text for secret in services.secrets.values())


def test_B18_web_search_and_browse_in_a_react_run(
    arbiter: Arbiter, services: LocalServices
) -> None:
    """A ReAct run against the scripted server: search, open the first hit, answer from it."""
    # The model is offered each tool under its short name, and reads each result as the
    # tool's payload.
    search, browse = "search", "browse"

    def script(request: RecordedRequest) -> Reply:
        tools = [m for m in request.messages if m["role"] == "tool"]
        offered = {t["function"]["name"] for t in (request.body or {}).get("tools", [])}
        assert offered == {search, browse}
        if not tools:
            return Reply.tool_calls([(search, {"q": "capital of Japan", "count": 1})])
        last = json.loads(tools[-1]["content"])
        if len(tools) == 1:
            url = last["results"][0]["url"]
            return Reply.tool_calls([(browse, {"url": url, "tab": "research"})])
        return Reply.text(last["text"].splitlines()[-1])

    with (
        ScriptedOpenAIServer(script) as server,
        OpenAIChatModel("m", base_url=server.base_url, api_key="k", max_retries=0) as chat,
    ):
        app = react_graph(tools=("choir.web.search", "choir.web.browse")).compile(
            services={"model": chat, "arbiter": arbiter}
        )
        final = app.invoke({"task": "What is the capital of Japan?"})
    assert final.final_answer == "Tokyo is the capital of Japan."
    assert [(r.tool, r.status) for r in final.tool_calls] == [
        ("choir.web.search@1.0.0", "success"),
        ("choir.web.browse@1.0.0", "success"),
    ]
    tab = services.browser.tab("research")
    assert tab is not None
    assert tab["url"] == services.site.url_of("/tokyo")
    assert [k for k, _, _ in statuses(arbiter)] == ["call", "call", "audit"]


# --------------------------------------------------------------------------- host seam


class _BlockingHost:
    """A browser host whose calls on tab 'main' wait until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls: list[HostRequest] = []

    def execute_host_tool(self, request: HostRequest) -> object:
        self.calls.append(request)
        if request.args["tab"] == "main":
            self.entered.set()
            assert self.release.wait(30), "the test never released the host"
        return {"tab": request.args["tab"]}


def _browse_arbiter(workspace: Path, host: Any, **options: Any) -> Arbiter:
    return Arbiter(
        ToolRegistry.build(builtins=[web_browse]), workspace=workspace, host=host, **options
    )


def test_B18_host_delegated_call_holds_its_locks_and_is_committed_like_a_local_one(
    workspace: Path,
) -> None:
    host = _BlockingHost()
    url = "http://127.0.0.1:1/x"
    with _browse_arbiter(workspace, host, lock_timeout=0.2) as arbiter:
        outcome: list[ToolResult] = []
        first = threading.Thread(
            target=lambda: outcome.append(
                arbiter.dispatch(ToolCall(tool="choir.web.browse", args={"url": url}))
            )
        )
        first.start()
        try:
            assert host.entered.wait(10)
            # While the host works, the tab's exclusive lock is held by the delegated call ...
            held = arbiter.locks.snapshot()
            assert [mode for _, mode in held.get("browser_tab:main", ())] == ["X"]
            # ... so another call on that tab cannot start (it times out waiting, refused) ...
            with pytest.raises(LockTimeoutError):
                arbiter.dispatch(ToolCall(tool="choir.web.browse", args={"url": url}))
            # ... while another tab browses at once.
            other = arbiter.dispatch(
                ToolCall(tool="choir.web.browse", args={"url": url, "tab": "b"})
            )
            assert data(other) == {"tab": "b"}
        finally:
            host.release.set()
            first.join(10)
        assert data(outcome[0]) == {"tab": "main"}
        assert arbiter.locks.snapshot() == {}
        assert statuses(arbiter) == [
            ("call", "choir.web.browse", "denied"),
            ("call", "choir.web.browse", "success"),
            ("audit", "choir.web.browse", "success"),
            ("call", "choir.web.browse", "success"),
            ("audit", "choir.web.browse", "success"),
        ]
    # The host got validated, normalised arguments (defaults filled in) and the call's
    # identity, never a secret.
    assert host.calls[0].args == {"url": url, "tab": "main", "max_chars": 4000}
    assert host.calls[0].tool == "choir.web.browse@1.0.0"
    assert host.calls[0].name == "choir.web.browse"


def test_B18_host_errors_and_timeouts_follow_the_local_pipeline(workspace: Path) -> None:
    class Slow(BaseModel):
        """Wait in the host."""

        wait: bool

    slow = host_tool(id="demo.slow@1.0.0", args_model=Slow, locks=("gate:X",), timeout_s=0.2)
    released = threading.Event()

    def handler(request: HostRequest) -> object:
        if request.args["wait"]:
            released.wait(30)
            return "late"
        raise ValueError("the host broke")

    with Arbiter(
        ToolRegistry.build(builtins=[slow]),
        workspace=workspace,
        host=HostHandlers({"demo.slow": handler}),
    ) as arbiter:
        # A host that raises: the call fails as a typed error, its locks are released.
        with pytest.raises(ToolError, match="the host broke") as failed:
            arbiter.dispatch(ToolCall(tool="demo.slow", args={"wait": False}))
        assert failure_of(failed.value).code == "tool_failed"
        assert arbiter.locks.snapshot() == {}
        # A host that overruns the tool's timeout: tool_timeout; the lock stays held until
        # the delegated call really returns, and its late end is committed then.
        with pytest.raises(ToolTimeoutError):
            arbiter.dispatch(ToolCall(tool="demo.slow", args={"wait": True}))
        assert "gate" in arbiter.locks.snapshot()
        released.set()
        deadline = time.monotonic() + 10
        while arbiter.locks.snapshot() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert arbiter.locks.snapshot() == {}
        assert [s for _, _, s in statuses(arbiter)] == ["error", "timeout", "late_success"]


def test_B18_a_host_tool_without_a_host_is_refused_before_anything_is_locked(
    workspace: Path,
) -> None:
    with _browse_arbiter(workspace, None) as arbiter:
        call = ToolCall(tool="choir.web.browse", args={"url": "http://a.example"})
        with pytest.raises(
            ToolError, match="executed by the host, and this arbiter has none"
        ) as no:
            arbiter.dispatch(call)
        result = ToolResult.from_error(no.value)
        assert result.error is not None
        assert (result.status, result.error.code) == ("denied", "host_unavailable")
        assert arbiter.locks.snapshot() == {}
        assert [s for _, _, s in statuses(arbiter)] == ["denied"]


def test_B18_only_host_executed_tools_see_the_host(workspace: Path) -> None:
    seen: list[object] = []

    @tool(id="demo.peek@1.0.0")
    def peek(ctx: ToolContext) -> str:
        """Record what host the context carries."""
        seen.append(ctx.host)
        return "ok"

    host = _BlockingHost()
    with Arbiter(
        ToolRegistry.build(builtins=[peek, web_browse]), workspace=workspace, host=host
    ) as arbiter:
        arbiter.dispatch(ToolCall(tool="demo.peek"))
        arbiter.dispatch(ToolCall(tool="choir.web.browse", args={"url": "http://x.y", "tab": "t"}))
    assert seen == [None]
    assert len(host.calls) == 1


def test_B18_a_manifest_declares_a_host_executed_tool(tmp_path: Path, workspace: Path) -> None:
    manifest = tmp_path / "browse.json"
    manifest.write_text(
        json.dumps(
            {
                "llm": {
                    "name": "acme.web.browse",
                    "description": "Browse via the host.",
                    "parameters": {
                        "type": "object",
                        "properties": {"url": {"type": "string"}, "tab": {"type": "string"}},
                        "required": ["url", "tab"],
                    },
                },
                "runtime": {
                    "host_executed": True,
                    "locks": [{"resource": "browser_tab:{tab}", "mode": "X"}],
                    "side_effect": "external",
                    "timeout_ms": 5000,
                    "version": "1.0",
                },
            }
        )
    )
    loaded = load_manifest(manifest)
    assert isinstance(loaded, HostTool)
    assert (loaded.spec.executor, loaded.spec.exec_path) == ("host", None)
    calls: list[HostRequest] = []

    def browse(request: HostRequest) -> str:
        calls.append(request)
        return "opened"

    host = HostHandlers({"acme.web.browse": browse})
    with Arbiter(ToolRegistry.build(global_dir=tmp_path), workspace=workspace, host=host) as arb:
        result = arb.dispatch(ToolCall(tool="acme.web.browse", args={"url": "u", "tab": "7"}))
    assert result.summary == "opened"
    assert calls[0].args == {"url": "u", "tab": "7"}
    # exec_path and host_executed together are a contradiction, reported with the file.
    document = json.loads(manifest.read_text())
    document["runtime"]["exec_path"] = "browse"
    manifest.write_text(json.dumps(document))
    with pytest.raises(ToolSpecError, match="a host-executed tool has no executable"):
        load_manifest(manifest)


# --------------------------------------------------------------------------- each service


def test_B18_memory_query_modes_semantic_hash_range(arbiter: Arbiter) -> None:
    texts = ["The deploy key rotates monthly.", "Ada prefers Python.", "Lunch is at noon."]
    hashes = [data(run(arbiter, "choir.memory.upsert", text=t))["hash"] for t in texts]
    semantic = run(arbiter, "choir.memory.query", mode="semantic", query="python", k=1)
    assert [e["text"] for e in data(semantic)] == ["Ada prefers Python."]
    by_hash = data(run(arbiter, "choir.memory.query", mode="hash", hash=hashes[2]))
    assert [e["text"] for e in by_hash] == ["Lunch is at noon."]
    span = data(run(arbiter, "choir.memory.query", mode="range", start=2, end=3))
    assert [e["seq"] for e in span] == [2, 3]
    # Rewriting a key gives it a new sequence number; an identical write changes nothing.
    run(arbiter, "choir.memory.upsert", text="v1", key="pref", scope="session")
    again = run(arbiter, "choir.memory.upsert", text="v1", key="pref", scope="session")
    assert data(again)["status"] == "unchanged"
    moved = run(arbiter, "choir.memory.upsert", text="v2", key="pref", scope="session")
    assert (data(moved)["status"], data(moved)["seq"]) == ("updated", 5)
    # Each mode's arguments are checked before anything is locked or delegated.
    for args in (
        {"mode": "semantic"},
        {"mode": "semantic", "query": "x", "hash": hashes[0]},
        {"mode": "hash", "hash": "not-a-hash"},
        {"mode": "range", "start": 3, "end": 2},
        {"mode": "range"},
        {"mode": "fuzzy", "query": "x"},
    ):
        with pytest.raises(ToolArgumentError) as refused:
            run(arbiter, "choir.memory.query", **args)
        assert failure_of(refused.value).code == "invalid_arguments"
    assert [s for _, t, s in statuses(arbiter) if t == "choir.memory.query"][-6:] == ["invalid"] * 6


def test_B18_memory_compact_folds_old_entries_into_the_summary(arbiter: Arbiter) -> None:
    for n in range(5):
        run(arbiter, "choir.memory.upsert", text=f"event {n}", scope="working")
    done = data(run(arbiter, "choir.memory.compact", scope="working", keep=2))
    assert (done["folded"], done["kept"]) == (3, 2)
    left = run(arbiter, "choir.memory.query", mode="range", start=1, scope="working", k=50)
    kinds = [(e["kind"], e["text"]) for e in data(left)]
    assert kinds == [
        ("entry", "event 3"),
        ("entry", "event 4"),
        ("summary", "[1] event 0\n[2] event 1\n[3] event 2"),
    ]
    # A second compaction keeps the earlier summary's lines first.
    run(arbiter, "choir.memory.compact", scope="working", keep=0)
    summary = data(run(arbiter, "choir.memory.query", mode="range", start=1, scope="working"))
    assert [e["text"] for e in summary] == [
        "[1] event 0\n[2] event 1\n[3] event 2\n[4] event 3\n[5] event 4"
    ]


def test_B18_memory_store_refuses_another_embedder(tmp_path: Path) -> None:
    from stargraph.errors import StoreError
    from stargraph.skills.refs.embed import HashingEmbedder

    path = tmp_path / "memory.db"
    MemoryStore(path).close()
    with pytest.raises(StoreError, match="holds vectors of embedder"):
        MemoryStore(path, embedder=HashingEmbedder(64))


def test_issue23_memory_compaction_is_one_transaction(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "memory.db"
    store = MemoryStore(path)
    for n in range(4):
        store.upsert("working", f"event {n}")
    # Another process's rule refuses deleting entries: the fold's deletions fail after its
    # summary was written, and the summary must go with them.
    with sqlite3.connect(path) as other:
        other.execute(
            "CREATE TRIGGER keep BEFORE DELETE ON entries WHEN OLD.kind = 'entry' "
            "BEGIN SELECT RAISE(ABORT, 'entries are kept'); END"
        )
    other.close()
    with pytest.raises(sqlite3.IntegrityError, match="entries are kept"):
        store.compact("working", keep=1)
    assert [(e.kind, e.text) for e in store.entries("working")] == [
        ("entry", f"event {n}") for n in range(4)
    ]
    # The store goes on working: the failed transaction was rolled back, not left open.
    assert store.upsert("working", "event 4")[1] == "created"
    store.close()


def test_issue23_memory_store_is_shared_by_two_handles_of_one_file(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    first, second = MemoryStore(path), MemoryStore(path)
    entry, status = first.upsert("knowledge", "Paris is the capital of France.", key="paris")
    assert status == "created"
    assert second.upsert("knowledge", "Paris is the capital of France.", key="paris") == (
        entry,
        "unchanged",
    )
    replaced, status = second.upsert("knowledge", "Paris is in France.", key="paris")
    assert (status, replaced.seq) == ("updated", entry.seq + 1)
    assert [e.text for e in first.entries("knowledge")] == ["Paris is in France."]
    first.close()
    second.close()


def test_B18_email_send_check_receive_over_smtp_and_imap(
    arbiter: Arbiter, services: LocalServices
) -> None:
    services.mail.deliver(services.address, sender="ada@example.test", subject="a", body="one")
    services.mail.deliver(services.address, sender="bob@example.org", subject="b", body="two")
    check = data(run(arbiter, "choir.email.check", max_summaries=1))
    assert (check["messages"], check["unseen"], len(check["new"])) == (2, 2, 1)
    # check only peeks: both messages are still unseen.
    assert [flags for flags, _ in services.mail.mailbox(services.address)] == [frozenset()] * 2
    got = data(run(arbiter, "choir.email.receive", limit=1))["messages"]
    assert [(m["from"], m["subject"]) for m in got] == [("bob@example.org", "b")]  # newest
    assert [sorted(f) for f, _ in services.mail.mailbox(services.address)] == [[], ["\\Seen"]]
    everything = data(run(arbiter, "choir.email.receive", unseen_only=False))["messages"]
    assert [m["subject"] for m in everything] == ["b", "a"]

    sent = run(arbiter, "choir.email.send", to=["ada@example.test"], subject="re", body="x")
    [(_, message)] = services.mail.mailbox("ada@example.test")
    assert (message["From"], message["Subject"]) == (services.address, "re")
    assert message["Message-ID"] == data(sent)["message_id"]
    assert services.mail.transactions[-1] == (services.address, ("ada@example.test",))
    # A recipient the server does not host is refused, and the call fails as a ToolError.
    with pytest.raises(ToolError, match="refused every recipient"):
        run(arbiter, "choir.email.send", to=["nobody@example.test"], subject="s", body="b")
    # No header injection: a subject with a line break is invalid arguments.
    with pytest.raises(ToolArgumentError):
        run(arbiter, "choir.email.send", to=["ada@example.test"], subject="s\r\nBcc: x", body="")


def test_B18_email_with_a_wrong_password_is_a_typed_error(
    registry: Registry, services: LocalServices, workspace: Path
) -> None:
    wrong = {**services.secrets, "email_password": "wrong-password"}
    with registry.arbiter(workspace, host=services.host, secrets=wrong) as arbiter:
        for name in ("choir.email.check", "choir.email.receive"):
            with pytest.raises(ToolError, match="refused the login"):
                run(arbiter, name)
        with pytest.raises(ToolError, match="refused the login"):
            run(arbiter, "choir.email.send", to=["ada@example.test"], subject="s", body="b")
        assert "wrong-password" not in json.dumps(
            [r.model_dump(mode="json") for r in arbiter.commit_log.records()]
        )


def test_B18_notion_query_speaks_the_notion_api(arbiter: Arbiter, services: LocalServices) -> None:
    everything = run(arbiter, "choir.notion.query", database_id=NOTION_DB, page_size=2)
    assert data(everything)["has_more"] is True
    assert [r["properties"] for r in data(everything)["results"]] == [
        {"Name": "Ship the login page", "Status": "Done", "Points": 3},
        {"Name": "Write the release notes", "Status": "Doing", "Points": 1},
    ]
    by_status = run(
        arbiter, "choir.notion.query", database_id=NOTION_DB, property="Status", contains="todo"
    )
    assert [r["properties"]["Name"] for r in data(by_status)["results"]] == ["Plan the login audit"]
    request = services.notion.requests[-1]
    assert request.path == f"/v1/databases/{NOTION_DB}/query"
    assert request.headers["notion-version"] == "2022-06-28"
    assert json.loads(request.body) == {
        "page_size": 10,
        "filter": {"property": "Status", "rich_text": {"contains": "todo"}},
    }
    with pytest.raises(ToolError, match="Notion answered HTTP 404"):
        run(arbiter, "choir.notion.query", database_id="f" * 32)


def test_B18_search_and_notion_without_their_secret_fail_typed(
    registry: Registry, services: LocalServices, workspace: Path
) -> None:
    with registry.arbiter(
        workspace, host=services.host, secrets={"brave_api_key": "bad-key"}
    ) as arb:
        with pytest.raises(ToolError, match="Brave Search answered HTTP 401"):
            run(arb, "choir.web.search", q="x")
        with pytest.raises(ToolError, match="needs the secret 'notion_token'"):
            run(arb, "choir.notion.query", database_id=NOTION_DB)


def test_B18_tts_writes_a_deterministic_wav_under_the_choirtmp_lock(
    arbiter: Arbiter, workspace: Path
) -> None:
    first = data(run(arbiter, "choir.tts.speak", text="hello world"))
    again = data(run(arbiter, "choir.tts.speak", text="hello world"))
    other = data(run(arbiter, "choir.tts.speak", text="hello world", voice="en-gb"))
    assert first == again
    assert (first["voice"], other["voice"]) == ("default", "en-gb")
    assert other["path"] != first["path"]
    audio = workspace / first["path"]
    with wave.open(str(audio), "rb") as reader:
        assert (reader.getnchannels(), reader.getframerate()) == (1, 8000)
        assert reader.getnframes() == 11 * 320  # 40 ms per character at 8 kHz
    assert first["seconds"] == 0.44
    assert arbiter.registry.resolve("choir.tts.speak").spec.locks == ("choirtmp:X",)


def test_B18_browse_reads_title_text_and_links_and_keeps_each_tab(
    arbiter: Arbiter, services: LocalServices
) -> None:
    run(arbiter, "choir.web.browse", url=services.site.url_of("/paris"), tab="a")
    missing = run(arbiter, "choir.web.browse", url=services.site.url_of("/nowhere"), tab="b")
    assert (data(missing)["status"], data(missing)["title"]) == (404, "Not found")
    page_a, page_b = services.browser.tab("a"), services.browser.tab("b")
    assert page_a is not None
    assert page_b is not None
    assert (page_a["title"], page_b["status"]) == ("Paris", 404)
    with pytest.raises(ToolArgumentError):
        run(arbiter, "choir.web.browse", url="file:///etc/passwd")


# --------------------------------------------------------------------------- fuzzing

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=6,
)


def _deny_all(_call: ToolCall) -> bool:
    return False


@pytest.fixture
def fuzz_arbiter(
    registry: Registry, services: LocalServices, workspace: Path
) -> Iterator[tuple[Arbiter, list[HostRequest]]]:
    """The registry's arbiter behind a policy that denies every valid call, so a fuzzed
    call goes through validation, allowlist, paths and policy, and never runs."""
    delegated: list[HostRequest] = []

    class Recorder:
        def execute_host_tool(self, request: HostRequest) -> object:
            delegated.append(request)
            return None

    with registry.arbiter(
        workspace, host=Recorder(), secrets=dict(services.secrets), policies=[_deny_all]
    ) as arbiter:
        yield arbiter, delegated


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_B18_builtin_argument_validation_raises_only_typed_errors(
    fuzz_arbiter: tuple[Arbiter, list[HostRequest]], data: st.DataObject
) -> None:
    arbiter, delegated = fuzz_arbiter
    name = data.draw(st.sampled_from(BUILTIN_TOOLS))
    spec = arbiter.registry.resolve(name).spec
    known = sorted(spec.input_schema.get("properties", {}))
    keys = st.sampled_from(known) | st.text(max_size=8) if known else st.text(max_size=8)
    args = data.draw(st.dictionaries(keys, JSON, max_size=5))
    codes: list[str] = []
    try:
        arbiter.registry.resolve(name).arguments.validate(spec.id, args)
    except ToolArgumentError as exc:  # the only error validation may raise
        codes.append(failure_of(exc).code)
    try:
        arbiter.dispatch(ToolCall(tool=name, args=args))
    except (ToolArgumentError, ToolNotAllowedError) as exc:  # refused: typed, structured
        codes.append(failure_of(exc).code)
    else:  # pragma: no cover - the deny-all policy refuses every valid call
        raise AssertionError(f"{name} ran with {args!r}")
    assert set(codes) <= {"invalid_arguments", "policy_denied", "path_escape"}
    assert delegated == []
    assert arbiter.locks.snapshot() == {}


def test_B18_fuzzing_reaches_valid_arguments_too(
    fuzz_arbiter: tuple[Arbiter, list[HostRequest]],
) -> None:
    """The fuzz test above is only meaningful if valid calls reach the policy: they do."""
    arbiter, _ = fuzz_arbiter
    with pytest.raises(ToolNotAllowedError) as denied:
        arbiter.dispatch(
            ToolCall(tool="choir.web.browse", args=BrowseArgs(url="http://x.y").model_dump())
        )
    assert failure_of(denied.value).code == "policy_denied"
