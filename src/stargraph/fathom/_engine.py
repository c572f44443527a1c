"""The rule engine: one CLIPS environment per run, asked for a decision at every step.

Per step the engine (1) writes the engine facts and the state facts by calling ``sg-begin``
with clipspy values -- never CLIPS text --, (2) runs the agenda with a limit and under a
time and memory budget (:class:`~._raw.Watchdog`), (3) checks the environment's error state
and captured error output, and (4) reads the asserted ``sg-decision`` facts back as plain
values. Precedence is halt = finish > interrupt > goto >
continue; within a kind the first rule to fire wins. Python never holds a fact that is
later retracted, which keeps the per-step cost flat (clipspy 1.0.6 never releases such facts).
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, NoReturn

import clips
from clips._clips import ffi, lib
from pydantic import ConfigDict, Field

from stargraph._lifecycle import Closing
from stargraph._typed import TypedModel
from stargraph.errors import (
    Problem,
    RuleBudgetError,
    RuleCompileError,
    RuleRuntimeError,
)
from stargraph.fathom._bounds import DEFAULT_BOUNDS, RuleBounds
from stargraph.fathom._clipsval import decode_value, encode_text, encode_value, plain, to_clips
from stargraph.fathom._load import (
    Capture,
    clips_message,
    freeze_successors,
    load_packs,
)
from stargraph.fathom._pack import RulePack
from stargraph.fathom._raw import (
    CallBuilder,
    SlotNames,
    Watchdog,
    assert_fact,
    error_message,
    has_activations,
    iter_facts,
)
from stargraph.fathom._values import FactField, decode_string, encode_string, normalise_fields
from stargraph.runtime._rules import RANK, DecisionKind

__all__ = ["Decision", "DecisionKind", "RuleEngine"]

SNAPSHOT_VERSION: Final = 1


class Decision(TypedModel):
    """What the rules decided at one step, and which rule decided it (the runtime's
    ``EngineDecision``: the step loop folds those of every engine of the run).

    ``rule`` is ``"<pack id>/<rule name>"`` of the winning rule (None when no rule fired);
    ``fired`` lists every rule that asserted a decision this step, in firing order.
    """

    typed_error = RuleRuntimeError

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: DecisionKind = Field(description="continue, goto, halt, finish or interrupt.")
    target: str | None = Field(None, description="The node to go to, for goto.")
    reason: str | None = Field(None, description="Why, for halt, finish and interrupt.")
    rule: str | None = Field(None, description="The rule that produced this decision.")
    fired: tuple[str, ...] = Field((), description="Every rule that asserted a decision.")


# The slots of the sg-step fact in template order, as sg-begin's arguments (after the tick)
# fill them: see fathom._load.
_STEP_SLOTS: Final = ("tick", "step", "node", "last-event", "tool-result", "error-count")
_STEP_SLOT_LIST: Final = list(_STEP_SLOTS)

# What every step without a firing rule decides: one shared (frozen) instance, a literal
# built without validation so that importing fathom does not build Decision's schema.
_CONTINUE: Final = Decision.model_construct(kind="continue")

DEFAULT_DECIDE_TIMEOUT_S: Final = 1.0
"""A decision's time budget: a decision normally takes tens of microseconds."""
DEFAULT_MEMORY_LIMIT: Final = 32 * 2**20
"""The most memory (bytes) an engine's CLIPS environment may hold when a check runs."""

# CLIPS names the rule whose actions were halted: "... during the actions of defrule 'x'."
_HALTED_IN: Final = re.compile(r"actions of defrule '([^']+)'")


def _clear_agenda(env: Any) -> None:
    """Delete every activation. clipspy 1.0.6's ``delete_activations()`` calls the C API with
    the wrong arity (TypeError), so call CLIPS directly; rules live in the MAIN module."""
    lib.DeleteAllActivations(lib.FindDefmodule(env._env, b"MAIN"))


def _wrap(
    name: str, function: Callable[..., Any], raised: list[BaseException]
) -> Callable[..., Any]:
    """Adapt a Python function for CLIPS: decode string arguments, allow only scalar results.

    The wrapper closes over ``function`` and the ``raised`` list alone, never the engine;
    clipspy keeps it in a module-global table, so a reference to the engine would leak the
    environment. Returning arbitrary objects is refused because clipspy would pin each one in
    that table too.
    """

    def call(*args: Any) -> Any:
        decoded = [decode_string(a) if type(a) is str else a for a in args]
        try:
            result = function(*decoded)
            if isinstance(result, str):
                return encode_string(result)
            if result is None or isinstance(result, bool | int | float):
                return result
            raise TypeError(
                f"function {name!r} returned {type(result).__name__}; return a bool, int, "
                "float, str or None"
            )
        except Exception as exc:
            # clipspy swallows it (the run goes on); keep it so the step's error chains it.
            raised.append(exc)
            raise

    call.__name__ = name
    return call


def _check_budget(run_limit: object, decide_timeout_s: object, memory_limit: object) -> None:
    """Raise one :class:`RuleCompileError` (a ``ValueError``) naming every bad budget."""
    problems = []
    if not isinstance(run_limit, int) or isinstance(run_limit, bool) or run_limit < 1:
        problems.append(
            Problem(
                "RuleEngine/run_limit",
                f"run_limit must be an int >= 1, got {run_limit!r}",
                "allow at least one rule firing per decision, e.g. run_limit=1000",
            )
        )
    if not (isinstance(decide_timeout_s, int | float) and 0 < decide_timeout_s < math.inf):
        problems.append(
            Problem(
                "RuleEngine/decide_timeout_s",
                f"decide_timeout_s must be a positive number, got {decide_timeout_s!r}",
                "give seconds, e.g. decide_timeout_s=2.0",
            )
        )
    if not isinstance(memory_limit, int) or isinstance(memory_limit, bool) or memory_limit < 1:
        problems.append(
            Problem(
                "RuleEngine/memory_limit",
                f"memory_limit must be a positive int (bytes), got {memory_limit!r}",
                "give bytes, e.g. memory_limit=64_000_000",
            )
        )
    if problems:
        raise RuleCompileError(problems, subject="rule engine budget")


class RuleEngine(Closing):
    """Decides routing and termination for one run, from rule packs over one CLIPS env.

    Use it from the thread that created it, and close it (or use ``with``) when the run
    ends. ``functions`` are Python callables rules may call by name; an exception raised in
    one fails the step with :class:`~stargraph.errors.RuleRuntimeError`.

    Every decision runs under a budget: ``run_limit`` rule firings, ``decide_timeout_s``
    seconds, and ``memory_limit`` bytes held by the CLIPS environment (checked after every
    firing and loop iteration). A decision over budget is stopped and raises
    :class:`~stargraph.errors.RuleBudgetError`.

    >>> from stargraph.fathom import default_termination_pack
    >>> with RuleEngine([default_termination_pack(max_steps=3, error_budget=2)]) as engine:
    ...     [engine.decide(step=s, node="act", state_facts={}).kind for s in (1, 2, 3)]
    ['continue', 'continue', 'halt']
    """

    def __init__(
        self,
        packs: Sequence[RulePack],
        *,
        fact_fields: Mapping[str, Any] | None = None,
        successors: Mapping[str, Iterable[str]] | None = None,
        run_limit: int = 1000,
        functions: Mapping[str, Callable[..., Any]] | None = None,
        decide_timeout_s: float = DEFAULT_DECIDE_TIMEOUT_S,
        memory_limit: int = DEFAULT_MEMORY_LIMIT,
        bounds: RuleBounds | None = None,
    ) -> None:
        _check_budget(run_limit, decide_timeout_s, memory_limit)
        self._owner = threading.get_ident()
        self._packs = tuple(packs)
        # Hashed once per engine, not at every snapshot.
        self._hashes = tuple((p.id, p.source_hash) for p in self._packs)
        self._fields: dict[str, FactField] = normalise_fields(fact_fields or {})
        # A state field named ``done`` that is not marked Fact() is the termination flag only
        # when it is a bool: rules see no other unmarked field, and a ``done: str`` of the
        # user's own must not fail every rule decision.
        self._done_marked = "done" in (fact_fields or {})
        self._names = sorted(self._fields)
        self._successors = freeze_successors(successors)
        self._run_limit = run_limit
        self._raised: list[BaseException] = []
        wrapped = {n: _wrap(n, f, self._raised) for n, f in (functions or {}).items()}
        # On failure the new environment is dropped inside load_packs; nothing ran in it.
        loaded = load_packs(
            self._packs,
            fields=self._fields,
            successors=self._successors,
            functions=wrapped,
            bounds=bounds or DEFAULT_BOUNDS,
        )
        env = loaded.env
        self._env: clips.Environment | None = env
        self._raw = env._env
        # Slot names of the packs' templates, read on the first snapshot (see iter_facts).
        self._slot_names: SlotNames = {}
        self._calls = CallBuilder(self._raw)
        self._watch = Watchdog(self._raw, timeout=float(decide_timeout_s), limit=memory_limit)
        self._probe = ffi.new("UDFValue *")
        self._capture: Capture = loaded.capture
        self._rule_packs = loaded.rule_packs
        # Per-name encoders, resolved once: the decision path runs at every step.
        self._encoders = tuple((name, self._fields[name]) for name in self._names)
        # What _advanced checks a snapshot's engine facts against, made once.
        self._fact_names = [name for name, _ in self._encoders]
        self._state_slot_names = frozenset(("sg-tick", *self._fact_names))
        # The last snapshot, until something changes the facts (decide, restore, reset): a
        # run stores the facts with every step, and most steps ask no rule.
        self._snapshot: dict[str, Any] | None = None
        # The packs' own defglobals (not the engine's sg- ones), in definition order: the
        # packs are loaded once and rules cannot define constructs (build is refused), so a
        # snapshot reads their values without walking every global through clipspy.
        self._globals = tuple(g for g in env.globals() if not g.name.startswith("sg-"))
        self._start("the rules failed while the engine started")

    def _start(self, what: str) -> None:
        """Reset to the deffacts and the two engine facts; raise if a rule function failed.

        Patterns are matched as facts are asserted, so a rule function can already fail here,
        and the matching can grow: it runs under a decision's budget. CLIPS checks it only
        when the reset and sg-init return (no check can run inside them), which the static
        bounds (:mod:`._bounds`) make a bounded amount of work.
        """
        self._snapshot = None
        self._watch.arm()
        lib.Reset(self._raw)
        code = self._calls.call(b"sg-init", ())
        tripped = self._watch.settle()
        if tripped is not None:
            self._capture.take_errors()
            self._raised.clear()
            self.close()
            detail = self._budget_message(tripped, "while it matched the packs' facts")
            raise RuleBudgetError(f"{what}: {detail}")
        error = error_message(self._raw, self._probe)
        text = self._capture.take_errors()
        if code or error is not None or text or self._raised:
            cause = self._raised[0] if self._raised else None
            self._raised.clear()
            self.close()
            detail = clips_message(text) if text else (error or f"sg-init failed ({code})")
            raise RuleRuntimeError(
                f"{what}: {detail}; fix the rule or the Python function it calls"
            ) from cause

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Destroy the CLIPS environment. Idempotent; the engine is unusable afterwards.

        Python functions are dropped from clipspy's global table first, so one holding a
        reference back to this engine (a bound method of its owner) cannot keep it alive.
        """
        env, self._env = getattr(self, "_env", None), None
        if env is not None:
            self._calls.close()
            self._watch.close()
            # KeyError/AttributeError only at interpreter shutdown, when clipspy is torn down.
            with contextlib.suppress(KeyError, AttributeError):
                clips.common.environment_data(env._env, "user_functions").functions.clear()

    def __del__(self) -> None:
        # Only reached when nothing global holds the engine; close() is the reliable path.
        if getattr(self, "_env", None) is not None:
            self.close()

    @property
    def packs(self) -> tuple[RulePack, ...]:
        """The packs loaded, in load order."""
        return self._packs

    def _checked_env(self, step: int | None = None, node: str | None = None) -> Any:
        if self._env is None:
            raise RuleRuntimeError("the rule engine is closed", step=step, node=node)
        if threading.get_ident() != self._owner:
            raise RuleRuntimeError(
                f"the rule engine was created on thread {self._owner} and used from thread "
                f"{threading.get_ident()}; a CLIPS environment is not thread-safe, so create "
                "one RuleEngine per run on the thread that runs it",
                step=step,
                node=node,
            )
        return self._env

    # ------------------------------------------------------------------ decide

    def decide(
        self,
        *,
        step: int,
        node: str,
        state_facts: Mapping[str, Any],
        last_event: str | None = None,
        tool_result: str | None = None,
        error_count: int = 0,
    ) -> Decision:
        """The decision at a step boundary, after ``node`` ran as step number ``step``.

        ``state_facts`` maps fact field names to values (extra keys are ignored, so the whole
        state may be passed). Raises RuleRuntimeError when a rule fails, a Python function
        raised, the rules do not settle within ``run_limit`` firings, two rules ask to go
        to different nodes, or a goto target is not a successor of ``node``; its subclass
        RuleBudgetError when the decision overran its time or memory budget.
        """
        env = self._checked_env(step, node)
        previous, self._snapshot = self._snapshot, None
        args: list[Any] = [
            step,
            encode_string(node),
            encode_text(last_event),
            encode_text(tool_result),
            error_count,
        ]
        for name, field in self._encoders:
            if name in state_facts:
                value = state_facts[name]
                if name == "done" and type(value) is not bool and not self._done_marked:
                    value = False
            elif name == "done":
                value = False  # always a slot, so the termination pack works for any state
            else:
                raise RuleRuntimeError(
                    f"state_facts has no value for fact {name!r} at step {step} (node "
                    f"{node!r}); pass every field marked Fact()",
                    step=step,
                    node=node,
                )
            args.append(encode_value(name, field, value, step=step, node=node))
        raw, watch = self._raw, self._watch
        try:
            code = self._calls.call(b"sg-begin", args)
        except (OverflowError, TypeError) as exc:
            self._fail(env, f"could not evaluate the rules: {exc}", step, node)
        if code:
            self._fail(env, f"could not evaluate the rules (sg-begin error {code})", step, node)
        # Armed for the agenda only: sg-begin's modifies match patterns, which the static
        # bounds keep small, and the memory it leaves may be what the first firing frees.
        watch.arm()
        fired = int(lib.Run(raw, self._run_limit))
        tripped = watch.disarm()
        if tripped is not None:
            self._over_budget(env, tripped, step, node)
        self._check_run(env, fired, step, node)
        if not fired:
            # Only rules assert decisions (validate_pack enforces it): nothing fired, nothing
            # to collect. Nothing but sg-begin changed the facts either.
            self._snapshot = self._advanced(previous, args)
            return _CONTINUE
        if self._calls.call(b"sg-collect", ()):
            self._fail(env, "could not read the decisions back", step, node)
        return self._decision(self._calls.result(), step, node)

    def _fail(
        self,
        env: Any,
        message: str,
        step: int,
        node: str,
        error: type[RuleRuntimeError] = RuleRuntimeError,
    ) -> NoReturn:
        """Clean the environment for the next step and raise the step's error."""
        env.clear_error_state()
        _clear_agenda(env)
        self._calls.call(b"sg-collect", ())  # drop the failed step's partial decisions
        self._capture.take_errors()
        cause = self._raised[0] if self._raised else None
        self._raised.clear()
        raise error(f"{message} (step {step}, node {node!r})", step=step, node=node) from cause

    def _over_budget(self, env: Any, tripped: str, step: int, node: str) -> NoReturn:
        """The watchdog stopped the decision: name the rule it stopped and the budget."""
        found = _HALTED_IN.search("".join(self._capture.errors))
        where = (
            f"in rule {self._rule_packs.get(found.group(1), '?')}/{found.group(1)}"
            if found
            else "between rule firings"
        )
        message = self._budget_message(tripped, where)
        self._fail(env, message, step, node, RuleBudgetError)

    def _budget_message(self, tripped: str, where: str) -> str:
        """What a tripped budget says; ``where`` completes "... and was stopped <where>"."""
        if tripped == "time":
            return (
                f"the rules ran past the decision's time budget of "
                f"{self._watch.timeout:g} s and were stopped {where}; a rule's actions must "
                "finish (loop over a bounded range, let the agenda repeat work), or pass a "
                "larger decide_timeout_s to the engine"
            )
        return (
            f"the rules' environment grew to {self._watch.used:,} bytes, over the "
            f"engine's memory_limit of {self._watch.limit:,}, and was stopped {where}; "
            "build smaller strings and multifields, retract facts that are no longer "
            "needed, match fewer facts, or pass a larger memory_limit to the engine"
        )

    def _check_run(self, env: Any, fired: int, step: int, node: str) -> None:
        # clipspy swallows exceptions raised in Python functions: run() returns normally
        # with the error left in the environment's error state and on stderr.
        error = error_message(self._raw, self._probe)
        text = self._capture.take_errors() if self._capture.errors else ""
        if error is not None or text or self._raised:
            detail = clips_message(text) if text else str(error)
            self._fail(
                env,
                f"a rule failed while deciding: {detail}; fix the rule or the Python "
                "function it calls",
                step,
                node,
            )
        if fired >= self._run_limit and has_activations(self._raw):
            pending = sorted({a.name for a in env.activations()})
            if pending:
                self._fail(
                    env,
                    f"rules fired {fired} times without settling (run_limit={self._run_limit}); "
                    f"still pending: {', '.join(pending)}. A rule that re-triggers itself "
                    "needs a condition that its own action makes false",
                    step,
                    node,
                )

    def _decision(self, raw: tuple[Any, ...], step: int, node: str) -> Decision:
        found = []
        for i in range(0, len(raw), 4):
            kind, target, reason, rule = raw[i : i + 4]
            rule_id = f"{self._rule_packs.get(str(rule), '?')}/{rule}"
            found.append((str(kind), plain(target), plain(reason), rule_id))
        fired = tuple(dict.fromkeys(r for *_, r in found))
        gotos = [(target, rule) for kind, target, _, rule in found if kind == "goto"]
        for target, rule in gotos:
            self._check_goto(target, rule, step, node)
        if not found:
            return Decision(kind="continue")
        best = max(found, key=lambda d: RANK[d[0]])  # max() keeps the first of equal rank
        if best[0] == "goto" and len({t for t, _ in gotos}) > 1:
            asks = ", ".join(f"{r} -> {t!r}" for t, r in gotos)
            raise RuleRuntimeError(
                f"rules disagree on where to go from node {node!r} at step {step}: {asks}; "
                "make their conditions exclusive or let one halt/interrupt",
                step=step,
                node=node,
            )
        kind, target, reason, rule = best
        return Decision(kind=kind, target=target, reason=reason, rule=rule, fired=fired)

    def _check_goto(self, target: str | None, rule: str, step: int, node: str) -> None:
        if target is None:
            raise RuleRuntimeError(
                f"rule {rule} asked for goto without a target at step {step} (node {node!r}); "
                'give the sg-decision a (target "node")',
                step=step,
                node=node,
            )
        if self._successors is None:
            return
        allowed = self._successors.get(node)
        if allowed is None or target not in allowed:
            names = ", ".join(repr(n) for n in sorted(allowed or ())) or "none"
            raise RuleRuntimeError(
                f"rule {rule} asked to goto {target!r} from node {node!r} at step {step}, but "
                f"the allowed successors of {node!r} are: {names}; change the rule or add "
                "the edge to the graph",
                step=step,
                node=node,
            )

    # ------------------------------------------------------------------ durability

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to take the same decisions after :meth:`restore` (JSON-able).

        Holds every fact (engine, state, asserted) and every defglobal, plus the pack hashes
        so a snapshot cannot be restored into an engine with different rules. Until the next
        :meth:`decide`, :meth:`restore` or :meth:`reset` the same (unchanged) dict is
        returned again: treat it as read-only.
        """
        self._checked_env()
        if self._snapshot is not None:
            return self._snapshot
        facts = [
            [name, {k: decode_value(v) for k, v in slots.items()}]
            for name, slots in iter_facts(self._raw, self._slot_names)
        ]
        globals_ = {g.name: decode_value(g.value) for g in self._globals}
        self._snapshot = {
            "version": SNAPSHOT_VERSION,
            "packs": self._pack_hashes(),
            "facts": facts,
            "globals": globals_,
        }
        return self._snapshot

    def _advanced(self, previous: dict[str, Any] | None, args: list[Any]) -> dict[str, Any] | None:
        """The snapshot after a decision in which no rule fired, made from the one taken
        just before it (``None`` when there is none to start from), or ``None``: then the
        next :meth:`snapshot` reads the facts from CLIPS.

        Such a decision changed only what ``sg-begin`` writes: the ``sg-step`` and
        ``sg-state`` slots, to the values passed (``args``, read back as they went in) and
        the next tick. Reading the facts back through the C API cost a step more than the
        decision itself, so the common case (the two engine facts alone, as the
        termination pack leaves them) is worked out here; any other fact list is read.
        """
        if previous is None:
            return None
        facts = previous["facts"]
        if len(facts) != 2 or facts[0][0] != "sg-step" or facts[1][0] != "sg-state":
            return None
        step_slots, state_slots = facts[0][1], facts[1][1]
        tick = step_slots.get("tick")
        names = self._fact_names
        if (
            type(tick) is not int
            or list(step_slots) != _STEP_SLOT_LIST
            or state_slots.keys() != self._state_slot_names
        ):
            return None
        try:
            # An int goes in and comes back as itself (decode_value's own answer).
            values = [arg if type(arg) is int else decode_value(arg) for arg in args]
        except RuleRuntimeError:  # a value CLIPS would give back otherwise: read it
            return None
        tick += 1
        passed = len(_STEP_SLOTS) - 1  # sg-begin's arguments before the state facts
        new_step = dict(zip(_STEP_SLOTS, [tick, *values[:passed]], strict=True))
        new_state = {**state_slots, "sg-tick": tick}
        new_state.update(zip(names, values[passed:], strict=True))
        return {
            "version": SNAPSHOT_VERSION,
            "packs": self._pack_hashes(),
            "facts": [["sg-step", new_step], ["sg-state", new_state]],
            "globals": dict(previous["globals"]),
        }

    def _pack_hashes(self) -> list[list[str]]:
        """``[[pack id, source hash], ...]`` (a new list each time: a snapshot is handed out
        and must not share it)."""
        return [[pack, digest] for pack, digest in self._hashes]

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Replace this engine's facts and globals with a :meth:`snapshot`'s.

        The agenda is emptied afterwards: the snapshot was taken between steps, when every
        activation had already fired, so re-asserting the facts must not fire them again.
        """
        env = self._checked_env()
        packs = self._pack_hashes()
        if snapshot.get("version") != SNAPSHOT_VERSION or snapshot.get("packs") != packs:
            raise RuleRuntimeError(
                "the rule snapshot was taken with different rule packs "
                f"({snapshot.get('packs')!r}) than this engine's ({packs!r}); resume with "
                "the graph (and packs) that made the run"
            )
        self._snapshot = None
        env.eval("(retract *)")
        try:
            for template, slots in snapshot["facts"]:
                assert_fact(self._raw, template, {k: to_clips(v) for k, v in slots.items()})
            for name, value in snapshot["globals"].items():
                env.find_global(name).value = to_clips(value)
        # RuleRuntimeError: assert_fact's refusals; the builtins: clipspy's own, converting
        # a restored value.
        except (RuleRuntimeError, LookupError, ValueError, TypeError, clips.CLIPSError) as exc:
            self._capture.take_errors()
            raise RuleRuntimeError(
                f"the rule snapshot does not fit this engine ({exc}); it is corrupt or was "
                "taken with other fact fields"
            ) from exc
        self._calls.call(b"sg-rebind", ())
        _clear_agenda(env)

    def reset(self) -> None:
        """Back to the state of a new engine: deffacts, initial globals, fresh engine facts.

        What a pooled engine does between runs; cheaper than restoring a snapshot, and
        exactly what a new engine would hold, pending activations included.
        """
        env = self._checked_env()
        env.clear_error_state()
        _clear_agenda(env)
        self._capture.take_errors()
        self._raised.clear()
        self._start("the rules failed while the engine was reset")
