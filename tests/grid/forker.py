"""One process per test session that forks the grid's killed children.

Importing stargraph and the grid's graphs takes a second or more; a child forked from a
process that has them loaded starts at once. ``python -c "from tests.grid import forker;
forker.main()"`` reads one JSON request per line on stdin (``{"argv": [...], "env":
{...}}``), forks a child that sets ``env``, runs :func:`tests.grid.cells.child` with
``argv`` and exits, waits for it, and answers one JSON line: the child's exit code, or
minus the signal that ended it (as ``subprocess`` reports it). The server itself opens no
store and starts no thread, so a fork of it holds nothing another process shares.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

from tests.grid import cells


def _run_child(argv: list[str], env: dict[str, str]) -> None:
    code = 0
    try:
        os.environ.update(env)
        sys.argv = ["child", *argv]
        cells.child()
    except BaseException:  # the child reports any failure through its exit code
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> None:
    """Serve fork requests until stdin closes."""
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _run_child(request["argv"], request["env"])
        _, status = os.waitpid(pid, 0)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        sys.stdout.write(json.dumps({"returncode": code}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
