"""The ``rag`` reference skill (kind ``workflow``): retrieve -> answer -> validate.

A compiled graph of four nodes over :class:`RagState`::

    START -> retrieve --(passages?)--> answer -> validate --accept--> END
                 \\                        ^           |
                  \\                       +---retry---+
                   +--(none)--> give_up <---give_up---+          give_up -> END

* ``retrieve`` - vector + keyword search fused by reciprocal rank fusion
  (:func:`~stargraph.skills.refs.retrieval.retrieve`); stores from ``ctx.services``.
* ``answer`` (``must_stub``) - the chat model gets the retrieved passages' *text*, each
  tagged with its id, and must cite the ids it uses (``[p3]``). On a retry it also gets its
  previous answer and what was wrong with it.
* ``validate`` - deterministic: the answer must cite at least one passage and only passages
  that were retrieved. A failed answer goes back to ``answer`` while attempts remain
  (``budget``), else to ``give_up``.
* ``give_up`` - ends with the answer ``"insufficient context"`` (also reached when nothing
  was retrieved, or when the model itself says the passages do not answer the question).

The routers read only deterministic state (``passages``, ``verdict``), never the model's
output directly, as a ``workflow`` skill must. Everything that changes behaviour (``k``,
``candidates``, ``rrf_k``, ``budget``, prompt, model name, temperature, embedder name) is
node config and so part of the graph hash; the live objects are services::

    app = rag_graph().compile(services={"docs": docs, "vectors": vectors,
                                        "embedder": HashingEmbedder(), "model": chat})
    app.invoke({"question": "What is the capital of France?"}).answer
"""

from __future__ import annotations

from typing import Any, Final, Literal

from stargraph._typed import TypedModel
from stargraph.errors import InvalidInputError
from stargraph.graph import START, Graph
from stargraph.llm import RequestOptions
from stargraph.runtime import RunContext
from stargraph.skills import Skill, SkillKind
from stargraph.skills.refs import _loop
from stargraph.skills.refs.retrieval import RETRIEVAL_DEFAULTS, citations, format_passages
from stargraph.skills.refs.stores import Passage

__all__ = [
    "INSUFFICIENT",
    "RAG_PROMPT",
    "RagOutput",
    "RagState",
    "make_rag_skill",
    "rag_graph",
    "rag_skill",
]

INSUFFICIENT: Final = "insufficient context"
"""The answer when the passages cannot support one."""

RAG_PROMPT: Final = (
    "Answer the question using only the numbered passages you are given. After every "
    "statement, cite the passage that supports it by its id in square brackets, e.g. [p3]. "
    "Cite no other ids. If the passages do not answer the question, reply exactly: "
    "INSUFFICIENT CONTEXT"
)
"""The default system prompt of the ``answer`` node."""

Outcome = Literal["answered", "insufficient_context"]


class RagState(TypedModel):
    """The rag graph's state. Start it with ``{"question": ...}``."""

    typed_error = InvalidInputError

    question: str = ""
    """What to answer."""
    passages: list[Passage] = []
    """The retrieved passages, best first."""
    answer: str | None = None
    """The model's answer (validated), or ``"insufficient context"``."""
    citations: list[str] = []
    """The passage ids the accepted answer cites."""
    attempts: int = 0
    """Answers asked of the model so far."""
    feedback: str | None = None
    """What was wrong with the last answer, told to the model on a retry."""
    verdict: _loop.Verdict | None = None
    """The last validation's decision."""
    outcome: Outcome | None = None
    """``answered`` or ``insufficient_context`` once the run is over."""


class RagOutput(TypedModel):
    """The rag skill's declared output channels."""

    typed_error = InvalidInputError

    answer: str | None = None
    """See :attr:`RagState.answer`."""
    citations: list[str] = []
    """See :attr:`RagState.citations`."""
    passages: list[Passage] = []
    """See :attr:`RagState.passages`."""
    attempts: int = 0
    """See :attr:`RagState.attempts`."""
    outcome: Outcome | None = None
    """See :attr:`RagState.outcome`."""


# --------------------------------------------------------------------------- nodes


def retrieve_node(state: RagState, ctx: RunContext) -> dict[str, Any]:
    """Hybrid retrieval for the question."""
    return {"passages": _loop.retrieve_query(ctx, state.question)}


def after_retrieve(state: RagState) -> Literal["answer", "give_up"]:
    """Nothing retrieved (empty corpus, empty question): no model call at all."""
    return "answer" if state.passages else "give_up"


def answer_node(state: RagState, ctx: RunContext) -> dict[str, Any]:
    """Ask the model, giving it the passages' text; on a retry, also what went wrong."""
    text = f"Passages:\n\n{format_passages(state.passages)}\n\nQuestion: {state.question}"
    answer = _loop.ask_with_feedback(
        ctx, RAG_PROMPT, text, previous=state.answer, feedback=state.feedback
    )
    return {"answer": answer, "attempts": state.attempts + 1}


def validate_node(state: RagState, ctx: RunContext) -> dict[str, Any]:
    """Accept an answer citing only retrieved passages (at least one); else retry or give up."""
    text = (state.answer or "").strip()
    cited = citations(text)
    retrieved = [p.id for p in state.passages]
    if not cited and "INSUFFICIENT CONTEXT" in text.upper():
        return {"verdict": "give_up", "feedback": None, "citations": []}
    unknown = [c for c in cited if c not in retrieved]
    problems = []
    if not text:
        problems.append("Your answer was empty.")
    elif not cited:
        problems.append("Your answer cites no passage.")
    if unknown:
        problems.append(
            f"Your answer cites {unknown}, which are not among the passages you were given."
        )
    if not problems:
        return {"verdict": "accept", "feedback": None, "citations": cited, "outcome": "answered"}
    feedback = (
        " ".join(problems)
        + f" Cite only these passage ids: {retrieved}. Answer again, or reply exactly "
        "INSUFFICIENT CONTEXT."
    )
    verdict = _loop.retry_verdict(state.attempts, ctx.config)
    return {"verdict": verdict, "feedback": feedback, "citations": []}


def after_validate(state: RagState) -> _loop.Verdict:
    """Route on the validation's verdict."""
    return state.verdict or "give_up"


def give_up_node(state: RagState) -> dict[str, Any]:
    """End with ``"insufficient context"``, citing nothing."""
    return {"answer": INSUFFICIENT, "citations": [], "outcome": "insufficient_context"}


# --------------------------------------------------------------------------- building


def rag_graph(
    *,
    name: str = "rag",
    k: int = RETRIEVAL_DEFAULTS["k"],
    candidates: int = RETRIEVAL_DEFAULTS["candidates"],
    rrf_k: int = RETRIEVAL_DEFAULTS["rrf_k"],
    budget: int = 2,
    system_prompt: str = RAG_PROMPT,
    model: str | None = None,
    temperature: float | None = None,
    request: RequestOptions | None = None,
    embedder: str | None = None,
) -> Graph[RagState]:
    """The rag workflow as a :class:`~stargraph.graph.Graph`.

    ``k`` passages reach the model, out of ``candidates`` per ranking fused with constant
    ``rrf_k``; ``budget`` bounds the answers asked (the first one included). ``embedder``,
    when given, pins the embedder name the ``embedder`` service must have.
    ``temperature`` and ``request`` (:class:`~stargraph.llm.RequestOptions`: ``max_tokens``,
    ``seed`` ...) fix those fields of every model call (and the graph hash).

    >>> sorted(n.id for n in rag_graph().to_ir().nodes)
    ['answer', 'give_up', 'retrieve', 'validate']
    """
    numbers = {"k": k, "candidates": candidates, "rrf_k": rrf_k, "budget": budget}
    _loop.check_numbers("rag_graph", numbers, "k=4, candidates=20, rrf_k=60, budget=2")
    llm = {
        "system_prompt": system_prompt,
        **_loop.llm_settings(model, temperature, request, who="rag_graph"),
    }
    graph = (
        Graph(name, state=RagState)
        .with_node(
            "retrieve",
            retrieve_node,
            config=_loop.retrieval_config(k, candidates, rrf_k, embedder),
            writes=("passages",),
        )
        .with_node("answer", answer_node, config=llm, must_stub=True, writes=("answer", "attempts"))
        .with_edge(START, "retrieve")
        .with_conditional_edges("retrieve", after_retrieve)
    )
    return _loop.with_retry_loop(
        graph,
        "answer",
        validate=validate_node,
        after_validate=after_validate,
        give_up=give_up_node,
        budget=budget,
        validate_writes=("verdict", "feedback", "citations", "outcome"),
        give_up_writes=("answer", "citations", "outcome"),
    )


def make_rag_skill(**options: Any) -> Skill:
    """:func:`rag_graph` (with ``options``) packaged as the ``rag`` workflow skill whose
    declared outputs are :class:`RagOutput`'s fields."""
    return _loop.reference_skill(
        rag_graph(**options),
        name="rag",
        kind=SkillKind.WORKFLOW,
        description=(
            "Answer a question from a passage corpus: hybrid retrieval (vector + keyword, "
            "fused), an answer citing the retrieved passages, validated citations."
        ),
        system_prompt=str(options.get("system_prompt", RAG_PROMPT)),
        outputs=RagOutput,
    )


rag_skill: Final[Skill] = make_rag_skill()
"""The ``rag`` skill with default settings: ``SubgraphNode.from_skill(rag_skill, ...)``."""
