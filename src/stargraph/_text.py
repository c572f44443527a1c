"""The one check for text a store cannot keep: a string that UTF-8 cannot encode."""

from __future__ import annotations

__all__ = ["lone_surrogate"]


def lone_surrogate(text: str) -> int | None:
    """The index of the first lone surrogate in ``text`` (the one thing a ``str`` may hold
    that UTF-8, and so a store, cannot encode), or ``None``.

    >>> lone_surrogate("caf\\u00e9"), lone_surrogate("ab\\ud800")
    (None, 2)
    """
    if text.isascii():  # O(1) in CPython: the common case costs nothing
        return None
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        return exc.start
    return None
