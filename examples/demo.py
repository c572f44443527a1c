"""The flagship demo: compile a graph to content-hashed IR and run it on the embedded defaults.

``make demo`` runs this file. It prints the graph hash, the event stream of a map-reduce run
and the final state.
"""

from __future__ import annotations

from stargraph.examples.basics import mapreduce_graph


def main() -> None:
    """Compile, show the hash, stream one run, print the final state."""
    graph = mapreduce_graph()
    app = graph.compile()
    print(f"graph {graph.name!r}  hash {app.graph_hash}")
    for event in app.stream({"limit": 4}, run_id="demo-1"):
        where = f" node={event.node}" if event.node else ""
        print(f"  step {event.step:>2}  {event.kind}{where}")
    final = app.invoke({"limit": 4}, run_id="demo-2")
    print(f"final state: {final.model_dump()}")


if __name__ == "__main__":
    main()
