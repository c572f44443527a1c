"""A griffe extension for the API reference: show docstring examples as code.

stargraph docstrings hold doctest examples (``>>> ...`` and their output) and indented
``::`` blocks, which Markdown would otherwise render as prose (and read ``['a']`` in an
output line as a link). This wraps each such block in a fenced ``pycon`` / ``python`` block
before mkdocstrings renders it. Wired in ``mkdocs.yml`` (handlers.python.options.extensions).
"""

from __future__ import annotations

from typing import Any

import griffe

__all__ = ["DoctestFences", "fence"]


def fence(text: str) -> str:
    """Fence doctest blocks (``>>>`` up to the next blank line) and ``::`` literal blocks."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i].removeprefix(indent))
                i += 1
            out += [f"{indent}```pycon", *(indent + b for b in block), f"{indent}```"]
            continue
        if line.rstrip().endswith("::") and i + 1 < len(lines):
            out.append(line.rstrip()[:-1])
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            base = len(line) - len(line.lstrip())
            block = []
            while j < len(lines) and (
                not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > base
            ):
                block.append(lines[j])
                j += 1
            while block and not block[-1].strip():
                block.pop()
            if block:
                cut = min(len(b) - len(b.lstrip()) for b in block if b.strip())
                pad = " " * base
                out += ["", f"{pad}```python", *(pad + b[cut:] for b in block), f"{pad}```", ""]
                i = j
                continue
            i += 1
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    """Rewrite every docstring with :func:`fence`."""

    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        """Called for every loaded object (module, class, function, attribute)."""
        if obj.docstring is not None:
            obj.docstring.value = fence(obj.docstring.value)
