"""Registered secrets, masked in every call record a run stores.

A graph registers secrets through its services: every :class:`~stargraph.tools.Secrets`
among them (``services={"secrets": Secrets({"api_key": key})}``) and the secrets of every
:class:`~stargraph.tools.Arbiter` (which already redacts them from tool results). Each
journaled call - a model's request and reply, a tool's arguments and outcome, a ``once``
value - is masked as it is recorded: a secret's value becomes ``[redacted:NAME]``, the
placeholder the arbiter and the console use, so checkpoints, exported cassettes and the
console hold only the placeholder.

Replay is why the node is handed the masked value too, live: a resumed or replayed run is
served the stored record, so the live run must have seen the same thing or its state would
differ. A model that echoes a secret therefore reads back the placeholder, and a tool
argument the model wrote with a secret in it carries the placeholder: secrets reach tools
through ``secret_resources``, never through model text. A request's fingerprint is taken
before it is masked, so a replay recomputing the request from state still matches it. State
written by node code from the run's own input is stored as written (masking it would make a
resumed run's state differ from the live one); keep secrets out of state and the console
masks them on display.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

__all__ = ["SecretMask", "mask_of", "registered_secrets"]

_MIN_SECRET_LEN: Final = 4  # as the arbiter: shorter values would redact ordinary words


class SecretMask:
    """Replaces registered secret values in JSON data by ``[redacted:NAME]``."""

    __slots__ = ("_needles",)

    def __init__(self, secrets: Mapping[str, str]) -> None:
        # Longest first, so a secret containing another is replaced whole; the JSON-escaped
        # form is what a secret holding quotes or backslashes looks like in the dump.
        self._needles = tuple(
            (value, orjson.dumps(value)[1:-1], f"[redacted:{name}]")
            for name, value in sorted(secrets.items(), key=lambda item: -len(item[1]))
            if len(value) >= _MIN_SECRET_LEN
        )

    def __bool__(self) -> bool:
        return bool(self._needles)

    def data(self, value: Any) -> Any:
        """``value`` itself when it holds no secret (the common case: one dump and a search,
        no copy), else a copy with every secret replaced, in keys and values alike."""
        if value is None or type(value) in (int, float, bool):
            return value
        if type(value) is str:
            return self.text(value)
        try:
            dumped = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
        except TypeError:  # not JSON (the store will say so): look through it anyway
            return self._walk(value)
        if not any(escaped in dumped for _v, escaped, _p in self._needles):
            return value
        return self._walk(value)

    def text(self, value: str) -> str:
        """``value`` with every secret replaced."""
        for secret, _escaped, placeholder in self._needles:
            if secret in value:
                value = value.replace(secret, placeholder)
        return value

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {
                self.text(k) if isinstance(k, str) else k: self._walk(v) for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self._walk(v) for v in value]
        return value


def registered_secrets(services: Mapping[str, Any]) -> dict[str, str]:
    """Name -> value of the secrets ``services`` register (see the module docstring)."""
    from stargraph.tools import Arbiter, Secrets

    found: dict[str, str] = {}
    for service in services.values():
        if isinstance(service, Secrets):
            found.update(service)
        elif isinstance(service, Arbiter):
            found.update(service.secrets)
    return found


def mask_of(services: Mapping[str, Any]) -> SecretMask | None:
    """The mask of the secrets ``services`` register, or ``None`` when they register none:
    the journal then records values untouched."""
    mask = SecretMask(registered_secrets(services))
    return mask if mask else None
