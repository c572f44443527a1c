"""Docs that run: every Python block of README.md and docs/**.md runs, and the site builds.

Each page's blocks run in order, in a fresh temporary folder, as scripts (``python NAME.py``)
of a fresh interpreter with nothing but stargraph installed, the way a reader would paste them.
A block ending in ``# prints:`` comment lines must print exactly that (whitespace-insensitive,
``...`` matches anything). A block that defines a graph at module level then goes through the
command line as well: compile, draw, run, show, replay offline, a run killed with SIGKILL
after its first committed step and resumed, and a diff that finds the two runs the same.

An HTML comment right before a fence steers its block (it does not show on the site):

``<!-- docs-test: file=triage.py -->``
    save the block as ``triage.py`` (a file later blocks and commands use); otherwise it is
    ``block_<n>.py``. Before a block in another language (``json``), save it as that file.
``<!-- docs-test: pytest -->``
    the block is a test module: run it with pytest too.
``<!-- docs-test: input='{"text": "x"}' response='"yes"' -->``
    the command-line pass runs the graph with this ``--input`` and answers its interrupts
    with this ``--response``.
``<!-- docs-test: graph=app -->``
    the command-line pass uses ``FILE:app`` (a file defining several graphs).
``<!-- docs-test: no-cli='REASON' -->``
    no command-line pass, for the written reason (the test fails without one).
``<!-- docs-test: sh -->`` (before a ``sh`` fence)
    run the shell block's commands, in the page's folder, after the blocks above it.

Blocks that talk to a model get a real one over HTTP: ``OPENAI_BASE_URL`` points at a
:class:`~stargraph.testing.ScriptedOpenAIServer` that plays a model (:func:`docs_model`), so
no block is skipped for want of an API key. ``DATABASE_URL`` holds a PostgreSQL DSN for the
pages that need one (a server the test starts, as tests/postgres does).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stargraph.testing import RecordedRequest, Reply, ScriptedOpenAIServer
from tests import mcp_servers

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PAGES = sorted(
    [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")], key=lambda p: str(p.relative_to(ROOT))
)
PAGE_IDS = [str(p.relative_to(ROOT)) for p in PAGES]
PG_PAGES = {"docs/how-to/postgres.md", "docs/how-to/workers.md"}
# Pages whose code starts third-party MCP servers, found on PATH as a reader's install puts
# them there (scripts/ensure_mcp_servers.sh installs them for the tests).
MCP_PAGES = {"docs/how-to/mcp.md"}
"""Pages whose blocks get ``DATABASE_URL``: a PostgreSQL server of the test's own."""

_FENCE = re.compile(
    r"(?:^<!--\s*docs-test:(?P<directive>[^\n]*?)-->\n)?^```(?P<lang>[a-z]*)\n(?P<body>.*?)^```\s*$",
    re.M | re.S,
)


@dataclass(frozen=True)
class Block:
    """One fenced block of a page, with its directive."""

    page: str
    index: int
    line: int
    lang: str
    body: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line} (block {self.index})"


def _options(text: str | None) -> dict[str, str]:
    """``file=x.py input='{"a": 1}' pytest`` (shell quoting) -> a dict of options."""
    out: dict[str, str] = {}
    for word in shlex.split(text or ""):
        key, _, value = word.partition("=")
        out[key] = value
    return out


def blocks_of(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for i, match in enumerate(_FENCE.finditer(text)):
        line = text.count("\n", 0, match.start("body"))
        found.append(
            Block(
                page=str(page.relative_to(ROOT)),
                index=i,
                line=line,
                lang=match["lang"],
                body=match["body"],
                options=_options(match["directive"]),
            )
        )
    return found


# --------------------------------------------------------------------------- the model


def docs_model(request: RecordedRequest) -> Reply:
    """A model for the docs: it calls each offered tool once, in order, with the arguments
    below, then answers in words (or with the JSON a reply schema asks for)."""
    assert request.body is not None
    offered = [t["function"]["name"] for t in request.body.get("tools") or ()]
    called = {
        call["function"]["name"]
        for message in request.messages
        if message["role"] == "assistant"
        for call in message.get("tool_calls") or ()
    }
    for name in offered:
        if name not in called and name in TOOL_ARGUMENTS:
            # Ids from the conversation, not the server's counter: two runs of one graph
            # then get the same replies, and `stargraph diff` finds them the same.
            call_id = f"call_{len(called) + 1}_{name}"
            return Reply.tool_calls([(call_id, name, TOOL_ARGUMENTS[name])])
    answered = [m["content"] for m in request.messages if m["role"] == "tool"]
    wanted = _wanted_schema(request)
    if wanted is not None:
        return Reply.text(json.dumps(SCHEMA_ANSWERS[wanted]))
    last_user = next(m["content"] for m in reversed(request.messages) if m["role"] == "user")
    return Reply.text(REPLIES.get(str(last_user), f"Done ({len(answered)} tool results)."))


def _wanted_schema(request: RecordedRequest) -> str | None:
    """The name of the reply schema the request asks for: in ``response_format`` (OpenAI's
    ``json_schema`` form or llama.cpp's ``json_object`` + ``schema``), else in the prompt."""
    assert request.body is not None
    form = request.body.get("response_format") or {}
    named = (form.get("json_schema") or {}).get("name") or (form.get("schema") or {}).get("title")
    if named:
        return str(named)
    # Else the instruction the loop words from the schema ("... a JSON object with the
    # fields category (string), urgent (boolean)"), which names its fields.
    prompt = " ".join(str(m.get("content") or "") for m in request.messages)
    said = re.findall(r"JSON object with the fields? (.*?)(?:\.|$)", prompt)
    found = [
        name
        for name, answer in SCHEMA_ANSWERS.items()
        if isinstance(answer, dict)
        and any(set(answer) == set(re.findall(r"(\w+) \(", text)) for text in said)
    ]
    return found[0] if found else None


# What the docs' tools are called with, by the names the model sees them under: the short
# names the ReAct loop and the prebuilt agent offer, and the reversible function names of
# the tools a SkillSpec machine offers.
_ARGUMENTS: dict[str, dict[str, object]] = {
    "shop.lookup_order": {"order_id": "A-17"},
    "shop.refund": {"order_id": "A-17", "amount": 12.5},
    "demo.calc": {"expression": "3 * 4.5"},
    "demo.multiply": {"a": 3, "b": 4.5},
}
TOOL_ARGUMENTS: dict[str, dict[str, object]] = {
    **{name.rpartition(".")[2]: args for name, args in _ARGUMENTS.items()},
    **{name.replace(".", "__") + "__v1_0_0": args for name, args in _ARGUMENTS.items()},
    "get_weather": {"city": "Paris"},
    # server-filesystem's tools, in the MCP how-to's agent
    "write_file": {"path": "ws/notes.txt", "content": "buy milk"},
    "read_text_file": {"path": "ws/notes.txt"},
}
# Answers to a reply schema (response_format json_schema), by schema name.
SCHEMA_ANSWERS: dict[str, object] = {
    "Answer": {"total": 13.5},
    "Verdict": {"category": "billing", "urgent": True},
}
# Plain answers, by the last user message.
REPLIES: dict[str, str] = {
    "Say hello.": "Hello!",
}


@pytest.fixture(scope="module")
def model_server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(docs_model) as server:
        yield server


# --------------------------------------------------------------------------- running


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "STARGRAPH_", "PYTEST_", "COV_"))
        and k not in ("PYTHONPATH", "DATABASE_URL")
    }
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


def _run(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _expected_output(body: str) -> str | None:
    """The text after a ``# prints:`` line, uncommented; None when the block has none."""
    _, sep, said = body.partition("# prints:\n")
    if not sep:
        return None
    return "\n".join(line.removeprefix("#").strip() for line in said.splitlines())


def _matches(expected: str, actual: str) -> bool:
    words = " ".join(expected.split())
    pattern = ".*".join(re.escape(part) for part in words.split("..."))
    return re.fullmatch(pattern, " ".join(actual.split()), re.S) is not None


def _fail(block: Block, what: str, result: subprocess.CompletedProcess[str]) -> str:
    return (
        f"{block.where}: {what} exited {result.returncode}\n--- block\n{block.body}"
        f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-6000:]}"
    )


_KILLER = textwrap.dedent(
    """
    # Runs the stargraph command, killing the process with SIGKILL right after the first step
    # it commits, or right before it records that the run stopped (a run that waits at its
    # first step commits none, and a run's last step lands with its end in one commit): a
    # crash between two steps, as a power cut would make it.
    import os, signal, sys
    from stargraph.checkpoint import SqliteStore
    _commit, _set_status = SqliteStore.commit_step, SqliteStore.set_status
    def _commit_then_die(self, *args, **kwargs):
        if kwargs.get("status", "running") == "running":
            _commit(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)
    def _die_instead(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)
    SqliteStore.commit_step = _commit_then_die
    SqliteStore.set_status = _die_instead
    from stargraph.cli import main
    main(sys.argv[1:])
    """
)


def _statuses(folder: Path, env: dict[str, str]) -> dict[str, str]:
    result = _run(["stargraph", "runs", "--json", "--limit", "1000"], folder, env)
    assert result.returncode == 0, result.stderr
    return {r["run_id"]: r["status"] for r in json.loads(result.stdout)}


def _finish(block: Block, folder: Path, env: dict[str, str], run_id: str) -> None:
    """Answer the run's interrupts (the directive's ``response``) until it is done."""
    for _ in range(20):
        status = _statuses(folder, env)[run_id]
        if status != "interrupted":
            assert status == "done", f"{block.where}: run {run_id} ended {status}"
            return
        answer = ["--response", block.options["response"]] if "response" in block.options else []
        result = _run(["stargraph", "resume", run_id, *answer, "-q"], folder, env)
        assert result.returncode == 0, _fail(block, f"stargraph resume {run_id}", result)
    raise AssertionError(f"{block.where}: run {run_id} still waits after 20 answers")


def _cli_pass(block: Block, folder: Path, file: str, env: dict[str, str], tools: Path) -> None:
    """Run the block's graph through the command line, as the page's reader would."""
    spec = f"{file}:{block.options['graph']}" if "graph" in block.options else file
    compiled = _run(["stargraph", "compile", spec], folder, env)
    if compiled.returncode == 2 and "defines no Graph at module level" in compiled.stderr:
        return  # the block defines no graph: nothing for the command line to run
    assert compiled.returncode == 0, _fail(block, f"stargraph compile {spec}", compiled)
    graph_hash = compiled.stdout.strip()
    for args in (["hash", spec], ["draw", spec, "-f", "mermaid"]):
        result = _run(["stargraph", *args], folder, env)
        assert result.returncode == 0, _fail(block, f"stargraph {' '.join(args)}", result)
    if args[0] == "hash":
        assert result.stdout.strip() == graph_hash
    tag = f"b{block.index}"
    inputs = ["--input", block.options["input"]] if "input" in block.options else []
    live = _run(["stargraph", "run", spec, "--run-id", f"{tag}-live", *inputs, "-q"], folder, env)
    assert live.returncode == 0, _fail(block, f"stargraph run {spec}", live)
    _finish(block, folder, env, f"{tag}-live")
    for args in (["show", f"{tag}-live"], ["replay", f"{tag}-live", "-q"]):
        result = _run(["stargraph", *args], folder, env)
        assert result.returncode == 0, _fail(block, f"stargraph {' '.join(args)}", result)
    killed = _run(
        [
            sys.executable,
            str(tools / "killer.py"),
            "run",
            spec,
            "--run-id",
            f"{tag}-killed",
            *inputs,
            "-q",
        ],
        folder,
        env,
    )
    assert killed.returncode == -signal.SIGKILL, _fail(block, "the run to kill", killed)
    resumed = _run(["stargraph", "resume", f"{tag}-killed", "-q"], folder, env)
    assert resumed.returncode == 0, _fail(block, "stargraph resume (after SIGKILL)", resumed)
    _finish(block, folder, env, f"{tag}-killed")
    same = _run(["stargraph", "diff", f"{tag}-live", f"{tag}-killed"], folder, env)
    assert same.returncode == 0, _fail(block, "stargraph diff live killed", same)


@pytest.fixture(scope="module")
def docs_pg() -> Iterator[str]:
    """A PostgreSQL server for the pages about PostgreSQL (started only for them)."""
    from tests.postgres import pgcluster

    with pgcluster.running_cluster() as cluster:
        yield cluster.dsn


def _pg_dsn(request: pytest.FixtureRequest, page: str) -> dict[str, str]:
    if page not in PG_PAGES:
        return {}
    return {"DATABASE_URL": str(request.getfixturevalue("docs_pg"))}


def _mcp_path(page: str, env: dict[str, str]) -> dict[str, str]:
    if page not in MCP_PAGES:
        return {}
    mcp_servers.ensure()
    found = os.pathsep.join(str(p) for p in (mcp_servers.BIN, mcp_servers.TIME.parent))
    return {"PATH": f"{found}{os.pathsep}{env['PATH']}"}


@pytest.mark.slow
@pytest.mark.parametrize(
    "page",
    [
        pytest.param(p, marks=pytest.mark.postgres)
        if i in PG_PAGES
        else pytest.param(p, marks=pytest.mark.mcp)
        if i in MCP_PAGES
        else p
        for p, i in zip(PAGES, PAGE_IDS, strict=True)
    ],
    ids=PAGE_IDS,
)
def test_every_python_block_runs(
    page: Path, tmp_path: Path, model_server: ScriptedOpenAIServer, request: pytest.FixtureRequest
) -> None:
    blocks = blocks_of(page)
    folder = tmp_path / "reader"
    folder.mkdir()
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "killer.py").write_text(_KILLER)
    env = _env(
        {
            "OPENAI_BASE_URL": model_server.base_url,
            "OPENAI_API_KEY": "sk-docs",
            "STARGRAPH_MODEL": "scripted-model",
            **_pg_dsn(request, str(page.relative_to(ROOT))),
        }
    )
    env.update(_mcp_path(str(page.relative_to(ROOT)), env))
    for block in blocks:
        if block.lang == "sh" and "sh" in block.options:
            for line in _commands(block.body):
                result = _run(["bash", "-ec", line], folder, env)
                assert result.returncode == 0, _fail(block, line, result)
            continue
        if block.lang != "python":
            if "file" in block.options:  # a data file the page's code reads (a rule pack ...)
                (folder / block.options["file"]).write_text(block.body, encoding="utf-8")
            continue
        file = block.options.get("file", f"block_{block.index}.py")
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        (folder / file).write_text(block.body, encoding="utf-8")
        result = _run([sys.executable, file], folder, env)
        assert result.returncode == 0, _fail(block, f"python {file}", result)
        expected = _expected_output(block.body)
        if expected is not None:
            assert _matches(expected, result.stdout), (
                f"{block.where} says it prints:\n{expected}\nbut printed:\n{result.stdout}"
            )
        if "pytest" in block.options:
            result = _run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", file], folder, env
            )
            assert result.returncode == 0, _fail(block, f"pytest {file}", result)
        if "no-cli" in block.options:
            assert block.options["no-cli"], f"{block.where}: no-cli needs a written reason"
            continue
        _cli_pass(block, folder, file, env, tools)


def _commands(body: str) -> list[str]:
    """The commands of a shell block: one per line, comments dropped."""
    out = []
    for raw in body.splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if line:
            out.append(line)
    return out


def test_every_page_with_code_is_checked() -> None:
    """The block parser sees every fence (a fence it misses would go untested)."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        fences = len(re.findall(r"^```", text, re.M))
        assert fences == 2 * len(blocks_of(page)), page
        for block in blocks_of(page):
            if "no-cli" in block.options:
                assert block.options["no-cli"], f"{block.where}: no-cli needs a reason"
            unknown = set(block.options) - {
                "file",
                "pytest",
                "input",
                "response",
                "graph",
                "no-cli",
                "sh",
            }
            assert not unknown, f"{block.where}: unknown docs-test options {unknown}"


def test_shell_quoting_of_commands() -> None:
    assert _commands("stargraph run a.py  # go\n# note\n\nstargraph runs\n") == [
        "stargraph run a.py",
        "stargraph runs",
    ]
    assert shlex.split(_commands("stargraph run a.py --input '{\"a\": 1}'")[0])[-1] == '{"a": 1}'


# --------------------------------------------------------------------------- the site


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    for page in (
        "index.html",
        "getting-started/index.html",
        "concepts/replay/index.html",
        "how-to/postgres/index.html",
        "reference/api/index.html",
        "reference/ir-schema/index.html",
        "reference/cli/index.html",
        "langgraph/index.html",
    ):
        assert (site / page).is_file(), page
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("CompiledGraph", "SqliteStore", "export_cassette", "get_plugin_manager"):
        assert name in api, name
    schema = (site / "reference" / "ir-schema" / "index.html").read_text(encoding="utf-8")
    assert "$schema" in schema or "&quot;properties&quot;" in schema or "properties" in schema
