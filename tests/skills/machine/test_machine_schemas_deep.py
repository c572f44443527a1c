"""Deep and shared spawn graphs: ``SchemaLibrary.bound`` is linear, nothing recurses per level.

Issue 25 item 12: ``bound()`` was exponential in spawn depth when schemas share children
(5.4 s at depth 20) and a 1,500-deep chain raised ``RecursionError``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from stargraph.errors import SkillValidationError
from stargraph.llm import ScriptedChatModel
from stargraph.runtime import RunContext
from stargraph.skills import NestingProfile
from stargraph.skills.machine import Frame, SchemaLibrary, SchemaRunState, SchemaSession
from stargraph.skills.machine._schemas import _Turn
from stargraph.tools import Arbiter, ToolRegistry

DEEP = NestingProfile(name="deep", max_depth=100_000)
"""These chains are far deeper than the default nesting profile allows (16 levels): the
point here is that nothing recurses per level, so they are built under a deep profile."""


def deep(docs: list[dict[str, Any]]) -> SchemaLibrary:
    return SchemaLibrary.build(docs, nesting=DEEP)


def chain(depth: int, *, fan: int = 1, max_steps: int = 1) -> list[dict[str, Any]]:
    """Schemas ``m0 .. m<depth>``: each has ``fan`` states that all spawn the next one."""
    docs = []
    for i in range(depth + 1):
        states: dict[str, Any] = {"done": {"terminal": True}}
        if i < depth:
            spawn = {"schema": f"m{i + 1}", "exits": {"done": "ok"}}
            for k in range(fan):
                states[f"s{k}"] = {"spawns": [spawn], "transitions": [{"on": "ok", "to": "done"}]}
            states["start"] = {"transitions": [{"on": f"go{k}", "to": f"s{k}"} for k in range(fan)]}
        else:
            states["start"] = {"transitions": [{"on": "ok", "to": "done"}]}
        docs.append(
            {"name": f"m{i}", "initial_state": "start", "max_steps": max_steps, "states": states}
        )
    return docs


def expected_bound(depth: int, max_steps: int) -> int:
    bound = max_steps  # the innermost schema spawns nothing
    for _ in range(depth):
        bound = max_steps * (1 + bound)
    return bound


class CountingSchemas(dict[str, Any]):
    """The library's schema mapping, counting every lookup by name."""

    def __init__(self, items: dict[str, Any]) -> None:
        super().__init__(items)
        self.lookups: Counter[str] = Counter()

    def __getitem__(self, key: str) -> Any:
        self.lookups[key] += 1
        return super().__getitem__(key)


def test_bound_looks_at_each_schema_once_when_children_are_shared() -> None:
    # Every schema spawns the next from two states: 2**20 paths, 21 schemas.
    library = deep(chain(20, fan=2, max_steps=2))
    counted = SchemaLibrary.model_construct(schemas=CountingSchemas(dict(library.schemas)))
    assert counted.bound("m0") == expected_bound(20, 2)
    lookups = cast(CountingSchemas, counted.schemas).lookups
    assert lookups == Counter({f"m{i}": 1 for i in range(21)})


@pytest.mark.parametrize("depth", [1_500, 10_000])
def test_a_spawn_chain_deeper_than_the_recursion_limit_builds_and_bounds(depth: int) -> None:
    library = deep(chain(depth))
    assert library.bound("m0") == depth + 1
    assert library.bound(f"m{depth}") == 1
    # A big max_steps gives a big (exact) bound, not an overflow.
    assert deep(chain(1_500, max_steps=3)).bound("m0") == expected_bound(1_500, 3)


def test_a_deep_spawn_cycle_is_a_compile_error_naming_it() -> None:
    docs = chain(2_000)
    docs[-1]["states"]["start"]["spawns"] = [{"schema": "m1000", "exits": {"done": "ok"}}]
    with pytest.raises(SkillValidationError) as info:
        deep(docs)
    cycle = " -> ".join(f"m{i}" for i in [*range(1000, 2001), 1000])
    assert f"spawn cycle: {cycle}" in str(info.value)


def test_bound_of_an_unvalidated_library_names_cycles_and_unknown_schemas() -> None:
    # model_validate (how a node reads the library from its config) skips build's checks.
    docs = {d["name"]: d for d in chain(3)}
    docs["m3"]["states"]["start"]["spawns"] = [{"schema": "m1", "exits": {"done": "ok"}}]
    looping = SchemaLibrary.model_validate({"schemas": docs})
    with pytest.raises(SkillValidationError, match=r"spawn cycle: m1 -> m2 -> m3 -> m1"):
        looping.bound("m0")
    docs["m3"]["states"]["start"]["spawns"] = [{"schema": "ghost", "exits": {"done": "ok"}}]
    dangling = SchemaLibrary.model_validate({"schemas": docs})
    with pytest.raises(SkillValidationError, match=r"no schema 'ghost' \(spawned by 'm3'\)"):
        dangling.bound("m0")
    with pytest.raises(SkillValidationError, match=r"no schema 'nope'"):
        dangling.bound("nope")


def test_an_exit_cascades_through_a_stack_deeper_than_the_recursion_limit() -> None:
    depth = 1_500
    library = deep(chain(depth))
    config = {"root": "m0", "library": library.model_dump(mode="json", by_alias=True)}
    ctx = cast(RunContext, SimpleNamespace(config=config, node="step"))
    stack = [Frame(schema_name=f"m{i}", state="s0") for i in range(depth)]
    stack.append(Frame(schema_name=f"m{depth}", state="start"))
    turn = _Turn(SchemaRunState(stack=stack), ctx)
    # The innermost schema finishes; every parent maps 'done' to 'ok' -> its own 'done'.
    turn.move("done", "ok")
    exits = [e for e in turn.log if e["kind"] == "exit"]
    assert len(exits) == depth + 1
    assert exits[-1] == {"kind": "exit", "schema": "m0", "status": "done"}
    assert (turn.out["status"], turn.out["reason"], turn.stack) == ("exited", "done", [])


def test_a_session_over_a_chain_whose_bound_exceeds_any_step_limit_runs(tmp_path: Path) -> None:
    # max_steps 2 at each of 100 levels: the bound is about 2**101 LLM steps.
    library = deep(chain(100, max_steps=2))
    assert library.bound("m0") > 2**100
    model = ScriptedChatModel(["I will not choose."])
    with Arbiter(ToolRegistry.build(), workspace=tmp_path) as arbiter:
        session = SchemaSession(library, model=model, arbiter=arbiter, root="m0", retry_budget=0)
        final = session.send("go")
    assert (final.status, final.reason, final.llm_steps) == ("yielded", "error", 1)
