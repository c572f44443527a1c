"""stargraph.fathom: CLIPS rules that decide routing and termination, auditably.

Rules, not the LLM, decide when a loop stops and may steer routing (see
docs/concepts/rules.md). This is the only package that imports clipspy. The pieces:

* :class:`Fact` marks the state fields rules can see; :func:`fact_fields` lists them.
* :class:`RulePack` is versioned CLIPS text (from a ``.clp`` file or the declarative
  ``when``/``then`` form); its ``source_hash`` feeds the graph hash.
* :func:`default_termination_pack` holds the rules ``done``, ``error_budget``, ``max_steps``.
* :class:`RuleEngine` owns one CLIPS environment per run and returns a :class:`Decision`
  (halt = finish > interrupt > goto > continue) naming the rule that produced it; ``snapshot()`` /
  ``restore()`` carry its facts across checkpoints. It implements the runtime's seam
  :class:`DecisionEngine` (``stargraph.runtime``'s ``DecisionMaker``), and
  :class:`Decision` the runtime's ``EngineDecision``.
* :class:`EnginePool` keeps a compiled graph's engines across its runs (per thread):
  resetting one costs far less than making one.
* :class:`RuleBounds` bounds how much pattern matching the packs of one engine can ask for
  (patterns per rule, deffacts facts, partial matches); both take ``bounds=``.
* :func:`validate_pack` checks a pack before anything runs: packs are data from wherever the
  graph came from, so only the constructs and the functions in :data:`ALLOWED_FUNCTIONS` are
  accepted, and every decision runs under a time and memory budget (``docs/trust.md``).

Rules see three engine templates, and decide by asserting ``sg-decision``::

    (sg-step (step <int>) (node "<name>") (last-event "<str>"|nil)
             (tool-result "<str>"|nil) (error-count <int>))
    (sg-state (<fact field> <value>) ... (done TRUE|FALSE))
    (sg-fact (name "<str>") (value <any>))            ; facts rules assert for later steps
    (assert (sg-decision (kind goto|halt|finish|interrupt|continue) (target "<node>")
                         (reason "<str>") (rule <this rule's name>)))

``halt`` stops the run before its end (status ``halted``: an exhausted budget, a guard);
``finish`` says the task is complete and ends the run ``done``; both name the rule in the
run record's ``stopped_by`` and their reason in its ``stop_reason``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stargraph import _lazy
from stargraph.fathom._pack import RulePack, default_termination_pack
from stargraph.fathom._values import Fact, fact_fields
from stargraph.runtime._rules import DecisionMaker as DecisionEngine

if TYPE_CHECKING:
    from stargraph.fathom._allow import FUNCTIONS as ALLOWED_FUNCTIONS
    from stargraph.fathom._bounds import RuleBounds
    from stargraph.fathom._engine import Decision, DecisionKind, RuleEngine
    from stargraph.fathom._load import validate_pack
    from stargraph.fathom._pool import EnginePool, PooledEngine

__all__ = [
    "ALLOWED_FUNCTIONS",
    "Decision",
    "DecisionEngine",
    "DecisionKind",
    "EnginePool",
    "Fact",
    "PooledEngine",
    "RuleBounds",
    "RuleEngine",
    "RulePack",
    "default_termination_pack",
    "fact_fields",
    "validate_pack",
]

# The engine, the pack checks and clipspy are imported when first read (a compile with rule
# packs reads them): declaring a state with facts or a rule pack does not load them.
__getattr__, __dir__ = _lazy.exports(
    __name__,
    {
        "ALLOWED_FUNCTIONS": "._allow:FUNCTIONS",
        "Decision": "._engine",
        "DecisionKind": "._engine",
        "EnginePool": "._pool",
        "PooledEngine": "._pool",
        "RuleBounds": "._bounds",
        "RuleEngine": "._engine",
        "validate_pack": "._load",
    },
)
