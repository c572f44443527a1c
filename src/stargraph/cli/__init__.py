"""The ``stargraph`` command line.

``main()`` is the console-script entry point. Importing this package stays cheap: click,
rich and the engine are imported only when a command runs, so ``stargraph --help`` and
library users importing ``stargraph.cli`` pay almost nothing.

Commands: ``compile``, ``hash``, ``run``, ``resume``, ``fork``, ``runs``, ``show``, ``diff``,
``draw``, ``replay``, ``submit``, ``worker``, ``skills list/show/run``, ``plugins list``,
``rules check``, ``proposals list/show/approve/reject``.
Exit codes: 0 success, 1 failure, 2 usage error (``diff``: 0 same, 1 different, 2 trouble).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    """Run the ``stargraph`` command with ``argv`` (default: ``sys.argv[1:]``); exits."""
    from stargraph.cli._app import cli

    cli.main(args=list(argv) if argv is not None else None, prog_name="stargraph")
