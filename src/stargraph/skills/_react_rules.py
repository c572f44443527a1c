"""The rules that end a ReAct loop, all in one place.

Two packs are mounted on the loop's ``observe`` node, which ends every ReAct step:

* ``termination`` (:func:`termination_pack`): the budgets, ``error_budget`` and
  ``max_steps``. Always mounted, whatever other packs the loop gets, so a loop whose
  success rules never fire still stops.
* ``exit`` (:func:`exit_pack`): the success rules, ``final_answer`` (the model gave a valid
  final answer) and ``done_flag`` (a tool result set the loop's declared done field). This
  is the pack ``react_graph(rules=...)`` replaces: without a ``final_answer`` rule an answer
  does not end the loop.

The success rules are ``finish`` decisions (the run ends ``done``, by the rule) with a higher
salience than the budgets, which ``halt`` (the run ends ``halted``), so a step that both
finishes the task and reaches a limit is reported as finished, not as a limit.
"""

from __future__ import annotations

from typing import Any, Final

from stargraph import fathom
from stargraph.errors import SkillValidationError
from stargraph.fathom._pack import budget_problems

__all__ = ["exit_pack", "termination_pack"]

_AT_OBSERVE: Final = {"node": "observe"}
# Above every budget rule: a finished task is reported as done, not as a limit.
_SUCCESS_SALIENCE: Final = 20


def termination_pack(max_steps: int = 10, error_budget: int = 3) -> fathom.RulePack:
    """The ``termination`` pack of the ReAct loop: the budgets ``error_budget`` and
    ``max_steps``, in that order of precedence.

    It differs from :func:`stargraph.fathom.default_termination_pack` (which counts graph
    steps, and has a ``done`` rule) in two ways: ``max_steps`` counts LLM steps (the
    ``llm_steps`` fact), and the success rules are in :func:`exit_pack`, which a loop may
    replace while the budgets stay. The pack is mounted on ``observe``, which ends every
    ReAct step, so the last reply's tool calls run and are observed before the loop stops,
    and the trajectory ends with the observations of the failures that exhausted the error
    budget.

    >>> pack = termination_pack(max_steps=5, error_budget=2)
    >>> pack.label, "(llm_steps" in pack.source
    ('termination@react-2', True)
    """
    problems = budget_problems(max_steps, error_budget, at="/", fix="pass a positive int")
    if problems:
        raise SkillValidationError(problems, subject="ReAct termination pack")
    return fathom.RulePack.from_spec(
        {
            "id": "termination",
            "version": "react-2",
            "rules": [
                {
                    "name": "error_budget",
                    "salience": 10,
                    "when": [{"error_count": {">=": error_budget}}, _AT_OBSERVE],
                    "then": {"halt": "error_budget_exhausted"},
                },
                {
                    "name": "max_steps",
                    "when": [{"state.llm_steps": {">=": max_steps}}, _AT_OBSERVE],
                    "then": {"halt": "max_steps_exceeded"},
                },
            ],
        }
    )


def exit_pack(*, final_answer: bool = True, done_flag: bool = True) -> fathom.RulePack:
    """The ``exit`` pack of the ReAct loop: the rules that end it on success.

    * ``final_answer`` finishes the run when the step's reply was a valid final answer (``observe``
      leaves ``last_event`` at ``final_answer``);
    * ``done_flag`` finishes it when a tool result of the step set the loop's declared done field
      (``act`` sets ``last_event`` to ``tool_done``, which ``observe`` keeps).

    ``react_graph`` mounts ``exit_pack(done_flag=done_field is not None)`` unless given
    ``rules=``; ``exit_pack(final_answer=False, done_flag=True)`` is the pack of a loop that
    only a tool can finish.

    >>> pack = exit_pack(done_flag=False)
    >>> pack.label, "(defrule final_answer" in pack.source, "done_flag" in pack.source
    ('exit@react-1', True, False)
    """
    rules: list[dict[str, Any]] = []
    if final_answer:
        rules.append(
            {
                "name": "final_answer",
                "salience": _SUCCESS_SALIENCE,
                "when": [{"last_event": "final_answer"}, _AT_OBSERVE],
                "then": {"finish": "final_answer"},
            }
        )
    if done_flag:
        rules.append(
            {
                "name": "done_flag",
                "salience": _SUCCESS_SALIENCE,
                "when": [{"last_event": "tool_done"}, _AT_OBSERVE],
                "then": {"finish": "done_flag"},
            }
        )
    return fathom.RulePack.from_spec({"id": "exit", "version": "react-1", "rules": rules})
