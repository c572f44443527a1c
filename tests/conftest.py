"""Fixtures shared by the whole test tree.

``store`` is a fresh checkpoint store, closed after the test: a SQLite file under
``tmp_path`` by default. A module that must hold for every store says so with
``pytestmark = pytest.mark.stores("memory", "sqlite")``; its tests then run once per kind
(test ids ``[memory]`` and ``[sqlite]``). A module or class that defines its own ``store``
fixture (an agent store, a proposal store, PostgreSQL) overrides this one as usual.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from hypothesis import settings

from stargraph.checkpoint import CheckpointStore, MemoryStore, SqliteStore

# No per-example deadline for any property: Hypothesis's default (200 ms) is a timing check,
# and an example that builds a CLIPS engine took longer than that on a busy two-core machine,
# failing a test that had found no bug. Loaded here, before any test module is imported, so
# every @settings(...) inherits it.
settings.register_profile("stargraph", deadline=None)
settings.load_profile("stargraph")

SLOW_TESTS: Final[dict[str, tuple[str, ...]]] = {
    # Marked `slow` here rather than beside each test, so this one table is what `make check`
    # leaves out for time (each test took a second or more on a busy two-core machine; "*":
    # the whole file). tests/test_habits.py checks that every name still names a test.
    #
    # The command or Python in fresh processes: each one pays interpreter start and imports.
    "tests/cli/test_cli_paths.py": ("*",),
    "tests/cli/test_cli_mistakes.py": ("*",),
    "tests/cli/test_issue44_cli_paths.py": ("*",),
    "tests/cli/test_cli_live.py": (
        "test_importing_the_cli_package_is_light",
        "test_main_entry_point_in_a_fresh_process",
    ),
    "tests/ui/test_ui_cli.py": ("test_served_console_shows_a_run_made_by_stargraph_run",),
    "tests/test_benchmarks_smoke.py": ("*",),
    "tests/test_demo.py": ("*",),
    "tests/replay/test_issue48_versions.py": (
        "test_issue48_stargraph_check_in_parallel_with_json_junit_and_exit_codes",
    ),
    "tests/workers/test_workers_sqlite.py": ("*",),
    "tests/test_crash.py": ("*",),
    "tests/runtime/test_cancel.py": (
        "test_cli_resume_cancelled_by_ctrl_c_prints_the_resume_command",
        "test_cli_run_cancelled_by_a_signal_prints_the_resume_command",
        "test_cli_second_ctrl_c_stops_at_once_and_leaves_the_run_orphaned",
    ),
    "tests/runtime/test_durable.py": (
        "test_concurrent_runs_in_processes_share_one_sqlite_file",
        "test_interrupted_run_resumes_in_a_fresh_process",
    ),
    "tests/checkpoint/test_run_owners.py": (
        "test_two_processes_resuming_one_run_run_its_nodes_once",
    ),
    "tests/runtime/test_threads.py": (
        "test_a_turn_killed_mid_step_resumes_and_the_next_turn_sees_its_result",
    ),
    "tests/ir/test_hash.py": (
        "test_hash_is_the_same_in_every_process",
        # and two hypothesis properties
        "test_hash_independent_of_key_order",
        "test_json_round_trip",
    ),
    "tests/skills/test_skills.py": ("test_site_ids_match_across_processes",),
    "tests/skills/refs/test_refs_stores.py": (
        "test_hashing_embedder_is_deterministic_across_processes",
    ),
    "tests/llm/test_llm_data.py": (
        "test_fingerprint_is_the_same_in_another_process",
        "test_importing_stargraph_llm_does_not_import_openai",
        # and two hypothesis properties
        "test_fingerprint_changes_with_content",
        "test_fingerprint_ignores_key_order",
    ),
    "tests/test_public_api.py": ("test_import_is_light",),
    "tests/runtime/test_remote_executor.py": (
        "test_fan_out_matches_the_local_executor_and_replays",
        "test_timeouts_apply_to_remote_tasks",
    ),
    "tests/fathom/test_fathom_docs.py": ("test_trust_page_examples_run_and_print_what_they_say",),
    "tests/test_invariant9.py": (
        "test_invariant9_allowlists_hold_no_stale_entries",
        "test_invariant9_no_bare_builtin_raise_outside_the_allowlist",
    ),
    # Property and fuzz tests with many generated examples.
    "tests/fathom/test_fathom_sandbox_property.py": ("*",),
    "tests/skills/machine/test_machine_loader.py": ("test_loader_fuzz_gives_only_typed_errors",),
    "tests/skills/markdown/test_skillmd_fuzz.py": (
        "test_fuzzed_frontmatter_yields_only_typed_errors",
    ),
    "tests/llm/test_llm_chat_data_errors.py": (
        "test_any_bad_chat_data_raises_only_chat_data_errors",
    ),
    "tests/tools/test_seed_b18.py": (
        "test_B18_builtin_argument_validation_raises_only_typed_errors",
    ),
    "tests/agents/test_agents_pool.py": (
        "test_D11_any_malformed_spawn_params_raise_only_agent_config_errors",
        "test_D9_any_malformed_agent_data_raises_only_agent_config_errors",
    ),
    "tests/fathom/test_fathom_engine.py": (
        "test_hostile_strings_round_trip_and_change_no_decision",
    ),
    "tests/tools/test_tools_commit.py": (
        "test_fast_canonical_json_equals_rfc8785",
        "test_tampering_with_any_byte_of_a_stored_record_is_detected",
    ),
    "tests/tools/test_tools_spec.py": ("test_llm_name_is_openai_safe_and_reversible",),
    "tests/checkpoint/test_checkpoint_sqlite.py": (
        "test_json_values_round_trip_like_the_memory_store",
    ),
    # Many trials, threads, deep stacks or real waits.
    "tests/runtime/test_hardening_runtime.py": (
        "test_exactly_once_under_timeout_and_retry_100_trials",
    ),
    "tests/tools/test_tools_arbiter.py": (
        "test_100_concurrent_pairs_locking_ab_and_ba_through_dispatch_all_finish",
    ),
    "tests/checkpoint/test_checkpoint_conformance.py": ("TestSqliteStoreFull",),
    "tests/skills/machine/test_machine_schemas_deep.py": (
        "test_a_spawn_chain_deeper_than_the_recursion_limit_builds_and_bounds",
        "test_an_exit_cascades_through_a_stack_deeper_than_the_recursion_limit",
    ),
    "tests/fathom/test_fathom_resources.py": (
        "test_bound_method_callback_does_not_leak_the_environment_once_closed",
        "test_engine_without_callbacks_is_freed_without_close",
    ),
    "tests/fathom/test_fathom_sandbox.py": (
        "test_a_long_loop_is_stopped_by_the_time_budget",
        "test_an_endless_loop_is_refused_instead_of_hanging_decide",
        "test_recursion_is_refused_instead_of_crashing_the_process",
        "test_string_doubling_is_stopped_by_the_memory_limit",
    ),
    "tests/runtime/test_concurrency.py": (
        "test_issue18_async_and_sync_branches_of_one_step_run_together",
        "test_issue18_the_same_under_ainvoke",
        "test_issue18_three_sync_branches_run_together_by_default",
    ),
    "tests/llm/test_llm_token_stream.py": (
        "test_issue18_a_stream_that_fails_after_tokens_is_not_retried",
        "test_issue18_a_stream_that_fails_before_any_token_is_retried",
    ),
    "tests/checkpoint/test_faults.py": (
        "test_disk_full_during_a_commit",
        "test_read_only_database_file",
        "test_read_only_database_folder",
    ),
    "tests/checkpoint/test_long_runs.py": ("test_issue19_react_run_stores_linearly",),
}
"""Tests marked ``slow`` by file (relative to the repository) and test or class name."""

STORE_KINDS = ("memory", "sqlite")
"""The kinds ``pytest.mark.stores`` accepts: the two stores that need no server."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of :data:`SLOW_TESTS` ``slow``; run the ``real_model`` tests last.

    ``make test`` builds the model server in the background while the other tests run, so the
    tests that need it come at the end (in their usual order), when the build is done.
    """
    for item in items:
        file, *names = item.nodeid.split("::")
        slow = SLOW_TESTS.get(file, ())
        if "*" in slow or {name.partition("[")[0] for name in names} & set(slow):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("real_model") is not None)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run the tests of a module marked ``stores(...)`` once per store kind it names."""
    marker = metafunc.definition.get_closest_marker("stores")
    if marker is None or "store" not in metafunc.fixturenames:
        return
    unknown = set(marker.args) - set(STORE_KINDS)
    if unknown or not marker.args:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: pytest.mark.stores takes kinds out of "
            f"{STORE_KINDS}, got {marker.args!r}"
        )
    metafunc.parametrize("store", marker.args, indirect=True)


@pytest.fixture
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CheckpointStore]:
    """A fresh checkpoint store (SQLite unless the module's ``stores`` mark says), closed
    after the test."""
    kind = getattr(request, "param", "sqlite")
    made: CheckpointStore = MemoryStore() if kind == "memory" else SqliteStore(tmp_path / "sg.db")
    yield made
    made.close()
