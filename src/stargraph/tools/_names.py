"""Short, readable function names for the tools a model is offered.

A canonical id (``acme.fs.read@1.0.0``) mangled into a function name
(``acme__fs__read__v1_0_0``) is what small models copy wrong and answer with; the model is
better served by ``read``. The short name is the last segment of the tool's name; when two
offered tools share it, each gets the shortest tail of its own segments (joined with ``_``)
that no other offered tool could be called: ``acme.fs.read`` and ``beta.fs.read`` become
``acme_fs_read`` and ``beta_fs_read``. The choice depends only on the set of names, never on
their order, and the names are distinct by construction: a tool's name is a tail no other
tool has, and a tail never contains ``__``, which only the fallback (the name with ``.`` as ``__``,
for a name each of whose tails another tool has) does.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["short_names"]


def _tails(name: str) -> list[str]:
    segments = name.split(".")
    return ["_".join(segments[-k:]) for k in range(1, len(segments) + 1)]


def short_names(entries: Iterable[str]) -> dict[str, str]:
    """Short function name -> entry, for allowlist entries that name one tool (a canonical
    id or a tool name; ``ns.*`` wildcards are left out: which tools they cover is known only
    to a registry). Two entries for one tool name share its short name.

    >>> short_names(["acme.calc@1.0.0", "acme.fs.read", "beta.fs.read"])
    {'calc': 'acme.calc@1.0.0', 'acme_fs_read': 'acme.fs.read', 'beta_fs_read': 'beta.fs.read'}
    """
    by_name: dict[str, str] = {}
    for entry in entries:
        if not entry.endswith(".*"):
            by_name.setdefault(entry.partition("@")[0], entry)
    tails = {name: _tails(name) for name in by_name}
    named: dict[str, str] = {}
    for name, entry in by_name.items():
        taken = {tail for other, its in tails.items() if other != name for tail in its}
        short = next((tail for tail in tails[name] if tail not in taken), None)
        if short is None:  # every tail of it is another tool's too: the mangled name
            short = name.replace(".", "__")
        named[short] = entry
    return named
