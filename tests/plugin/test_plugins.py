"""Plugins (pluggy) and the one registry: E3, A7/A8, B4, every hook called by the engine."""

from __future__ import annotations

import logging
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stargraph.errors import PluginLoadError, RegistryError, ToolNotAllowedError
from stargraph.graph import END, START, Graph
from stargraph.llm import OpenAIChatModel
from stargraph.plugin import (
    PluginSource,
    Registry,
    get_plugin_manager,
    hookimpl,
    load_entry_points,
)
from stargraph.runtime import RunFinished
from stargraph.skills import Skill
from stargraph.tools import ToolCall

PLUGIN = '''
from typing import Annotated
from pydantic import BaseModel
from stargraph import fathom, reducers
from stargraph.graph import END, START, Graph
from stargraph.plugin import hookimpl
from stargraph.skills import Skill
from stargraph.tools import tool


class {cls}State(BaseModel):
    log: Annotated[list[str], reducers.append] = []
    done: Annotated[bool, fathom.Fact()] = False


def greet(state: {cls}State) -> dict:
    return {{"log": ["hello from {dist}"], "done": True}}


@tool(id="{ns}.shout@1.0.0")
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


SKILL = Skill.from_graph(
    Graph("greeter", state={cls}State).with_node("greet", greet)
    .with_edge(START, "greet").with_edge("greet", END),
    name="{skill}", version="1.0.0", kind="workflow", description="says hello",
    state_schema={cls}State,
)


@hookimpl
def register_skills(register):
    register(SKILL)


@hookimpl
def register_tools(register):
    register(shout)


@hookimpl
def register_rule_packs(register):
    register(fathom.RulePack.from_spec({{"id": "{ns}-stop", "version": "1", "rules": [
        {{"name": "stop", "when": [{{"state.done": True}}], "then": {{"halt": "greeted"}}}}]}}))
'''


def install(root: Path, dist: str, *, skill: str, ns: str) -> None:
    """An installed distribution, as importlib.metadata sees one: a package + dist-info."""
    module = dist.replace("-", "_")
    (root / module).mkdir(parents=True)
    source = PLUGIN.format(cls=module.title().replace("_", ""), dist=dist, skill=skill, ns=ns)
    (root / module / "__init__.py").write_text(textwrap.dedent(source))
    info = root / f"{module}-1.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0.0\n")
    (info / "entry_points.txt").write_text(f"[stargraph]\n{module} = {module}\n")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith(("acme_", "other_", "broken_"))]:
        del sys.modules[name]


def test_installed_plugin_contributes_a_skill_a_tool_and_a_rule_pack(
    site: Path, tmp_path: Path
) -> None:
    install(site, "acme-greeter", skill="greeter", ns="acme")
    pm = get_plugin_manager()
    registry = Registry.build(pm)
    assert registry.provider("skill", "greeter") == "acme-greeter"
    assert "acme.shout@1.0.0" in registry.tools
    assert registry.provider("tool", "choir.fs.read@1.0.0") == "stargraph"
    # A graph uses all three: the skill mounted, the rule pack halting, the tool dispatched.
    from stargraph.nodes import SubgraphNode

    skill: Skill = registry.skill("greeter")
    state = skill.state_schema
    graph = (
        Graph("host", state=state)
        .with_node(SubgraphNode.from_skill(skill, site="greet"))
        .with_edge(START, "greet")
        .with_edge("greet", END)
        .with_rules(registry.rule_packs["acme-stop"])
    )
    events = list(graph.compile().stream({}))
    finished = events[-1]
    assert isinstance(finished, RunFinished)
    assert finished.state["log"] == ["hello from acme-greeter"]
    assert finished.stopped_by == "acme-stop/stop"
    arbiter = registry.arbiter(tmp_path)
    result = arbiter.dispatch(ToolCall(tool="acme.shout@1.0.0", args={"text": "hi"}))
    assert result.payload == "HI"
    arbiter.close()


def test_two_plugins_registering_one_skill_fail_naming_both(site: Path) -> None:
    install(site, "acme-greeter", skill="greeter", ns="acme")
    install(site, "other-greeter", skill="greeter", ns="other")
    with pytest.raises(RegistryError) as info:
        Registry.build(get_plugin_manager())
    # Issue 25 item 12: the clash names both entry points, not just the distributions.
    assert isinstance(info.value, PluginLoadError)
    assert info.value.plugins == ("acme_greeter", "other_greeter")
    assert str(info.value) == (
        "plugin registry is invalid: skills/greeter: skill 'greeter' is registered twice in "
        "scope 'plugin', by 'acme-greeter' and 'other-greeter'; "
        "entry point 'acme_greeter = acme_greeter' (group 'stargraph') of distribution "
        "acme-greeter 1.0.0; "
        "entry point 'other_greeter = other_greeter' (group 'stargraph') of distribution "
        "other-greeter 1.0.0 "
        "(fix: uninstall one of the plugins or rename its skill, or skip one with "
        "STARGRAPH_DISABLE_PLUGINS=acme_greeter or other_greeter)"
    )


class Recorder:
    """A plugin implementing every observer hook."""

    def __init__(self, deny: str | None = None) -> None:
        self.calls: list[str] = []
        self.deny = deny

    @hookimpl
    def before_tool_call(self, call: Any) -> None:
        self.calls.append(f"before:{call.tool}")

    @hookimpl
    def after_tool_call(self, call: Any, result: Any, error: Any) -> None:
        self.calls.append(f"after:{call.tool}:{'error' if error else result.status}")

    @hookimpl
    def authorize_action(self, call: Any) -> bool | None:
        self.calls.append(f"authorize:{call.tool}")
        return False if call.tool == self.deny else None

    @hookimpl
    def on_event(self, event: Any) -> None:
        self.calls.append(f"event:{event.kind}")

    @hookimpl
    def register_nodes(self, register: Any) -> None:
        self.calls.append("register_nodes")
        register("rec.node", lambda state: {"log": ["from a registered node"]})

    @hookimpl
    def register_skills(self, register: Any) -> None:
        self.calls.append("register_skills")

    @hookimpl
    def register_tools(self, register: Any) -> None:
        self.calls.append("register_tools")

    @hookimpl
    def register_rule_packs(self, register: Any) -> None:
        self.calls.append("register_rule_packs")

    @hookimpl
    def register_checkpoint_stores(self, register: Any) -> None:
        self.calls.append("register_checkpoint_stores")

    @hookimpl
    def register_models(self, register: Any) -> None:
        self.calls.append("register_models")


def test_every_declared_hook_is_called_by_the_engine(tmp_path: Path) -> None:
    from stargraph.plugin import hookspecs

    declared = sorted(
        name for name in dir(hookspecs) if hasattr(getattr(hookspecs, name), "stargraph_spec")
    )
    recorder = Recorder(deny="choir.exec@1.0.0")
    pm = get_plugin_manager(plugins=[recorder], entry_points=False)
    registry = Registry.build(pm)
    arbiter = registry.arbiter(tmp_path)
    (tmp_path / "a.txt").write_text("x")
    arbiter.dispatch(ToolCall(tool="choir.fs.read@1.0.0", args={"path": "a.txt"}))
    with pytest.raises(ToolNotAllowedError):
        arbiter.dispatch(ToolCall(tool="choir.exec@1.0.0", args={"command": "true"}))
    arbiter.close()
    from tests.runtime.test_rules_runtime import Loop

    graph = Graph("g", state=Loop, impls=registry.nodes).with_node(
        "n", registry.nodes["rec.node"], ref="rec.node"
    )
    graph = graph.with_edge(START, "n").with_edge("n", END)
    assert graph.compile(plugins=pm).invoke({}).log == ["from a registered node"]
    registry.store(f"sqlite:{tmp_path / 'x.db'}").close()
    model = registry.model("openai", model="m", base_url="http://127.0.0.1:9/v1", api_key="k")
    assert isinstance(model, OpenAIChatModel)
    model.close()
    called = {c.split(":")[0] for c in recorder.calls}
    aliases = {
        "before": "before_tool_call",
        "after": "after_tool_call",
        "authorize": "authorize_action",
        "event": "on_event",
    }
    called = {aliases.get(c, c) for c in called}
    assert called == set(declared), sorted(set(declared) - called)
    assert "before:choir.fs.read@1.0.0" in recorder.calls
    assert "after:choir.exec@1.0.0:error" in recorder.calls
    assert "event:run_finished" in recorder.calls


def test_registry_is_frozen_and_versions_come_from_approval() -> None:
    registry = Registry.build(get_plugin_manager(entry_points=False))
    with pytest.raises(RegistryError, match="registry version 1 is frozen"):
        registry.register(object())
    from tests.skills.test_skills import make_skill

    newer = registry.with_skill(make_skill())
    assert newer.version == 2
    assert "thinker" in newer.skills
    assert "thinker" not in registry.skills  # running graphs keep the old version


def _json_skill(path: Path) -> Skill:
    import json

    from tests.skills.test_skills import make_skill

    data = json.loads(path.read_text())
    return make_skill(name=data["name"], description=data.get("description", ""))


def test_agent_scope_overrides_global_scope_and_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "global").mkdir()
    (tmp_path / "agent").mkdir()
    (tmp_path / "global" / "s.json").write_text('{"name": "thinker", "description": "global"}')
    (tmp_path / "agent" / "s.json").write_text('{"name": "thinker", "description": "agent"}')
    with caplog.at_level(logging.INFO, logger="stargraph.registry"):
        registry = Registry.build(
            get_plugin_manager(entry_points=False),
            global_dir=tmp_path / "global",
            agent_dir=tmp_path / "agent",
            skill_loaders={"*.json": _json_skill},
        )
    assert registry.skill("thinker").description == "agent"
    assert "overrides the one from" in caplog.text


def test_strict_and_lenient_directory_scans(tmp_path: Path) -> None:
    for i in range(5):
        (tmp_path / f"ok{i}.json").write_text(f'{{"name": "skill-{i}"}}')
    (tmp_path / "bad.json").write_text('{"name": "Not A Slug"}')
    with pytest.raises(RegistryError, match=r"bad\.json"):
        Registry.build(
            get_plugin_manager(entry_points=False),
            agent_dir=tmp_path,
            skill_loaders={"*.json": _json_skill},
        )
    lenient = Registry.build(
        get_plugin_manager(entry_points=False),
        agent_dir=tmp_path,
        skill_loaders={"*.json": _json_skill},
        strict=False,
    )
    assert (lenient.report.loaded, len(lenient.report.skipped), lenient.report.total_on_disk) == (
        5,
        1,
        6,
    )


def test_unknown_names_are_typed_errors() -> None:
    registry = Registry.build(get_plugin_manager(entry_points=False))
    with pytest.raises(RegistryError, match="no skill 'ghost'"):
        registry.skill("ghost")
    with pytest.raises(RegistryError, match="no checkpoint store for scheme 'ftp'"):
        registry.store("ftp://x")
    # the termination pack is a built-in
    assert "termination" in registry.rule_packs


# --------------------------------------------------------------------------- broken plugins


def install_source(
    root: Path, dist: str, source: str, *, module: str | None = None, entry: str | None = None
) -> None:
    """A distribution whose one entry point ``entry = module`` runs ``source`` on import."""
    module = module or dist.replace("-", "_")
    (root / module).mkdir(parents=True)
    (root / module / "__init__.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-2.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 2.0.1\n")
    (info / "entry_points.txt").write_text(f"[stargraph]\n{entry or module} = {module}\n")


def _source(dist: str, module: str, entry: str | None = None) -> PluginSource:
    return PluginSource("stargraph", entry or module, module, dist, "2.0.1")


BROKEN_IMPORT = "raise ImportError('no lxml here')\n"
BROKEN_HOOK = """
from stargraph.plugin import hookimpl

@hookimpl
def register_tools(register):
    register(object())  # not a tool: has no .spec

@hookimpl
def register_skills(register):
    raise RuntimeError("skills database is down")
"""
# register_skills is valid; register_tools names an argument the hook spec does not have,
# so pluggy refuses the plugin half-way through registering it.
BROKEN_REGISTER = """
from stargraph.plugin import hookimpl

@hookimpl
def register_skills(register):
    pass

@hookimpl
def register_tools(register, registry):
    pass
"""


def test_a_plugin_that_fails_to_import_names_its_entry_point_and_distribution(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STARGRAPH_DISABLE_PLUGINS", raising=False)
    install(site, "acme-greeter", skill="greeter", ns="acme")
    install_source(site, "broken-lxml", BROKEN_IMPORT)
    with pytest.raises(PluginLoadError) as info:
        get_plugin_manager()
    assert info.value.plugins == ("broken_lxml",)
    assert str(info.value) == (
        "plugin setup is invalid: plugin broken_lxml: entry point 'broken_lxml = broken_lxml' "
        "(group 'stargraph') of distribution broken-lxml 2.0.1 failed to import: "
        "ImportError: no lxml here (fix: upgrade or uninstall broken-lxml (pip install -U "
        "broken-lxml / pip uninstall broken-lxml), or skip it with "
        "STARGRAPH_DISABLE_PLUGINS=broken_lxml)"
    )
    # The healthy plugin still loads when the broken one is looked at apart...
    pm = get_plugin_manager(entry_points=False)
    load = load_entry_points(pm)
    assert [s.name for s in load.loaded] == ["acme_greeter"]
    assert [(f.plugin, f.stage, f.source) for f in load.failed] == [
        ("broken_lxml", "import", _source("broken-lxml", "broken_lxml"))
    ]
    assert "greeter" in Registry.build(pm).skills
    # ... and skipping it, by entry point or distribution name, is the documented way out.
    for skip in ("broken_lxml", "broken-lxml", "other, broken-lxml"):
        monkeypatch.setenv("STARGRAPH_DISABLE_PLUGINS", skip)
        assert "greeter" in Registry.build(get_plugin_manager()).skills
    monkeypatch.setenv("STARGRAPH_DISABLE_PLUGINS", "*")
    assert "greeter" not in Registry.build(get_plugin_manager()).skills
    assert "greeter" in Registry.build(get_plugin_manager(disabled=["broken_lxml"])).skills


def test_a_plugin_that_exits_or_cannot_print_its_error_is_still_named(site: Path) -> None:
    install_source(site, "broken-exit", "import sys\nsys.exit(3)\n")
    install_source(
        site,
        "broken-str",
        """
        class Weird(Exception):
            def __str__(self):
                raise RuntimeError("no")

        raise Weird()
        """,
    )
    load = load_entry_points(get_plugin_manager(entry_points=False))
    assert [(f.plugin, f.error) for f in load.failed] == [
        ("broken_exit", "SystemExit: 3"),
        ("broken_str", "Weird: <the error message could not be rendered>"),
    ]


def test_a_plugin_whose_hooks_raise_names_its_entry_point_and_distribution(site: Path) -> None:
    install(site, "acme-greeter", skill="greeter", ns="acme")
    install_source(site, "broken-hooks", BROKEN_HOOK)
    pm = get_plugin_manager()  # importing and registering work; the hooks fail when called
    with pytest.raises(PluginLoadError) as info:
        Registry.build(pm)
    assert info.value.plugins == ("broken_hooks",)
    where = (
        "entry point 'broken_hooks = broken_hooks' (group 'stargraph') of distribution "
        "broken-hooks 2.0.1"
    )
    fix = "(fix: upgrade or uninstall broken-hooks"
    assert [p.render().split(" (pip")[0] for p in info.value.problems] == [
        f"plugin broken_hooks: {where} failed: its hook register_skills raised "
        f"RuntimeError: skills database is down {fix}",
        f"plugin broken_hooks: {where} failed: its hook register_tools raised "
        "AttributeError: 'object' object has no attribute 'spec' " + fix,
    ]


def test_a_plugin_pluggy_refuses_is_named_and_left_out_entirely(site: Path) -> None:
    install(site, "acme-greeter", skill="greeter", ns="acme")
    install_source(site, "broken-register", BROKEN_REGISTER)
    pm = get_plugin_manager(entry_points=False)
    load = load_entry_points(pm)
    [failure] = load.failed
    assert (failure.plugin, failure.stage) == ("broken_register", "register")
    assert "register_tools" in failure.error
    assert "registry" in failure.error  # pluggy names the argument the spec lacks
    assert (
        failure.problem()
        .render()
        .startswith(
            "plugin broken_register: entry point 'broken_register = broken_register' (group "
            "'stargraph') of distribution broken-register 2.0.1 failed to register: "
        )
    )
    # The half-registered plugin is gone: none of its hooks is left behind.
    assert not pm.has_plugin("broken_register")
    plugins = {impl.plugin_name for impl in pm.hook.register_skills.get_hookimpls()}
    assert plugins == {"stargraph.builtins", "acme_greeter"}
    with pytest.raises(PluginLoadError, match="broken_register"):
        get_plugin_manager()


def test_two_distributions_with_one_entry_point_name_are_a_named_conflict(site: Path) -> None:
    install_source(site, "broken-one", "", entry="shared")
    install_source(site, "broken-two", "", entry="shared")
    install_source(site, "broken-three", "", entry="stargraph.builtins")
    with pytest.raises(PluginLoadError) as info:
        get_plugin_manager()
    text = str(info.value)
    assert sorted(info.value.plugins) == ["shared", "stargraph.builtins"]
    # Which of the two 'shared' loads first is the order of sys.path / the directory listing;
    # the other one is refused, naming both.
    one = _source("broken-one", "broken_one", "shared").describe()
    two = _source("broken-two", "broken_two", "shared").describe()
    assert (
        f"{two} cannot be loaded: its name 'shared' is already taken by {one}; entry point "
        "names must be unique" in text
    ) != (
        f"{one} cannot be loaded: its name 'shared' is already taken by {two}; entry point "
        "names must be unique" in text
    )
    assert (
        "entry point 'stargraph.builtins = broken_three' (group 'stargraph') of distribution "
        "broken-three 2.0.1 cannot be loaded: its name 'stargraph.builtins' is already taken by "
        "plugin 'stargraph.builtins', registered before; entry point names must be unique" in text
    )
