"""PNG/SVG pictures through Graphviz's ``dot`` program, when it is installed."""

from __future__ import annotations

import shutil
import subprocess
from typing import Final, Literal

from stargraph.errors import GraphvizNotFoundError, StargraphError
from stargraph.ir import GraphIR
from stargraph.viz._text import to_dot

__all__ = ["GraphvizNotFoundError", "ImageFormat", "graphviz_available", "render"]

ImageFormat = Literal["png", "svg"]
"""Image formats :func:`render` produces."""

_INSTALL: Final = (
    "install Graphviz (Debian/Ubuntu: `apt-get install graphviz`; macOS: `brew install "
    "graphviz`) so that `dot` is on PATH, or export text instead with to_mermaid()/to_dot() "
    "(`stargraph draw FILE --format mermaid|dot`)"
)


def graphviz_available() -> bool:
    """True when Graphviz's ``dot`` program is on ``PATH``."""
    return shutil.which("dot") is not None


def render(ir: GraphIR, format: ImageFormat = "png", *, timeout_s: float = 60.0) -> bytes:
    """Render ``ir`` as PNG or SVG bytes with Graphviz ``dot``.

    Raises :class:`GraphvizNotFoundError` (saying how to install it) when ``dot`` is missing,
    and ``StargraphError`` when ``dot`` fails.
    """
    if format not in ("png", "svg"):
        raise StargraphError(f"cannot render format {format!r}; use 'png' or 'svg'")
    exe = shutil.which("dot")
    if exe is None:
        raise GraphvizNotFoundError(f"cannot render {format.upper()}: `dot` not found; {_INSTALL}")
    try:
        done = subprocess.run(
            [exe, f"-T{format}"],
            input=to_dot(ir).encode(),
            capture_output=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise StargraphError(f"`dot` took longer than {timeout_s}s to render {ir.name!r}") from exc
    if done.returncode != 0:
        raise StargraphError(
            f"`dot` failed rendering graph {ir.name!r} (exit {done.returncode}): "
            f"{done.stderr.decode(errors='replace').strip()}"
        )
    return done.stdout
