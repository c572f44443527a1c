"""Services a replay was not given: the record answers their model calls.

A replay re-runs node code with every call served from the recorded journal, so a node that
asks ``ctx.services["model"]`` for a completion gets the recorded response and nothing is
sent. The model object itself is then only a name: a replay compiled without it (offline, in
CI, from a cassette) would fail on the lookup before the record is consulted. In replay, a
service name the graph was not given resolves to a :class:`RecordedService`, which serves
chat completions from the journal and refuses anything else with a typed error naming the
service and the fix.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from stargraph.errors import ReplayMissError
from stargraph.llm._messages import ChatRequest, ChatResponse
from stargraph.llm._recorded import JournaledChatModel

__all__ = ["OfflineServices", "RecordedService"]


class _Unreachable:
    """The model behind a :class:`RecordedService`: any call that reaches it is a miss."""

    def __init__(self, name: str, journal: Any) -> None:
        self.name = name
        self.journal = journal

    def _miss(self) -> ReplayMissError:
        return ReplayMissError(
            f"replay of node {self.journal.node!r} at step {self.journal.step} asked "
            f"services[{self.name!r}] for a completion the record does not hold, and the "
            f"replaying graph was not given services[{self.name!r}]; the node asks for "
            "something the recorded run did not (a changed node or prompt), or compile the "
            f"replaying graph with services={{{self.name!r}: ...}}",
            run_id=self.journal.run_id,
            step=self.journal.step,
        )

    def complete(self, request: ChatRequest) -> ChatResponse:
        raise self._miss()

    async def acomplete(self, request: ChatRequest) -> ChatResponse:
        raise self._miss()


class RecordedService(JournaledChatModel):
    """Stands in, during a replay, for a service the replaying graph was not given: chat
    completions (``complete``/``acomplete``) come from the record; any other attribute is
    a :class:`~stargraph.errors.ReplayMissError` naming the service."""

    def __init__(self, name: str, journal: Any) -> None:
        super().__init__(_Unreachable(name, journal), journal)
        self.name = name

    def __getattr__(self, attribute: str) -> Any:
        # Only reached for attributes a chat model does not have.
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        journal: Any = self.journal
        raise ReplayMissError(
            f"replay of node {journal.node!r} at step {journal.step} used "
            f"services[{self.name!r}].{attribute}, but the replaying graph was not given "
            f"services[{self.name!r}] and the record answers only its chat completions; "
            f"compile the replaying graph with services={{{self.name!r}: ...}}",
            run_id=journal.run_id,
            step=journal.step,
        )


class OfflineServices(Mapping[str, Any]):
    """The services of a task in a replay: the given ones, and a :class:`RecordedService`
    for any other name a node asks for."""

    __slots__ = ("_given", "_journal")

    def __init__(self, given: Mapping[str, Any], journal: Any) -> None:
        self._given = given
        self._journal = journal

    def __getitem__(self, name: str) -> Any:
        found = self._given.get(name)
        if found is None and name not in self._given:
            return RecordedService(name, self._journal)
        return found

    def get(self, name: str, default: Any = None) -> Any:
        """The given service, or ``default``: code that checks whether a service was given
        (``services.get(name) is None``) sees what the graph was compiled with."""
        return self._given.get(name, default)

    def __contains__(self, name: object) -> bool:
        return name in self._given

    def __iter__(self) -> Iterator[str]:
        return iter(self._given)

    def __len__(self) -> int:
        return len(self._given)
