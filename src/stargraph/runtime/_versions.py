"""Replay a recorded run against another version of its graph, region by region.

A plain replay (``runtime._replay``) pins the whole graph: one changed prompt anywhere and
nothing recorded can be served. This one compares the recording graph and the new one
*region by region* - a region is one node of the graph with everything its behaviour depends
on: its IR (kind, ref, config, writes, retry ...), the source of its function, routers and
input model, and for a subgraph node the Merkle hash of the skill's whole graph (its IR and
its code) - and runs the *new* graph step by step from the recorded input:

- a task of an unchanged region is matched with the recorded task at the same position:
  the same node, the same activation of that node within the run (its 1st, 2nd ... step),
  the same task index (a ``Send`` fan-out's position). Positions are not global step
  numbers, so a node added anywhere else, which shifts every later step, moves nothing.
  When the task sees what the recorded one saw (the state's channels both versions have,
  and its ``Send`` payload), its recorded writes are served: its body does not run, no
  model is asked, nothing else happens again;
- a task of a changed or new region runs its new code. With ``live=True`` it uses the new
  graph's services (models, tools); without, any call it makes that the record would have
  to answer is refused with a :class:`~stargraph.errors.ReplayDivergenceError` naming the
  region and what it needs;
- a task of an unchanged region whose input differs (an upstream region changed what it
  sees) cannot be served by the record: it runs (``on_inputs="run"``) or the replay stops
  with a :class:`~stargraph.errors.ReplayDivergenceError` (``on_inputs="stop"``);
- a task of a changed *skill* (a subgraph node) that sees its recorded input has its child
  run replayed the same way, one level down, against the recorded child run at the same
  position (child run ids carry the node's activation, not the global step): the regions
  inside the skill, ``<node>/<inner node>``, are compared, served or run, and reported. The
  skill runs whole when that cannot be done (no child recording, no inner region hashes
  in the record, its input changed).

Nothing is written to any store. The result is a :class:`ReplayReport`: per region what
happened (served, re-executed, diverged: re-executed and wrote other than the record, or
removed), and how the final state differs from the recorded one.

A resumed run is a different matter: it continues a run of *one* graph and stays pinned to
the whole graph hash (``GraphHashMismatch``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ConfigDict

from stargraph._typed import TypedModel
from stargraph.checkpoint import JournalEntry, Recording, StepRecord, WriteRecord
from stargraph.errors import ReplayDivergenceError, ReplayError, ReplayMissError, StargraphError
from stargraph.ir import content_hash
from stargraph.runtime._changes import value_changes
from stargraph.runtime._durable import decode_writes
from stargraph.runtime._plan import ChildRunId, Plan, Task, code_hash
from stargraph.runtime._run import Run, initial_values, jsonable
from stargraph.runtime._steploop import StepLoop
from stargraph.runtime._tasks import StepOutcome, execute_sync, worker_threads
from stargraph.runtime._values import PARENT_KEY, ROUTING_KEYS, reduce_writes

__all__ = [
    "InputsPolicy",
    "RegionReport",
    "RegionStatus",
    "ReplayReport",
    "region_hashes",
    "replay_across",
]

RegionStatus = Literal["served", "re-executed", "diverged", "removed"]
"""What a replay against another graph did with a region (see :class:`RegionReport`)."""

InputsPolicy = Literal["run", "stop"]
"""What to do with an unchanged region whose input differs from the recorded one."""

_SPECIAL = frozenset({"__update__", "__migration__"})


# Region hashes by plan: reading and hashing the source of every node function costs more
# than replaying a short cassette, and a check replays many against one plan (frozen).
_REGIONS: weakref.WeakKeyDictionary[Plan, dict[str, str]] = weakref.WeakKeyDictionary()


def region_hashes(plan: Plan) -> dict[str, str]:
    """Each node's region hash: its IR without cosmetic metadata, and the source of its
    function, routers and input model (a subgraph node's function is its runner, whose code
    hash is the whole skill's: the region is Merkle over the skill's graph). The regions
    inside a skill follow, named ``<node>/<inner node>``: a replay against a graph whose
    skill changed compares them to replay the skill's child run region by region too."""
    cached = _REGIONS.get(plan)
    if cached is None:
        cached = _REGIONS[plan] = _region_hashes(plan, "")
    return dict(cached)


def _region_hashes(plan: Plan, prefix: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for node in plan.ir.nodes:
        spec = plan.specs[node.id]
        fns: list[Any] = [spec.fn, *(router.fn for router in spec.routers)]
        if spec.input is not None:
            fns.append(spec.input)
        view = node.model_dump(mode="json", exclude={"metadata"}, exclude_defaults=True)
        view["kind"] = node.kind
        out[prefix + node.id] = content_hash({"node": view, "code": code_hash(fns)})
        if spec.kind == "subgraph":
            out.update(_region_hashes(_child_loop(spec).plan, f"{prefix}{node.id}/"))
    return out


def _child_loop(spec: Any) -> StepLoop:
    """The step loop of a subgraph node's child graph (its ``fn`` is its runner)."""
    loop: StepLoop = spec.fn.child.steploop
    return loop


def _inside(regions: Mapping[str, str], node: str) -> dict[str, str]:
    """The regions inside subgraph node ``node``, named as its child graph names them."""
    prefix = node + "/"
    return {k[len(prefix) :]: v for k, v in regions.items() if k.startswith(prefix)}


class RegionReport(TypedModel):
    """What a replay against another graph version did with one region (node).

    ``status``: ``served`` - unchanged, every task served from the record; ``re-executed`` -
    its new code ran (``reason`` says why: the region changed, is new, its inputs changed,
    or the record has no task at that position) and wrote what the record holds, or the
    record has nothing to compare with; ``diverged`` - it ran and wrote other than the
    record; ``removed`` - the record ran it but the new graph has no such node (or never
    scheduled it). ``changed``: its region hash differs from the recording graph's (or one
    side lacks it)."""

    typed_error = ReplayError

    model_config = ConfigDict(frozen=True)

    region: str
    status: RegionStatus
    changed: bool
    reason: str = ""
    served: int = 0
    executed: int = 0
    recorded_hash: str | None = None
    hash: str | None = None


class ReplayReport(TypedModel):
    """The result of replaying run ``run_id`` against another graph version
    (``CompiledGraph.replay(source, graph=other)``): per region what happened, the final
    state reached and how it differs from the recorded final state (``changes``, one line
    per path, empty when equal)."""

    typed_error = ReplayError

    model_config = ConfigDict(frozen=True)

    run_id: str
    recorded_graph_hash: str
    graph_hash: str
    regions: tuple[RegionReport, ...]
    final: dict[str, Any]
    recorded_final: dict[str, Any]
    changes: tuple[str, ...] = ()

    @property
    def identical(self) -> bool:
        """Whether the new graph reproduced the record: no region diverged or was removed,
        and the final state is the recorded one."""
        return not self.changes and all(r.status in ("served", "re-executed") for r in self.regions)

    @property
    def changed_regions(self) -> tuple[str, ...]:
        """The regions whose hash differs between the versions and that the run reached
        (recorded or re-executed), in name order."""
        return tuple(
            r.region for r in self.regions if r.changed and (r.executed or r.status == "removed")
        )

    @property
    def served_regions(self) -> tuple[str, ...]:
        """The regions every task of which was served from the record."""
        return tuple(r.region for r in self.regions if r.status == "served")

    def region(self, name: str) -> RegionReport:
        """The report of region ``name``."""
        for report in self.regions:
            if report.region == name:
                return report
        raise ReplayError(
            f"replay report of run {self.run_id!r} has no region {name!r}; its regions are "
            f"{', '.join(r.region for r in self.regions)}"
        )


@dataclass(slots=True)
class _Recorded:
    """One recorded task: where it ran, what it saw and wrote, and its calls."""

    step: int
    write: WriteRecord
    payload: dict[str, Any] | None
    calls: tuple[JournalEntry, ...]


@dataclass(slots=True)
class _Tally:
    served: int = 0
    executed: int = 0
    diverged: bool = False
    reasons: dict[str, None] = field(default_factory=dict)


def _positions(recording: Recording) -> dict[tuple[str, int, int], _Recorded]:
    """Every recorded task by position: (node, its activation within the run, task index)."""
    out: dict[tuple[str, int, int], _Recorded] = {}
    seen: dict[str, int] = {}
    previous: StepRecord | None = None
    for record in sorted(recording.steps, key=lambda s: s.step):
        if record.step > 0 and not (
            record.writes and all(w.node in _SPECIAL for w in record.writes)
        ):
            payloads = (
                {} if previous is None else {(t.node, t.index): t.payload for t in previous.next}
            )
            calls: dict[tuple[str, int], list[JournalEntry]] = {}
            for entry in record.calls:
                calls.setdefault((entry.node, entry.index), []).append(entry)
            for node in sorted({w.node for w in record.writes}):
                activation = seen.get(node, 0)
                seen[node] = activation + 1
                for write in record.writes:
                    if write.node == node:
                        out[(node, activation, write.index)] = _Recorded(
                            record.step,
                            write,
                            payloads.get((node, write.index)),
                            tuple(calls.get((node, write.index), ())),
                        )
        previous = record
    return out


def _recorded_states(plan: Plan, recording: Recording) -> dict[int, dict[str, Any]]:
    """The recorded run's channel values after each step, as JSON, for the channels the new
    graph has (folded through the new graph's reducers from the recorded input)."""
    channels = plan.channels
    run_id = recording.run.run_id
    steps = sorted(recording.steps, key=lambda s: s.step)
    first = steps[0] if steps else None
    if first is None or first.step != 0 or first.snapshot is None:
        raise ReplayError(
            f"recording of run {run_id!r} has no input snapshot at step 0; it cannot be "
            "replayed against another graph",
            run_id=run_id,
        )
    known = {k: v for k, v in first.snapshot.items() if k in channels}
    values = decode_writes(channels, run_id, 0, known)
    out = {0: jsonable(channels, values)}
    for record in steps[1:]:
        for write in sorted(record.writes, key=lambda w: (w.node, w.index)):
            raw = {k: v for k, v in write.writes.items() if k in channels and k not in ROUTING_KEYS}
            if raw:
                reduce_writes(channels, values, decode_writes(channels, run_id, record.step, raw))
        out[record.step] = jsonable(channels, values)
    return out


class VersionRunner:
    """The task runner of a replay against another graph version (see the module
    docstring): serves the tasks of unchanged regions that see what they saw, runs the
    others, and tallies what happened per region."""

    def __init__(
        self,
        recording: Recording,
        plan: Plan,
        recorded_regions: Mapping[str, str],
        *,
        live: bool,
        on_inputs: InputsPolicy,
        children: Callable[[str], Recording | None] | None = None,
    ) -> None:
        self.run_id = recording.run.run_id
        # Where the recordings of child runs come from (a cassette's children, a store):
        # a changed skill whose input is unchanged replays its child run region by region.
        self.children = children
        self.inner: list[RegionReport] = []
        self.positions = _positions(recording)
        self.states = _recorded_states(plan, recording)
        self.old = recorded_regions
        self.new = region_hashes(plan)
        self.live = live
        self.on_inputs = on_inputs
        self.activations: dict[str, int] = {}
        self.tally: dict[str, _Tally] = {}
        self.matched: set[tuple[str, int, int]] = set()

    def _same_input(self, run: Run, task: Task, recorded: _Recorded) -> bool:
        channels = run.plan.channels
        before = self.states.get(recorded.step - 1)
        if before is None:
            return False
        now = jsonable(channels, {k: run.values[k] for k in before if k in run.values})
        if now != {k: before[k] for k in now}:
            return False
        # A payload is stored as it was sent (JSON data already, see ``task_records``).
        payload = dict(task.payload) if task.payload else None
        return payload == (recorded.payload or None)

    def run_step(self, run: Run, tasks: Sequence[Task]) -> StepOutcome:
        """Run step ``run.step``'s ``tasks``: serve what the record can, run the rest."""
        channels = run.plan.channels
        served: dict[tuple[str, int], dict[str, Any]] = {}
        running: list[tuple[Task, _Recorded | None, str]] = []
        step_nodes = {t.node for t in tasks}
        for task in tasks:
            node = task.node
            position = (node, self.activations.get(node, 0), task.index)
            recorded = self.positions.get(position)
            if recorded is not None:
                self.matched.add(position)
            tally = self.tally.setdefault(node, _Tally())
            if node not in self.old:
                reason = "new region"
            elif self.old[node] != self.new[node]:
                reason = "region changed"
                inside = self._replay_inside(run, task, position, recorded)
                if inside is not None:
                    served[task.key] = inside
                    tally.executed += 1
                    tally.reasons["region changed; replayed region by region inside"] = None
                    assert recorded is not None
                    if jsonable(channels, inside) != recorded.write.writes:
                        tally.diverged = True
                    continue
            elif recorded is None:
                reason = "the record has no task at this position"
            elif not self._same_input(run, task, recorded):
                reason = "its inputs changed upstream"
                if self.on_inputs == "stop":
                    raise ReplayDivergenceError(
                        f"replay of run {self.run_id!r} against another graph version: region "
                        f"{node!r} is unchanged, but at its activation {position[1]} (task "
                        f"{task.index}) it sees other input than the recorded run (an upstream "
                        "region changed), so the record cannot serve it; replay with "
                        "on_inputs='run' to run it with its new input",
                        **run.where(node),
                    )
            else:
                served[task.key] = decode_writes(
                    channels, self.run_id, recorded.step, recorded.write.writes
                )
                tally.served += 1
                continue
            tally.executed += 1
            tally.reasons[reason] = None
            running.append((task, recorded, reason))
        for node in step_nodes:
            self.activations[node] = self.activations.get(node, 0) + 1
        run.done = served
        # Offline, a call of a re-executed task has no record to come from: an empty
        # replay journal refuses it (a miss), which becomes the divergence below.
        run.replay_calls = None if self.live else {}
        try:
            outcome = execute_sync(run, tasks, worker_threads)
        except StargraphError as exc:
            raise self._needs(run, exc, running) from exc
        finally:
            run.done = {}
            run.replay_calls = None
        if outcome.interrupt is not None:
            task, _ = outcome.interrupt[0]
            raise ReplayDivergenceError(
                f"replay of run {self.run_id!r} against another graph version: node "
                f"{task.node!r} interrupted at step {run.step}; a replay has no one to answer",
                **run.where(task.node),
            )
        written = {task.key: writes for task, writes in outcome.results}
        for task, recorded, _ in running:
            writes = written.get(task.key)
            if (
                recorded is not None
                and writes is not None
                and jsonable(channels, writes) != recorded.write.writes
            ):
                self.tally[task.node].diverged = True
        return outcome

    def _replay_inside(
        self, run: Run, task: Task, position: tuple[str, int, int], recorded: _Recorded | None
    ) -> dict[str, Any] | None:
        """The parent writes of a changed skill's task, its child run replayed against the
        new skill region by region (its unchanged regions served from the child's record);
        ``None`` when that cannot be done and the skill is to run whole: not a skill, no
        task recorded at the position or other input than it saw, no child recording or
        no region hashes of the recorded skill, or a child that wrote what its projection
        refuses or routes (a guarded channel, a ``Command`` to the parent)."""
        spec = run.plan.specs[task.node]
        if spec.kind != "subgraph" or recorded is None or self.children is None:
            return None
        old = _inside(self.old, task.node)
        runner: Any = spec.fn
        if not old or not self._same_input(run, task, recorded):
            return None
        # The child run at the same position of the recorded run: the node's activation
        # there (1 for its first step) and the task index.
        child_id = ChildRunId.id_of(self.run_id, runner.site, position[1] + 1, task.index)
        child = self.children(child_id)
        if child is None:
            return None
        loop = _child_loop(spec)
        inner = VersionRunner(
            child, loop.plan, old, live=self.live, on_inputs=self.on_inputs, children=self.children
        )
        raw: list[tuple[str, dict[str, Any]]] = []
        # The child's input as the new node hands it over (its input mapping may have
        # changed): an inner task that sees other input than it recorded runs.
        given = runner.child_input(run.values)
        values, report = inner.drive(loop, child, collect=raw, given=given)
        guarded = runner.guarded
        if any(PARENT_KEY in writes or guarded.intersection(writes) for _, writes in raw):
            return None  # run whole: the live call raises or routes as it must
        self.inner.extend(
            r.model_copy(update={"region": f"{task.node}/{r.region}"}) for r in report.regions
        )
        projected: dict[str, Any] = runner.projection(values, raw)
        return projected

    def drive(
        self,
        loop: StepLoop,
        recording: Recording,
        *,
        collect: list[tuple[str, dict[str, Any]]] | None = None,
        given: Mapping[str, Any] | None = None,
    ) -> tuple[dict[str, Any], ReplayReport]:
        """Run ``loop``'s graph from ``recording``'s input (or ``given``) with this runner to
        the end; its final channel values and the report. ``collect`` gets the raw writes of
        every task in merge order (what a subgraph node projects into its parent)."""
        plan = loop.plan
        first = min(recording.steps, key=lambda s: s.step)
        snapshot = first.snapshot or {}
        run_id = recording.run.run_id
        start = given if given is not None else snapshot
        values = initial_values(
            plan.state_model, {k: v for k, v in start.items() if k in plan.channels}, run_id
        )
        longest = max(s.step for s in recording.steps)
        run = loop.make_run(run_id, values, max_steps=max(loop.options.max_steps, longest + 1))
        run.collect = collect
        loop.begin(run, fresh=True)
        try:
            while run.tasks:
                if not loop.step_once(run, self):
                    break
            loop.finish(run)
        except StargraphError as exc:
            loop.fail(run, exc)
            raise
        finally:
            loop.end(run)
        return run.values, self.report(run, recording)

    def _needs(
        self, run: Run, exc: StargraphError, running: list[tuple[Task, _Recorded | None, str]]
    ) -> StargraphError:
        miss = exc if isinstance(exc, ReplayMissError) else exc.__cause__
        offline = isinstance(miss, ReplayMissError) or (
            isinstance(exc, ReplayError) and "outside a replay" in str(exc)
        )
        if not offline or self.live:
            return exc
        node = getattr(exc, "node", None) or (running[0][0].node if running else None)
        reason = next((why for t, _, why in running if t.node == node), "region changed")
        return ReplayDivergenceError(
            f"replay of run {self.run_id!r} against another graph version: region {node!r} "
            f"({reason}) must run its new code, and that code makes a call the record "
            f"cannot answer ({miss or exc}); pass live=True (stargraph check/replay --live) "
            "with the services it needs, e.g. compile(services={'model': ...})",
            **run.where(node),
        )

    def report(self, run: Run, recording: Recording) -> ReplayReport:
        """The per-region report once the run has ended."""
        regions: list[RegionReport] = []
        recorded_nodes = {node for node, _, _ in self.positions}
        for name in sorted(set(self.new) | set(self.old) | recorded_nodes):
            tally = self.tally.get(name, _Tally())
            old, new = self.old.get(name), self.new.get(name)
            unmatched = any(
                node == name and position not in self.matched
                for position in self.positions
                for node in (position[0],)
            )
            if new is None or (unmatched and not tally.served and not tally.executed):
                if name not in recorded_nodes:
                    continue  # neither recorded nor run
                status: RegionStatus = "removed"
                reason = "no longer in the graph" if new is None else "no longer scheduled"
            elif tally.diverged or unmatched:
                status = "diverged"
                reason = "; ".join(tally.reasons) + (
                    "; the record ran it more often" if unmatched else ""
                )
            elif tally.executed:
                status = "re-executed"
                reason = "; ".join(tally.reasons)
            elif tally.served:
                status = "served"
                reason = ""
            else:
                continue  # in the graph, but neither version reached it
            regions.append(
                RegionReport(
                    region=name,
                    status=status,
                    changed=old != new,
                    reason=reason.strip("; "),
                    served=tally.served,
                    executed=tally.executed,
                    recorded_hash=old,
                    hash=new,
                )
            )
        regions.extend(self.inner)
        final = jsonable(run.plan.channels, run.values)
        recorded_final = self.states[max(self.states)]
        return ReplayReport(
            run_id=self.run_id,
            recorded_graph_hash=recording.run.graph_hash,
            graph_hash=run.plan.graph_hash,
            regions=tuple(regions),
            final=final,
            recorded_final=recorded_final,
            changes=tuple(value_changes(recorded_final, final)),
        )


def replay_across(
    loop: StepLoop,
    recording: Recording,
    recorded_regions: Mapping[str, str],
    *,
    live: bool = False,
    on_inputs: InputsPolicy = "run",
    children: Callable[[str], Recording | None] | None = None,
) -> ReplayReport:
    """Replay ``recording`` (made by a graph whose region hashes are ``recorded_regions``)
    through ``loop``'s graph, serving unchanged regions from the record; see the module
    docstring. ``children``: the recording of a child run by id (``None`` when there is
    none), for a changed skill to be replayed region by region inside; by default those a
    cassette carries."""
    if on_inputs not in ("run", "stop"):
        raise ReplayError(f"on_inputs={on_inputs!r}: pass 'run' or 'stop'")
    if children is None:
        carried = {c.run.run_id: c for c in getattr(recording, "children", None) or ()}
        children = carried.get
    runner = VersionRunner(
        recording, loop.plan, recorded_regions, live=live, on_inputs=on_inputs, children=children
    )
    return runner.drive(loop, recording)[1]
