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

from collections.abc import Callable, Sequence
from typing import TextIO

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    """Run the ``stargraph`` command with ``argv`` (default: ``sys.argv[1:]``); exits."""
    import warnings

    from stargraph.cli._app import cli

    warnings.showwarning = _plain_warnings(warnings.showwarning)
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="stargraph")
    except SystemExit as done:
        _leave_abandoned_nodes(done)
        raise


def _leave_abandoned_nodes(done: SystemExit) -> None:
    """Exit now, without joining worker threads, when a signal stopped the run at once.

    A second Ctrl-C (or SIGTERM) abandons the node that is running; its step is not
    committed and the run is already recorded as orphaned. The engine's own threads are
    daemons, but the node may have started threads of its own (a client library's pool) that
    are not: the interpreter would wait at exit for those, for as long as they run, and the
    command would say it stopped at once and then hang.
    """
    import os
    import signal
    import sys
    import threading

    if done.code not in {128 + signal.SIGINT, 128 + signal.SIGTERM}:
        return
    main = threading.main_thread()
    if any(t is not main and t.is_alive() and not t.daemon for t in threading.enumerate()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(done.code)


def _plain_warnings(show: Callable[..., None]) -> Callable[..., None]:
    """``show``, except that stargraph's own warnings read like its errors: ``warning:
    ...`` in one paragraph, without the library's file name and source line."""

    def show_warning(  # noqa: PLR0917 - the signature of warnings.showwarning
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        import sys

        from stargraph.errors import StargraphWarning

        if not issubclass(category, StargraphWarning):
            show(message, category, filename, lineno, file, line)
            return
        (sys.stderr if file is None else file).write(f"warning: {message} ({category.__name__})\n")

    return show_warning
