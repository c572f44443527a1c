"""Issue 48: replay across graph versions, and recorded runs as a regression suite.

A graph with a skill subgraph and a ``Send`` fan-out (``versiongraph``) records 20 runs in a
SQLite file, against the scripted OpenAI server; the cassettes are then checked against
edited versions of the graph. Every model request the check makes is counted on the server:
unchanged regions are served from the record with none.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from pydantic import BaseModel

from stargraph.checkpoint import MemoryStore, SqliteStore
from stargraph.cli._app import cli
from stargraph.errors import (
    CassetteError,
    GraphHashMismatch,
    NodeError,
    ReplayDivergenceError,
    ReplayError,
)
from stargraph.graph import END, START, Graph
from stargraph.nodes import SubgraphNode
from stargraph.replay import (
    CassetteCheck,
    check_cassette,
    check_cassettes,
    export_cassette,
    load_cassette,
)
from stargraph.runtime import CompiledGraph
from stargraph.skills import Skill, SkillKind
from stargraph.testing import ScriptedOpenAIServer, assert_cassettes_pass

HERE = Path(__file__).resolve().parent
# Node refs name the module "versiongraph" (a plain folder on the path, as the CLI sees it).
sys.path.insert(0, str(HERE.parent / "versions"))

import versiongraph as vg  # noqa: E402

RUNS = 20
# The model requests of one run of the base graph: plan, 3 drafts, lookup, summarize.
PER_RUN = 6


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(vg.echo) as running:
        yield running


@pytest.fixture(scope="module")
def recorded(
    server: ScriptedOpenAIServer, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, list[Path]]:
    """20 runs of the base graph in a SQLite file, each exported as a cassette."""
    folder = tmp_path_factory.mktemp("issue48")
    store = SqliteStore(folder / "runs.db")
    app = vg.compile_version("base", server.base_url, store=store)
    before = len(server.chat_requests)
    paths = []
    for i in range(RUNS):
        app.invoke({"topic": f"topic{i:02d}"}, run_id=f"r{i:02d}")
        paths.append(export_cassette(store, f"r{i:02d}", folder / f"r{i:02d}.json", graph=app))
    assert len(server.chat_requests) - before == RUNS * PER_RUN
    app.close()
    return folder / "runs.db", paths


def _check(
    server: ScriptedOpenAIServer, paths: list[Path], variant: str, **options: Any
) -> tuple[list[CassetteCheck], list[str]]:
    """Check ``paths`` against ``variant``; the results and the prompts the model was sent."""
    new = vg.compile_version(variant, server.base_url)
    before = len(server.chat_requests)
    results = check_cassettes(paths, new, **options)
    sent = [str((r.body or {})["messages"][-1]["content"]) for r in server.chat_requests[before:]]
    return results, sent


def test_issue48_the_same_graph_serves_every_region_with_no_model_request(
    server: ScriptedOpenAIServer, recorded: tuple[Path, list[Path]]
) -> None:
    results, sent = _check(server, recorded[1], "base")
    assert sent == []
    assert [r.verdict for r in results] == ["identical"] * RUNS
    for result in results:
        assert {r.region: r.status for r in result.regions} == {
            "plan": "served",
            "draft": "served",
            "research": "served",
            "summarize": "served",
        }
        assert result.changed_regions == ()
        assert result.changes == ()


def test_issue48_an_unrelated_node_added_before_everything_moves_nothing(
    server: ScriptedOpenAIServer, recorded: tuple[Path, list[Path]]
) -> None:
    # (a) Every recorded step moves by one; positions are per region, so all still match.
    results, sent = _check(server, recorded[1], "unrelated")
    assert sent == []  # audit calls no model; everything else is served
    for i, result in enumerate(results):
        assert result.verdict == "changed", result.error
        assert result.changed_regions == ("audit",)
        statuses = {r.region: (r.status, r.reason) for r in result.regions}
        assert statuses == {
            "audit": ("re-executed", "new region"),
            "plan": ("served", ""),
            "draft": ("served", ""),
            "research": ("served", ""),
            "summarize": ("served", ""),
        }
        assert {r.region: r.served for r in result.regions}["draft"] == 3  # the Send tasks
        assert result.changes == (f'audit: only in B = "checked topic{i:02d}"',)


def test_issue48_an_edited_prompt_runs_only_that_node(
    server: ScriptedOpenAIServer, recorded: tuple[Path, list[Path]]
) -> None:
    # (b) summarize's prompt changed: it alone runs, one model request per run.
    results, sent = _check(server, recorded[1], "prompt", score=lambda final: len(final["summary"]))
    assert len(sent) == RUNS
    assert all(prompt.startswith("Summarize briefly:") for prompt in sent)
    for i, result in enumerate(results):
        assert result.verdict == "changed"
        assert result.changed_regions == ("summarize",)
        statuses = {r.region: r.status for r in result.regions}
        assert statuses == {
            "plan": "served",
            "draft": "served",
            "research": "served",
            "summarize": "diverged",
        }
        new = f"re: Summarize briefly: re: Find facts about topic{i:02d} / 3"
        assert result.changes == (
            f'summary: A = "re: Summarize: re: Find facts about topic{i:02d} / 3"  B = "{new}"',
        )
        assert result.score == len(new)


def test_issue48_a_changed_skill_runs_the_skill_and_what_it_fed(
    server: ScriptedOpenAIServer, recorded: tuple[Path, list[Path]]
) -> None:
    # (c) The skill's IR changed: its child run is replayed region by region - lookup
    # changed and runs (it asks the model), condense sees other facts and runs - and
    # summarize, unchanged but now seeing another digest, runs too - reported as such.
    results, sent = _check(server, recorded[1], "skill")
    assert sorted({prompt.split(" topic")[0].split(" re:")[0] for prompt in sent}) == [
        "Find three facts about",
        "Summarize:",
    ]
    assert len(sent) == 2 * RUNS
    for result in results:
        assert result.verdict == "changed"
        assert result.changed_regions == ("research", "research/lookup")
        report = {r.region: r for r in result.regions}
        assert report["research"].status == "diverged"
        assert report["research"].changed
        assert report["research"].reason == "region changed; replayed region by region inside"
        assert (report["research/lookup"].status, report["research/lookup"].reason) == (
            "diverged",
            "region changed",
        )
        assert report["research/condense"].reason == "its inputs changed upstream"
        assert not report["research/condense"].changed
        assert report["summarize"].status == "diverged"
        assert not report["summarize"].changed
        assert report["summarize"].reason == "its inputs changed upstream"
        assert {report[n].status for n in ("plan", "draft")} == {"served"}


def test_issue48_a_change_inside_a_skill_reruns_only_that_region_of_the_skill(
    server: ScriptedOpenAIServer, recorded: tuple[Path, list[Path]]
) -> None:
    # The skill's last node changed: its lookup (a model call) is served from the child
    # run's record; condense runs (no model); summarize sees another digest and runs. One
    # model request per run, not two (a skill run whole asks lookup's again).
    results, sent = _check(server, recorded[1], "tail")
    assert len(sent) == RUNS
    for i, prompt in enumerate(sent):
        assert prompt == f"Summarize: re: Find facts about topic{i:02d}. / 3"
    for result in results:
        assert result.verdict == "changed", result.error
        assert result.changed_regions == ("research", "research/condense")
        statuses = {r.region: (r.status, r.reason) for r in result.regions}
        assert statuses["research/lookup"] == ("served", "")
        assert statuses["research/condense"] == ("diverged", "region changed")
        assert statuses["research"] == (
            "diverged",
            "region changed; replayed region by region inside",
        )
        assert statuses["summarize"] == ("diverged", "its inputs changed upstream")
        assert {statuses[n][0] for n in ("plan", "draft")} == {"served"}
    # Offline, the skill needs no model (lookup is served); summarize does.
    offline = check_cassette(
        recorded[1][0], vg.compile_version("tail", server.base_url), live=False
    )
    assert offline.verdict == "broken"
    assert "region 'summarize' (its inputs changed upstream)" in str(offline.error)


def test_issue48_a_stored_run_replays_a_changed_skill_region_by_region(
    server: ScriptedOpenAIServer, recorded: tuple[Path, list[Path]]
) -> None:
    store = SqliteStore(recorded[0])
    base = vg.compile_version("base", server.base_url, store=store)
    before = len(server.chat_requests)
    report = base.replay("r04", graph=vg.compile_version("tail", server.base_url), live=True)
    # The child run's record in the store served lookup: summarize alone asked the model.
    assert len(server.chat_requests) == before + 1
    assert report.region("research/lookup").status == "served"
    assert report.region("research/condense").executed == 1
    base.close()


def test_issue48_offline_a_changed_region_that_needs_the_model_is_a_typed_error(
    server: ScriptedOpenAIServer, recorded: tuple[Path, list[Path]]
) -> None:
    store = SqliteStore(recorded[0])
    base = vg.compile_version("base", server.base_url, store=store)
    new = vg.compile_version("prompt", server.base_url)
    before = len(server.chat_requests)
    with pytest.raises(ReplayDivergenceError) as info:
        base.replay("r03", graph=new)
    assert len(server.chat_requests) == before
    message = str(info.value)
    assert "region 'summarize' (region changed)" in message
    assert "live=True" in message
    assert info.value.node == "summarize"
    # The same from a cassette, through the check: broken, with the reason.
    result = check_cassette(recorded[1][3], new, live=False)
    assert result.verdict == "broken"
    assert "region 'summarize'" in str(result.error)
    base.close()


def test_issue48_an_unchanged_region_with_changed_inputs_can_stop_the_replay(
    server: ScriptedOpenAIServer, recorded: tuple[Path, list[Path]]
) -> None:
    base = vg.compile_version("base", server.base_url)
    new = vg.compile_version("skill", server.base_url)
    cassette = load_cassette(recorded[1][0])
    with pytest.raises(ReplayDivergenceError) as info:
        base.replay(cassette, graph=new, live=True, on_inputs="stop")
    # The first unchanged region that sees other input is inside the skill: condense.
    assert "region 'condense' is unchanged" in str(info.value)
    assert "run 'r00::research@1.0'" in str(info.value)
    assert "on_inputs='run'" in str(info.value)
    report = base.replay(cassette, graph=new, live=True)
    assert report.region("summarize").reason == "its inputs changed upstream"


def test_issue48_resume_under_a_changed_graph_still_fails_loudly(
    server: ScriptedOpenAIServer, recorded: tuple[Path, list[Path]]
) -> None:
    store = SqliteStore(recorded[0])
    for variant in ("unrelated", "prompt", "skill"):
        changed = vg.compile_version(variant, server.base_url, store=store)
        with pytest.raises(GraphHashMismatch):
            changed.resume("r00")
        with pytest.raises(GraphHashMismatch):
            changed.replay("r00")  # a plain replay stays pinned to the whole graph too
        changed.close()


def test_issue48_cassette_region_hashes_are_under_the_checksum(
    recorded: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    document = orjson.loads(recorded[1][0].read_bytes())
    assert set(document["regions"]) == {
        "plan",
        "draft",
        "research",
        "research/lookup",
        "research/condense",
        "summarize",
    }
    document["regions"]["summarize"] = "sha256:" + "0" * 64
    edited = tmp_path / "edited.json"
    edited.write_bytes(orjson.dumps(document))
    with pytest.raises(CassetteError, match="does not match its checksum"):
        load_cassette(edited)


def test_issue48_a_cassette_without_region_hashes_needs_its_own_graph(
    server: ScriptedOpenAIServer, recorded: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    store = SqliteStore(recorded[0])
    plain = export_cassette(store, "r01", tmp_path / "plain.json")  # no graph=: no regions
    same = vg.compile_version("base", server.base_url)
    assert check_cassette(plain, same).verdict == "identical"
    result = check_cassette(plain, vg.compile_version("prompt", server.base_url))
    assert result.verdict == "broken"
    assert "carries no region hashes" in str(result.error)
    assert "export_cassette(..., graph=app)" in str(result.error)
    other = vg.compile_version("prompt", server.base_url)
    with pytest.raises(ReplayError, match="carries no region hashes"):
        other.replay(load_cassette(plain), graph=same)  # other did not record it
    store.close()


def test_issue48_pytest_helper_fails_naming_the_changed_cassettes(
    server: ScriptedOpenAIServer, recorded: tuple[Path, list[Path]]
) -> None:
    paths = recorded[1][:3]
    assert_cassettes_pass(paths, vg.compile_version("base", server.base_url))
    with pytest.raises(AssertionError) as info:
        assert_cassettes_pass(paths, vg.compile_version("prompt", server.base_url))
    assert "r00.json: changed in regions summarize" in str(info.value)
    # Accepting changes in the edited region passes.
    results = assert_cassettes_pass(
        paths, vg.compile_version("prompt", server.base_url), allow_changed={"summarize"}
    )
    assert [r.verdict for r in results] == ["changed"] * 3


def _cli(server: ScriptedOpenAIServer, variant: str, *args: str) -> Any:
    env = {"VERSIONGRAPH_VARIANT": variant, "OPENAI_BASE_URL": server.base_url}
    return CliRunner().invoke(cli, ["check", *args], env=env, catch_exceptions=False)


def test_issue48_stargraph_check_in_parallel_with_json_junit_and_exit_codes(
    server: ScriptedOpenAIServer, recorded: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    paths = [str(p) for p in recorded[1]]
    before = len(server.chat_requests)
    same = _cli(server, "base", *paths, "--graph", "versiongraph:current", "-j", "2")
    assert same.exit_code == 0, same.output
    assert len(server.chat_requests) == before
    assert f"{RUNS} cassettes: {RUNS} identical, 0 changed, 0 broken" in same.output

    out_json, out_xml = tmp_path / "check.json", tmp_path / "check.xml"
    changed = _cli(
        server,
        "prompt",
        *paths,
        "--graph",
        "versiongraph:current",
        "-j",
        "2",
        "--json",
        str(out_json),
        "--junit",
        str(out_xml),
        "--score",
        "versiongraph:summary_length",
    )
    assert changed.exit_code == 1, changed.output
    assert len(server.chat_requests) == before + RUNS  # summarize only
    results = json.loads(out_json.read_text())
    assert [r["verdict"] for r in results] == ["changed"] * RUNS
    assert {tuple(r["changed_regions"]) for r in results} == {("summarize",)}
    assert all(r["score"] > 0 for r in results)
    suite = ET.fromstring(out_xml.read_text())
    assert suite.get("tests") == str(RUNS)
    assert suite.get("failures") == str(RUNS)
    failure = suite.find("testcase/failure")
    assert failure is not None
    assert failure.get("message") == "changed in regions summarize"

    offline = _cli(server, "prompt", paths[0], "--graph", "versiongraph:current", "--offline")
    assert offline.exit_code == 3
    assert "broken" in offline.output
    assert "region 'summarize'" in offline.output


def test_issue48_stargraph_check_record_refreshes_accepted_cassettes(
    server: ScriptedOpenAIServer, recorded: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    copies = []
    for path in recorded[1][:2]:
        copy = tmp_path / path.name
        copy.write_bytes(path.read_bytes())
        copies.append(str(copy))
    args = ("--graph", "versiongraph:current", "-j", "1")
    refreshed = _cli(server, "prompt", *copies, *args, "--record")
    assert refreshed.exit_code == 0, refreshed.output
    assert "recorded again" in refreshed.output
    again = _cli(server, "prompt", *copies, *args)
    assert again.exit_code == 0, again.output
    assert "2 identical" in again.output
    # Recorded by the new version: against the old one, it is the old prompt that changed.
    back = _cli(server, "base", *copies, *args)
    assert back.exit_code == 1
    assert "(regions: summarize)" in back.output


def test_issue48_the_golden_runs_still_check_identical_against_their_graphs() -> None:
    # Cassettes from before region hashes: checked against the graph that made them.
    golden = HERE.parent / "golden"
    sys.path.insert(0, str(golden))
    import golden_graphs

    for entry in golden_graphs.GOLDENS:
        if entry.name == "react":
            continue  # needs its tool arbiter as a service: covered by tests/test_golden.py
        app: CompiledGraph[Any] = golden_graphs.compile_golden(entry)
        result = check_cassette(golden / f"{entry.name}.json", app, live=False)
        assert result.verdict == "identical", result


def test_issue48_stargraph_replay_against_another_version(
    server: ScriptedOpenAIServer, recorded: tuple[Path, list[Path]]
) -> None:
    env = {"VERSIONGRAPH_VARIANT": "prompt", "OPENAI_BASE_URL": server.base_url}
    cassette = str(recorded[1][5])
    args = ["replay", "--cassette", cassette, "--graph", "versiongraph:current"]
    offline = CliRunner().invoke(cli, args, env=env, catch_exceptions=False)
    assert offline.exit_code == 1
    assert "region 'summarize' (region changed) must run its new code" in offline.output
    before = len(server.chat_requests)
    live = CliRunner().invoke(cli, [*args, "--live"], env=env, catch_exceptions=False)
    assert len(server.chat_requests) == before + 1
    assert live.exit_code == 1
    assert "diverged    summarize [changed] (region changed): 0 served, 1 run" in live.output
    assert "served      draft: 3 served, 0 run" in live.output
    assert 'final state: summary: A = "re: Summarize: re: Find facts about topic05' in live.output
    assert "changed regions: summarize" in live.output
    # A stored run, its recording graph's regions from the IR its store keeps.
    env["VERSIONGRAPH_VARIANT"] = "unrelated"
    stored = CliRunner().invoke(
        cli,
        ["replay", "r05", "--db", str(recorded[0]), "--graph", "versiongraph:current"],
        env=env,
        catch_exceptions=False,
    )
    assert stored.exit_code == 1, stored.output
    assert "re-executed audit [changed] (new region): 0 served, 1 run" in stored.output
    assert "served      research: 1 served, 0 run" in stored.output
    assert len(server.chat_requests) == before + 1
    # A changed skill: its child run, read from the store, serves the skill's lookup.
    env["VERSIONGRAPH_VARIANT"] = "tail"
    inside = CliRunner().invoke(
        cli,
        ["replay", "r06", "--db", str(recorded[0]), "--graph", "versiongraph:current", "--live"],
        env=env,
        catch_exceptions=False,
    )
    assert inside.exit_code == 1, inside.output
    assert "served      research/lookup: 1 served, 0 run" in inside.output
    assert "diverged    research/condense [changed] (region changed): 0 served, 1 run" in (
        inside.output
    )
    assert len(server.chat_requests) == before + 2  # summarize only


def test_issue48_child_run_ids_survive_an_unrelated_node_added_upstream(
    server: ScriptedOpenAIServer,
) -> None:
    # The skill's child run is named by its site and its node's own step count: the node
    # added before everything shifts every global step, not the child run's id.
    ids = {}
    for variant in ("base", "unrelated"):
        store = MemoryStore()
        app = vg.compile_version(variant, server.base_url, store=store)
        app.invoke({"topic": "ids"}, run_id="r")
        ids[variant] = sorted(r.run_id for r in store.list_runs() if r.run_id != "r")
        app.close()
    assert ids["base"] == ids["unrelated"] == ["r::research@1.0"]


def test_issue48_a_skill_run_again_gets_its_next_position_and_resumes_there(
    tmp_path: Path,
) -> None:
    # The skill runs three times in one run (a loop back through it): @1.0, @2.0, @3.0. A
    # crash inside the second resumes that same child run (the resumed parent counts its
    # node's steps from its history), not a new one.
    app = _looping_skill_graph().compile(store=SqliteStore(tmp_path / "loop.db"))
    FAIL_AT.append(2)
    with pytest.raises(NodeError):
        app.invoke({}, run_id="loop")
    store = app.store
    assert store is not None
    children = sorted(r.run_id for r in store.list_runs() if r.run_id != "loop")
    assert children == ["loop::inc@1.0", "loop::inc@2.0"]
    assert app.get_run("loop::inc@2.0").status == "failed"
    FAIL_AT.clear()
    final = app.resume("loop")
    assert final.rounds == 3
    assert sorted(r.run_id for r in store.list_runs() if r.run_id != "loop") == [
        "loop::inc@1.0",
        "loop::inc@2.0",
        "loop::inc@3.0",
    ]
    assert app.get_run("loop::inc@2.0").status == "done"  # resumed, not made again
    app.close()


class Rounds(BaseModel):
    rounds: int = 0


FAIL_AT: list[int] = []


def bump(state: Rounds) -> dict[str, Any]:
    if state.rounds + 1 in FAIL_AT:
        raise RuntimeError(f"round {state.rounds + 1} fails")
    return {"rounds": state.rounds + 1}


def warm(state: Rounds) -> dict[str, Any]:
    return {}


def again(state: Rounds) -> str:
    return "inc" if state.rounds < 3 else END


def _looping_skill_graph() -> Graph[Rounds]:
    inner = Graph("inc", state=Rounds).with_node("bump", bump).with_edge(START, "bump")
    skill = Skill.from_graph(
        inner.with_edge("bump", END),
        name="inc",
        version="1.0.0",
        kind=SkillKind.WORKFLOW,
        description="adds one round",
        state_schema=Rounds,
    )
    # A node before the loop: the skill's steps are 2, 3, 4 of the run, its positions 1, 2, 3.
    return (
        Graph("loop", state=Rounds)
        .with_node("warm", warm)
        .with_node(SubgraphNode.from_skill(skill, site="inc"))
        .with_edge(START, "warm")
        .with_edge("warm", "inc")
        .with_conditional_edges("inc", again, ["inc", END])
    )


def test_issue48_a_forks_cassette_takes_the_child_runs_of_its_copied_steps_only(
    tmp_path: Path,
) -> None:
    # Forked after the skill's first step: the fork's cassette carries the parent's first
    # child run (a copied step made it) and the fork's own later ones, not the parent's.
    store = SqliteStore(tmp_path / "fork.db")
    app = _looping_skill_graph().compile(store=store)
    final = app.invoke({}, run_id="p")
    fork = app.fork("p", 2, new_run_id="p-fork")  # step 2 ran the skill for the first time
    assert app.resume(fork) == final
    cassette = load_cassette(export_cassette(store, fork, tmp_path / "fork.json"))
    assert [c.run.run_id for c in cassette.children] == [
        "p-fork::inc@2.0",
        "p-fork::inc@3.0",
        "p::inc@1.0",
    ]
    assert _looping_skill_graph().compile().replay(cassette) == final
    store.close()
