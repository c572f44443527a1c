"""The process ``test_real_react`` kills mid-run: ``python crashchild.py CONFIG_JSON``.

It runs the forced-note agent against the real server with a SQLite store and a SQLite commit
log; after its first model answer it stalls inside the second model call (and says so in the
marker file), where the test SIGKILLs it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# The repository root, so that the graph is built from tests.real_model.realagent, as in the test.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from stargraph.checkpoint import SqliteStore
from stargraph.llm import OpenAIChatModel
from stargraph.tools import SqliteCommitLog
from tests.real_model import realagent


def main(config: dict[str, str]) -> None:
    model = OpenAIChatModel(
        config["model"],
        base_url=config["base_url"],
        api_key=config["api_key"],
        profile="llama.cpp",
        timeout=600.0,  # catches a hung server; replies are bounded by max_tokens
    )
    stalling = realagent.StallingModel(model, answers=1, marker=Path(config["marker"]))
    store = SqliteStore(config["db"])
    arbiter = realagent.arbiter(
        Path(config["workspace"]), commit_log=SqliteCommitLog(config["commit_log"])
    )
    app = realagent.crash_graph().compile(
        store=store, services={"model": stalling, "arbiter": arbiter}
    )
    app.invoke({"task": realagent.TASK}, run_id=config["run_id"])
    raise SystemExit("the run finished, but it should have stalled in its second model call")


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
