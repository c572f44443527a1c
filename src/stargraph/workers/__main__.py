"""``python -m stargraph.workers``: run a worker, or queue a run.

    python -m stargraph.workers --db postgresql://user@host/db [--lease 30] [--max-runs N]
        [--services pkg.module:fn]
    python -m stargraph.workers submit --db DB pkg.module:graph '{"input": 1}' [--run-id ID]

``--db`` is a ``postgresql://`` DSN or a SQLite file (default ``.stargraph/stargraph.db``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from stargraph.errors import StargraphError
from stargraph.workers._worker import Worker, load_services, submit


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=".stargraph/stargraph.db", help="DSN or SQLite file")
    parser.add_argument("--schema", default="stargraph", help="PostgreSQL schema")


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in and args_in[0] == "submit":
        sub = argparse.ArgumentParser(prog="python -m stargraph.workers submit")
        _common(sub)
        sub.add_argument("graph", help="module:attr of a Graph or a function returning one")
        sub.add_argument("input", nargs="?", default="{}", help="input as JSON")
        sub.add_argument("--run-id")
        sub.add_argument("--max-attempts", type=int, default=3)
        opts = sub.parse_args(args_in[1:])
        try:
            run_id = submit(
                opts.db,
                opts.graph,
                json.loads(opts.input),
                run_id=opts.run_id,
                max_attempts=opts.max_attempts,
                schema=opts.schema,
            )
        except (StargraphError, json.JSONDecodeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(run_id)
        return 0
    parser = argparse.ArgumentParser(prog="python -m stargraph.workers")
    _common(parser)
    parser.add_argument("--lease", type=float, default=30.0, help="lease seconds")
    parser.add_argument("--heartbeat", type=float, default=None, help="heartbeat seconds")
    parser.add_argument("--poll", type=float, default=1.0, help="idle re-check seconds")
    parser.add_argument("--max-runs", type=int, default=None)
    parser.add_argument("--idle-exit", type=float, default=None, help="exit after idle seconds")
    parser.add_argument("--name", default=None, help="worker name (default host:pid:rand)")
    parser.add_argument(
        "--services", default=None, help="module:fn returning the services mapping graphs need"
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    opts = parser.parse_args(args_in)
    logging.basicConfig(
        level=logging.INFO if opts.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        worker = Worker(
            opts.db,
            schema=opts.schema,
            lease_s=opts.lease,
            heartbeat_s=opts.heartbeat,
            poll_s=opts.poll,
            name=opts.name,
            services=None if opts.services is None else load_services(opts.services),
        )
    except StargraphError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    try:
        # SIGTERM or Ctrl-C: the run in progress goes back to the queue at its next step
        # boundary and the worker exits; a second one stops it at once.
        worker.run(max_runs=opts.max_runs, idle_exit_s=opts.idle_exit, handle_signals=True)
    except KeyboardInterrupt:
        pass
    finally:
        worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
