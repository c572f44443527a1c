"""``stargraph replay``, ``skills`` and ``plugins``: success and failure paths via click's runner.

Graphs named ``tests.cli.test_cli_more:...`` live here (pytest puts the repository root on
``sys.path``).
Plugins are installed the way ``importlib.metadata`` sees them: a package plus a dist-info
directory with an entry point in group ``stargraph``, on a temporary ``sys.path`` entry.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from pydantic import BaseModel

from stargraph.checkpoint import SqliteStore
from stargraph.graph import END, START, Graph
from stargraph.testing import Reply, ScriptedOpenAIServer

LOOP = "stargraph.examples.basics:loop_graph"

# --------------------------------------------------------------------------- graphs

SWITCH = {"flipped": False}


class Flip(BaseModel):
    value: int = 0


def flip(state: Flip) -> dict[str, Any]:
    # Deterministic, until a test flips the switch: then replay sees different writes.
    return {"value": state.value + (100 if SWITCH["flipped"] else 1)}


def flippy() -> Graph[Flip]:
    """One node whose behaviour a test can change between record and replay."""
    return (
        Graph("flippy", state=Flip)
        .with_node("flip", flip)
        .with_edge(START, "flip")
        .with_edge("flip", END)
    )


# --------------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.chdir(tmp_path)
    SWITCH["flipped"] = False
    yield
    SWITCH["flipped"] = False


def sg(*args: str, env: dict[str, str] | None = None) -> Result:
    from stargraph.cli._app import cli

    return CliRunner().invoke(cli, list(args), catch_exceptions=False, env=env)


def one_paragraph_error(result: Result) -> str:
    error = result.stderr[result.stderr.index("error: ") :]
    assert "Traceback" not in result.stderr
    return error


def recorded_loop(run_id: str = "r-1", limit: int = 3) -> None:
    result = sg("run", LOOP, "--input", json.dumps({"limit": limit}), "--run-id", run_id, "-q")
    assert result.exit_code == 0, result.output


# --------------------------------------------------------------------------- replay


def test_replay_of_a_stored_run_prints_its_events_and_matches() -> None:
    recorded_loop()
    result = sg("replay", "r-1")
    assert result.exit_code == 0, result.output
    assert "[step 1] step finished" in result.stdout
    assert "run r-1 finished" in result.stdout
    assert "replay of run r-1 matches its record (3 steps, offline)" in result.stderr
    quiet = sg("replay", "r-1", "--quiet", "--graph", LOOP)
    assert quiet.exit_code == 0
    assert quiet.stdout == ""


def test_replay_exports_and_replays_a_cassette(tmp_path: Path) -> None:
    recorded_loop()
    exported = sg("replay", "r-1", "-q", "--export", "r-1.cassette.json")
    assert exported.exit_code == 0, exported.output
    assert "wrote cassette r-1.cassette.json" in exported.stderr
    result = sg("replay", "r-1.cassette.json")
    assert result.exit_code == 0, result.output
    assert "matches its record" in result.stderr
    # A hand-edited cassette is refused by its checksum: exit 1, one paragraph.
    document = json.loads(Path("r-1.cassette.json").read_text())
    document["recording"]["run"]["run_id"] = "forged"
    Path("forged.json").write_text(json.dumps(document))
    forged = sg("replay", "forged.json", "--graph", LOOP)
    assert forged.exit_code == 1
    assert "does not match its checksum" in one_paragraph_error(forged)


def test_replay_that_diverges_exits_1_with_the_difference() -> None:
    result = sg("run", "tests.cli.test_cli_more:flippy", "--run-id", "f-1", "-q")
    assert result.exit_code == 0, result.output
    SWITCH["flipped"] = True
    replayed = sg("replay", "f-1", "--graph", "tests.cli.test_cli_more:flippy")
    assert replayed.exit_code == 1
    error = one_paragraph_error(replayed)
    assert "replay of run f-1 diverged from its record" in error
    assert "node 'flip' wrote {'value': 100} but the recorded run wrote {'value': 1}" in error


def test_replay_from_step_makes_a_counterfactual_and_prints_its_diff() -> None:
    recorded_loop(limit=2)
    result = sg("replay", "r-1", "--from-step", "2", "--set", "limit=4")
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    assert first.startswith("counterfactual run r-1~from2-")
    assert "fork of r-1 before step 2 with limit=4; status done" in first
    new_id = first.split()[2].rstrip(":")
    assert f"--- r-1\n+++ {new_id}" in result.stdout
    assert 'step 2 (B only): writes {"__update__/0": {"limit": 4}}' in result.stdout
    with SqliteStore(".stargraph/stargraph.db") as store:
        record = store.get_run(new_id)
        assert (record.parent_run_id, record.status) == ("r-1", "done")
    # The fork is an ordinary stored run: show finds its graph in the archive.
    shown = sg("show", new_id)
    assert shown.exit_code == 0, shown.output
    assert '"counter": 4' in shown.stdout


class Abc(BaseModel):
    n: int = 0


def add_one(state: Abc) -> dict[str, Any]:
    return {"n": state.n + 1}


def times_ten(state: Abc) -> dict[str, Any]:
    return {"n": state.n * 10}


def plus_five(state: Abc) -> dict[str, Any]:
    return {"n": state.n + 5}


def abc() -> Graph[Abc]:
    """a -> b -> c: each step's write depends on the one before."""
    return (
        Graph("abc", state=Abc)
        .with_node("a", add_one)
        .with_node("b", times_ten)
        .with_node("c", plus_five)
        .with_edge(START, "a")
        .with_edge("a", "b")
        .with_edge("b", "c")
        .with_edge("c", END)
    )


def test_a_counterfactual_diff_lines_up_the_steps_after_its_update() -> None:
    """The update a counterfactual inserts is a step of its own; the diff used to compare
    the parent's step k with the child's step k, one step off from there on (the parent's
    ``b`` beside the child's ``__update__``, its ``c`` beside the child's ``b``)."""
    assert sg("run", "tests.cli.test_cli_more:abc", "--run-id", "p-1", "-q").exit_code == 0
    result = sg("replay", "p-1", "--from-step", "2", "--set", "n=100")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()[3:]
    assert lines == [
        'step 2 (B only): writes {"__update__/0": {"n": 100}}; next [\'b/0\']',
        'step 2 (B: step 3): writes A = {"b/0": {"n": 10}}  B = {"b/0": {"n": 1000}}',
        'step 3 (B: step 4): writes A = {"c/0": {"n": 15}}  B = {"c/0": {"n": 1005}}',
    ]
    child = result.stdout.splitlines()[0].split()[2].rstrip(":")
    diffed = sg("diff", "p-1", child)
    assert diffed.exit_code == 1
    assert diffed.stdout.splitlines()[2:] == [
        "step 2: only in B (__update__)",
        "step 2 (B: step 3) b n: A = 10  B = 1000",
        "step 3 (B: step 4) c n: A = 15  B = 1005",
        "final state n: A = 15  B = 1005",
    ]


def test_replay_from_step_without_changes_has_no_differences() -> None:
    recorded_loop()
    result = sg("replay", "r-1", "--from-step", "1")
    assert result.exit_code == 0, result.output
    assert "with no changes" in result.stdout
    assert "no differences from r-1" in result.stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["replay", "r-1", "--set", "limit=4"], 2, "--set needs --from-step K"),
        (["replay", "r-1", "--from-step", "1", "--set", "limit"], 2, "--set expects key=value"),
        (["replay", "r-1", "--from-step", "0"], 2, "Invalid value for '--from-step'"),
        (["replay", "nope"], 1, "nope"),
        (["replay", "r-1", "--db", "missing.db"], 1, "no run database at missing.db"),
        (["replay", "r-1", "--from-step", "9"], 1, "cannot fork from step 8"),
        (["replay", "r-1", "--from-step", "2", "--set", "nosuch=1"], 1, "nosuch"),
    ],
)
def test_replay_failure_paths(args: list[str], code: int, message: str) -> None:
    recorded_loop()
    result = sg(*args)
    assert result.exit_code == code, result.output
    assert message in result.stderr


def test_replay_of_a_cassette_refuses_counterfactuals_and_needs_its_graph() -> None:
    recorded_loop()
    assert sg("replay", "r-1", "-q", "--export", "c.json").exit_code == 0
    result = sg("replay", "c.json", "--from-step", "1")
    assert result.exit_code == 2
    assert "need a run id in --db, not a cassette file" in result.stderr
    elsewhere = sg("replay", "c.json", "--db", "other/x.db")
    assert elsewhere.exit_code == 2
    assert "is neither archived beside other/x.db nor kept in it" in one_paragraph_error(elsewhere)


# --------------------------------------------------------------------------- plugins

PLUGIN = '''
from typing import Annotated
from pydantic import BaseModel
from stargraph import reducers
from stargraph.graph import END, START, Graph
from stargraph.plugin import hookimpl
from stargraph.skills import Example, Skill
from stargraph.skills.react import react_skill
from stargraph.tools import tool


class GreetState(BaseModel):
    name: str = "world"
    log: Annotated[list[str], reducers.append] = []


def greet(state: GreetState) -> dict:
    return {{"log": [f"hello {{state.name}} from {dist}"]}}


@tool(id="{ns}.shout@1.0.0")
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


SKILL = Skill.from_graph(
    Graph("greeter", state=GreetState).with_node("greet", greet)
    .with_edge(START, "greet").with_edge("greet", END),
    name="{ns}-greeter", version="1.2.0", kind="workflow", description="Says hello.",
    state_schema=GreetState,
    examples=(Example(input={{"name": "ada"}}, description="greet Ada"),),
)


@hookimpl
def register_skills(register):
    register(SKILL)
    register(react_skill(name="{ns}-shouter", tools=["{ns}.shout@1.0.0"], max_steps=3))


@hookimpl
def register_tools(register):
    register(shout)
'''


def install(root: Path, dist: str, *, ns: str, source: str = PLUGIN) -> None:
    """An installed distribution as importlib.metadata sees one: a package + dist-info."""
    module = dist.replace("-", "_")
    (root / module).mkdir(parents=True)
    (root / module / "__init__.py").write_text(
        textwrap.dedent(source.format(dist=repr(dist)[1:-1], ns=ns))
    )
    info = root / f"{module}-1.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0.0\n")
    (info / "entry_points.txt").write_text(f"[stargraph]\n{module} = {module}\n")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    yield root
    for name in [m for m in sys.modules if m.startswith(("acme_", "broken_"))]:
        del sys.modules[name]


def test_plugins_list_names_distributions_and_hooks(site: Path) -> None:
    install(site, "acme-greeter", ns="acme")
    result = sg("plugins", "list")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["PLUGIN", "DISTRIBUTION", "STATUS", "HOOKS"]
    assert lines[1].startswith("stargraph.builtins")
    assert "register_checkpoint_stores, register_models, register_rule_packs" in lines[1]
    acme = next(line for line in lines if line.startswith("acme_greeter"))
    assert acme.split()[1:4] == ["acme-greeter", "1.0.0", "ok"]
    assert acme.rstrip().endswith("register_skills, register_tools")
    as_json = json.loads(sg("plugins", "list", "--json").stdout)
    entry = next(p for p in as_json if p["name"] == "acme_greeter")
    assert entry == {
        "name": "acme_greeter",
        "distribution": "acme-greeter 1.0.0",
        "status": "ok",
        "hooks": ["register_skills", "register_tools"],
        "error": None,
    }


BROKEN_IMPORT_WHERE = (
    "entry point 'broken_plugin = broken_plugin' (group 'stargraph') of distribution "
    "broken-plugin 1.0.0"
)
BROKEN_FIX = (
    "(fix: upgrade or uninstall broken-plugin (pip install -U broken-plugin / pip uninstall "
    "broken-plugin), or skip it with STARGRAPH_DISABLE_PLUGINS=broken_plugin)"
)


def test_a_plugin_that_fails_to_import_is_one_paragraph(site: Path) -> None:
    install(site, "broken-plugin", ns="broken", source="raise ImportError('no lxml here')\n")
    for args in (["plugins", "list"], ["skills", "list"]):
        result = sg(*args)
        assert result.exit_code == 1, result.output
        error = one_paragraph_error(result)
        assert "no lxml here" in error
        assert "\n\n" not in error.strip()


def test_a_broken_plugin_is_named_by_entry_point_and_distribution(site: Path) -> None:
    # Issue 25 item 12: the error named neither the entry point nor the distribution.
    install(site, "acme-greeter", ns="acme")
    install(site, "broken-plugin", ns="broken", source="raise ImportError('no lxml here')\n")
    expected = (
        f"error: plugin setup is invalid: plugin broken_plugin: {BROKEN_IMPORT_WHERE} failed "
        f"to import: ImportError: no lxml here {BROKEN_FIX}"
    )
    skills = sg("skills", "list")
    assert skills.exit_code == 1, skills.output
    assert one_paragraph_error(skills).strip() == expected
    # plugins list still lists the healthy plugins, shows the broken one, then fails.
    plugins = sg("plugins", "list")
    assert plugins.exit_code == 1, plugins.output
    rows = {line.split()[0]: line.split() for line in plugins.stdout.splitlines()[1:]}
    assert rows["acme_greeter"][1:4] == ["acme-greeter", "1.0.0", "ok"]
    assert rows["broken_plugin"] == ["broken_plugin", "broken-plugin", "1.0.0", "broken"]
    assert one_paragraph_error(plugins).strip() == expected
    data = json.loads(sg("plugins", "list", "--json").stdout)
    broken = next(p for p in data if p["name"] == "broken_plugin")
    assert broken == {
        "name": "broken_plugin",
        "distribution": "broken-plugin 1.0.0",
        "status": "broken",
        "hooks": [],
        "error": expected.removeprefix("error: plugin setup is invalid: "),
    }
    # The way out the message offers works, by entry point or distribution name.
    for skip in ("broken_plugin", "broken-plugin"):
        env = {"STARGRAPH_DISABLE_PLUGINS": skip}
        listed = sg("plugins", "list", env=env)
        assert listed.exit_code == 0, listed.output
        rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
        assert rows["broken_plugin"][1:] == ["broken-plugin", "1.0.0", "disabled"]
        skills = sg("skills", "list", env=env)
        assert skills.exit_code == 0, skills.output
        assert "acme-greeter" in skills.stdout


HOOK_RAISES = """
from stargraph.plugin import hookimpl

@hookimpl
def register_skills(register):
    raise RuntimeError("skills database is down")
"""


def test_a_plugin_whose_hook_raises_is_named_by_entry_point_and_distribution(
    site: Path,
) -> None:
    install(site, "acme-greeter", ns="acme")
    install(site, "broken-plugin", ns="broken", source=HOOK_RAISES)
    expected = (
        f"error: plugin setup is invalid: plugin broken_plugin: {BROKEN_IMPORT_WHERE} failed: "
        f"its hook register_skills raised RuntimeError: skills database is down {BROKEN_FIX}"
    )
    skills = sg("skills", "list")
    assert skills.exit_code == 1, skills.output
    assert one_paragraph_error(skills).strip() == expected
    plugins = sg("plugins", "list")
    assert plugins.exit_code == 1, plugins.output
    rows = {line.split()[0]: line.split() for line in plugins.stdout.splitlines()[1:]}
    assert rows["acme_greeter"][1:4] == ["acme-greeter", "1.0.0", "ok"]
    assert rows["broken_plugin"] == [
        "broken_plugin",
        "broken-plugin",
        "1.0.0",
        "broken",
        "register_skills",
    ]
    assert one_paragraph_error(plugins).strip() == expected


def test_plugins_list_usage_error() -> None:
    result = sg("plugins", "frob")
    assert result.exit_code == 2
    assert "No such command 'frob'" in result.stderr


# --------------------------------------------------------------------------- skills


def test_skills_list_shows_built_in_and_plugin_skills(site: Path) -> None:
    install(site, "acme-greeter", ns="acme")
    result = sg("skills", "list")
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:]}
    assert rows["acme-greeter"][:4] == ["acme-greeter", "1.2.0", "workflow", "acme-greeter"]
    assert rows["acme-shouter"][2] == "agent"
    assert rows["rag"][3] == "stargraph"
    data = json.loads(sg("skills", "list", "--json").stdout)
    assert {"name": "acme-greeter", "version": "1.2.0", "kind": "workflow"}.items() <= next(
        s for s in data if s["name"] == "acme-greeter"
    ).items()


def test_skills_show_and_unknown_skill(site: Path) -> None:
    install(site, "acme-greeter", ns="acme")
    result = sg("skills", "show", "acme-greeter")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "skill      acme-greeter@1.2.0" in out
    assert "provider   acme-greeter" in out
    assert "outputs    log, name" in out
    assert 'example 1: greet Ada\n  input  {"name": "ada"}' in out
    shouter = sg("skills", "show", "acme-shouter").stdout
    assert "tools      acme.shout@1.0.0" in shouter
    missing = sg("skills", "show", "nope")
    assert missing.exit_code == 1
    error = one_paragraph_error(missing)
    assert "no skill 'nope'" in error
    assert "acme-greeter" in error  # the known skills are listed


def test_skills_run_a_workflow_skill(site: Path) -> None:
    install(site, "acme-greeter", ns="acme")
    result = sg("skills", "run", "acme-greeter", "--input", '{"name": "ada"}', "--run-id", "g1")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["log"] == ["hello ada from acme-greeter"]
    runs = sg("runs")
    assert "g1" in runs.stdout
    assert "done" in runs.stdout


def test_skills_run_an_agent_skill_against_an_openai_compatible_endpoint(site: Path) -> None:
    install(site, "acme-greeter", ns="acme")
    script = [
        Reply.tool_calls([("acme__shout__v1_0_0", {"text": "hi"})]),
        Reply.text("It says HI."),
    ]
    with ScriptedOpenAIServer(script) as server:
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "x"}
        result = sg(
            "skills",
            "run",
            "acme-shouter",
            "--model",
            "scripted-model",
            "--input",
            '{"task": "shout hi"}',
            "--plain",
            env=env,
        )
    assert result.exit_code == 0, result.output
    final = json.loads(result.stdout)
    assert final["final_answer"] == "It says HI."
    assert [(c["tool"], c["status"]) for c in final["tool_calls"]] == [
        ("acme.shout@1.0.0", "success")
    ]
    assert "finished (done by rule exit/final_answer: final_answer)" in result.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["skills", "run", "nope"], 1, "no skill 'nope'"),
        (["skills", "run", "acme-greeter", "--input", "[1]"], 2, "must be a JSON object"),
        (["skills", "run", "acme-greeter", "--input", "{"], 2, "--input is not valid JSON"),
        (["skills", "run", "acme-greeter", "--input", '{"name": 5}'], 2, "does not fit"),
        (["skills", "frob"], 2, "No such command 'frob'"),
    ],
)
def test_skills_failure_paths(site: Path, args: list[str], code: int, message: str) -> None:
    install(site, "acme-greeter", ns="acme")
    result = sg(*args)
    assert result.exit_code == code, result.output
    assert message in result.stderr
