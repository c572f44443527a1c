"""Masking secrets before anything is rendered.

Two nets, because the console shows data the tool arbiter never saw (state, model requests):

* values of the ``STARGRAPH_SECRET_*`` environment variables of the console's process (how
  secrets reach subprocess tools, see :func:`stargraph.tools.secret_env_name`), any
  ``secrets`` given to :func:`~stargraph.ui.create_app` (``stargraph ui --secrets-from``)
  and the secrets registered by the graphs the console resumes runs with (their
  ``Secrets`` and arbiter services) are replaced by ``[redacted:NAME]``, exactly as the
  arbiter redacts them in the commit log;
* the value under a key that names a credential (``api_key``, ``password``, ``token`` ...)
  is replaced by ``[redacted:KEY]`` whatever it holds.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["Masker"]

_SECRET_ENV: Final = "STARGRAPH_SECRET_"
_MIN_SECRET_LEN: Final = 4  # as the arbiter: shorter values would redact ordinary words
_SECRET_KEY: Final = re.compile(
    r"(?i)(^|[_\-.])(api[_\-]?key|apikey|secret|password|passwd|token|authorization|"
    r"auth[_\-]?header|bearer|private[_\-]?key|access[_\-]?key|cookie)s?($|[_\-.])"
)
# Token counts are not credentials: ``prompt_tokens`` and friends stay visible.
_NOT_SECRET: Final = re.compile(r"(?i)_tokens$|^tokens?$|^max_tokens$|^token_count$")


class Masker:
    """Replaces secret values in JSON data and text (see the module docstring)."""

    def __init__(self, secrets: Mapping[str, str] | None = None) -> None:
        found = {
            name[len(_SECRET_ENV) :].lower(): value
            for name, value in os.environ.items()
            if name.startswith(_SECRET_ENV)
        }
        found.update(secrets or {})
        self._found = found
        self._needles: list[tuple[str, str]] = []
        self._sort()

    def _sort(self) -> None:
        # Longest first, so a secret containing another is replaced whole.
        self._needles = sorted(
            ((v, n) for n, v in self._found.items() if len(v) >= _MIN_SECRET_LEN),
            key=lambda item: -len(item[0]),
        )

    def extend(self, secrets: Mapping[str, str]) -> None:
        """Mask ``secrets`` too (a graph's registered ones, once the console resolves it)."""
        fresh = {n: v for n, v in secrets.items() if self._found.get(n) != v}
        if fresh:
            # A new list, swapped in whole: pages rendering meanwhile read the old one.
            self._found = {**self._found, **fresh}
            self._sort()

    def text(self, value: str) -> str:
        """``value`` with every known secret value replaced."""
        for secret, name in self._needles:
            if secret in value:
                value = value.replace(secret, f"[redacted:{name}]")
        return value

    def data(self, value: Any) -> Any:
        """JSON data with known secret values and credential-named keys masked."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for key, item in value.items():
                name = str(key)
                if (
                    _SECRET_KEY.search(name)
                    and not _NOT_SECRET.search(name)
                    and item not in (None, "", 0)
                ):
                    out[name] = f"[redacted:{name}]"
                else:
                    out[name] = self.data(item)
            return out
        if isinstance(value, list | tuple):
            return [self.data(item) for item in value]
        return value
