"""The ``stargraph`` click group: it assembles the commands of the sibling modules and turns
every failure into one paragraph on stderr (``error: ...``) with exit status 1; usage errors
exit 2; ``--debug`` adds the traceback.

Each command lives in the module of its subject (``_graphs``, ``_run``, ``_inspect``,
``_replay``, ``_workers``, ``_skills``, ``_plugins``, ``_rules``, ``_proposals``, ``_ui``,
``_serve``); what they print in common is in ``_output``. None of them imports this module.
"""

from __future__ import annotations

import traceback
from typing import Any

import click

from stargraph.cli._check import check_command
from stargraph.cli._graphs import compile_command, draw_command, hash_command
from stargraph.cli._inspect import diff_command, runs_command, show_command
from stargraph.cli._load import CliError, importable_cwd
from stargraph.cli._mcp import mcp_group
from stargraph.cli._output import describe_error
from stargraph.cli._plugins import plugins_group
from stargraph.cli._proposals import proposals_group
from stargraph.cli._replay import replay_command
from stargraph.cli._rules import rules_group
from stargraph.cli._run import resume_command, run_command
from stargraph.cli._serve import serve_command
from stargraph.cli._skills import skills_group
from stargraph.cli._ui import ui_command
from stargraph.cli._workers import fork_command, submit_command, worker_command

__all__ = ["cli"]


class _Group(click.Group):
    """A group that turns every error into one paragraph (and a traceback with --debug)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            if ctx.params.get("debug") and exc.__cause__ is not None:
                traceback.print_exception(exc)
            raise
        except (click.exceptions.Exit, click.Abort):
            raise
        except BrokenPipeError:
            # The reader went away (`stargraph runs | head`): click's main exits quietly.
            raise
        except Exception as exc:
            if ctx.params.get("debug"):
                traceback.print_exc()
            raise CliError(describe_error(exc)) from exc


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, envvar="STARGRAPH_DEBUG", help="Show tracebacks.")
@click.version_option(package_name="stargraph", prog_name="stargraph")
def cli(debug: bool) -> None:
    """stargraph: compile agent workflows into content-hashed graphs and run them durably.

    GRAPH arguments are a Python file (triage.py, or triage.py:graph to pick one graph), a
    reference module:attr to a Graph, a CompiledGraph or a function returning one, or an IR
    JSON file. Every command imports your code with the current directory on sys.path.
    Runs are kept in SQLite (--db, default .stargraph/stargraph.db).
    """
    importable_cwd()


for _command in (
    compile_command,
    hash_command,
    draw_command,
    run_command,
    resume_command,
    runs_command,
    show_command,
    diff_command,
    replay_command,
    check_command,
    fork_command,
    submit_command,
    worker_command,
    skills_group,
    plugins_group,
    rules_group,
    proposals_group,
    ui_command,
    mcp_group,
    serve_command,
):
    cli.add_command(_command)
