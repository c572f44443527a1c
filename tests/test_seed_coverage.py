"""Every row of the seed checklist (``../shared/design/SEED-CHECKLIST.md``, rows A1 .. E14)
maps to named tests that exist, or is listed as open with the reason and the work that will
cover it, so a row cannot silently lose its test.

:data:`ROWS` is the table: row id -> (what the row asks, the tests that prove it, as pytest
node ids). :data:`OPEN_ROWS` is the visible debt: row id -> why it is not covered yet and
which issue or work covers it. The tests below check that the table and the open rows
together are exactly the checklist's 81 rows, with no row in both (and, where the checklist
itself is beside the repository, the same ids), that every node id names a test function
that exists (read from the files' syntax trees, so nothing is imported or run), that a test
named for a row (``test_B18_...``) names a row that exists, and that no open row has a test
named for it (such a row is covered: move it to :data:`ROWS`). Renaming or deleting a listed
test fails here until the table is updated with the test that took its place.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKLIST = ROOT.parent / "shared" / "design" / "SEED-CHECKLIST.md"
SECTIONS = {"A": 23, "B": 21, "C": 8, "D": 15, "E": 14}
"""Rows per section of the checklist (81 in all; some headings still give older counts)."""

MR = "tests/skills/machine/test_machine_runtime.py"
ML = "tests/skills/machine/test_machine_loader.py"
MS = "tests/skills/machine/test_machine_schemas.py"
MN = "tests/skills/machine/test_machine_lanes.py"
MP = "tests/skills/machine/test_machine_proposals.py"
TA = "tests/tools/test_tools_arbiter.py"
TL = "tests/tools/test_tools_locks.py"
TR = "tests/tools/test_tools_registry.py"
TS = "tests/tools/test_tools_spec.py"
TB = "tests/tools/test_tools_build.py"
TC = "tests/tools/test_tools_commit.py"
TY = "tests/tools/test_tools_safety.py"
SL = "tests/skills/markdown/test_skillmd_loading.py"
SR = "tests/skills/markdown/test_skillmd_running.py"
AL = "tests/agents/test_agents_lifecycle.py"
AP = "tests/agents/test_agents_pool.py"
AQ = "tests/agents/test_agents_pipeline.py"
MSN = "tests/skills/machine/test_machine_session.py"
SK = "tests/skills/test_skills.py"
SE = "tests/test_seed_rows.py"
B18 = "tests/tools/test_seed_b18.py"
RA = "tests/skills/react/test_react_acceptance.py"
RS = "tests/skills/react/test_react_salience.py"

ROWS: dict[str, tuple[str, tuple[str, ...]]] = {
    # A. Choir skill system
    "A1": ("SkillSpec loader; errors name file and JSON path", (
        f"{ML}::test_A1_missing_and_mistyped_fields_name_file_and_json_path",
        f"{ML}::test_A1_invalid_json_names_the_file",
    )),
    "A2": ("unknown initial state / transition target", (
        f"{ML}::test_A2_unknown_initial_state_and_unknown_target_name_state_event_target",
    )),
    "A3": ("no terminal, terminal with transitions, dead end", (
        f"{ML}::test_A3_no_terminal_terminal_with_transitions_and_dead_end",
    )),
    "A4": ("every unreachable state listed", (
        f"{ML}::test_A4_every_unreachable_state_is_listed",
    )),
    "A5": ("duplicate events in one state", (f"{ML}::test_A5_duplicate_events_in_one_state",)),
    "A6": ("allowed_tools entry absent from the registry", (
        f"{ML}::test_A6_unknown_tool_names_tool_and_state",
    )),
    "A7": ("strict load, frozen registry, content-derived versions", (
        f"{ML}::test_A7_strict_load_fails_with_every_problem_and_no_registry",
        f"{ML}::test_A7_registry_version_is_derived_from_the_specs_content",
    )),
    "A8": ("agent scope overrides global, logged; duplicates in a scope fail", (
        f"{ML}::test_A8_agent_scope_overrides_global_and_duplicates_in_one_scope_fail",
    )),
    "A9": ("step prompt holds only the current state", (
        f"{MR}::test_A9_prompt_holds_context_memory_objective_and_step_context_only",
    )),
    "A10": ("offered exactly allowed tools, transitions, finish in terminal", (
        f"{MR}::test_A10_offered_exactly_allowed_tools_transitions_and_finish_in_terminal",
    )),
    "A11": ("tool_not_allowed rejection shape; no allowlist admits nothing", (
        f"{MR}::test_A11_tool_not_allowed_rejection",
        "tests/skills/machine/test_machine_no_allowlist.py"
        "::test_A11_state_built_with_allowed_tools_none_admits_no_tool",
        "tests/skills/machine/test_machine_no_allowlist.py"
        "::test_A11_schema_state_with_tools_none_admits_no_tool",
        f"{SE}::test_A11_a_call_from_a_skill_state_without_an_allowlist_admits_no_tool",
    )),
    "A12": ("invalid_transition and finish_not_terminal", (
        f"{MR}::test_A12_invalid_transition_and_finish_not_terminal_share_the_shape",
    )),
    "A13": ("a valid transition is committed", (
        f"{MR}::test_A13_valid_transition_appends_to_the_commit_log",
    )),
    "A14": ("per-step retry budget 2, reset by a valid proposal", (
        f"{MR}::test_A14_third_invalid_proposal_fires_the_error_transition",
        "tests/llm/test_llm_server.py::test_A14_set_script_answers_from_its_own_first_reply",
    )),
    "A15": ("max_steps counts LLM steps", (
        f"{MR}::test_A15_max_steps_counts_llm_steps_and_force_terminates",
    )),
    "A16": ("cancel at a step boundary; non-interruptible defers", (
        f"{MR}::test_A16_cancel_stops_an_interruptible_skill_at_the_next_step_boundary",
        f"{MR}::test_A16_non_interruptible_skill_defers_cancel_to_a_terminal_state",
    )),
    "A17": ("one active skill per lane; Choir profile depth 1", (
        f"{MR}::test_A17_one_active_skill_per_lane",
        f"{MS}::test_A17_choir_profile_refuses_a_spawned_schema_that_spawns",
    )),
    "A18": ("input and output schemas checked", (
        f"{MR}::test_A18_input_and_output_are_validated",
    )),
    "A19": ("skill code holds no tool handle", (
        f"{MR}::test_A19_skill_code_holds_no_tool_handle",
    )),
    "A20": ("session/lane/skill/step lineage on every event", (
        f"{MR}::test_A20_every_event_carries_session_lane_skill_step_lineage",
    )),
    "A21": ("skill-builder and tool-builder ship as SkillSpecs", (
        f"{MP}::test_A21_builtin_builders_have_the_seed_shape",
        f"{MP}::test_A21_skill_builder_runs_end_to_end_and_its_proposal_loads",
    )),
    "A22": ("skill descriptions in the system-prompt summary of the skills", (
        f"{MR}::test_A22_every_step_system_prompt_summarises_the_skills_with_their_descriptions",
        f"{MR}::test_A9_prompt_holds_context_memory_objective_and_step_context_only",
    )),
    "A23": ("session SM: start, heartbeat, stop, crash recovery from checkpoints", (
        f"{MSN}::test_A23_session_starts_heartbeats_and_stops_durably",
        f"{MSN}::test_A23_a_session_whose_heartbeat_stopped_resumes_its_skills_from_their_checkpoints",
        f"{MSN}::test_A23_recovery_restarts_a_run_cut_off_before_its_first_checkpoint",
        f"{MSN}::test_A23_a_killed_sessions_skill_resumes_in_another_process",
    )),
    # B. Choir tool system
    "B1": ("llm and runtime views of a manifest", (
        f"{TS}::test_llm_view_never_contains_a_runtime_key_or_value",
        f"{TS}::test_runtime_fields_cover_every_non_llm_field",
        f"{TR}::test_seed_style_manifest_loads_both_views",
    )),
    "B2": ("canonical names; calls only from the structured channel", (
        f"{TS}::test_non_canonical_ids_are_rejected",
        "tests/skills/machine/test_machine_b2_text_calls.py"
        "::test_B2_call_like_text_in_a_skill_step_proposes_nothing",
        "tests/skills/react/test_react_b2_text_calls.py"
        "::test_B2_call_like_text_in_a_react_reply_is_the_answer_not_a_call",
    )),
    "B3": ("schema validation before execution; refusal logged", (
        f"{TA}::test_a_refused_call_never_reaches_the_body_and_locks_nothing",
    )),
    "B4": ("load order, overrides, startup failures, frozen registry", (
        f"{TR}::test_load_order_and_overrides_are_logged",
        f"{TR}::test_malformed_json_names_the_file",
        f"{TR}::test_missing_executable_names_the_file",
        f"{TR}::test_registry_is_frozen_after_build",
    )),
    "B5": ("S/X lock compatibility; S tools parallel, X serialise", (
        f"{TL}::test_shared_locks_are_granted_together",
        f"{TL}::test_exclusive_conflicts_with_everything",
        f"{TA}::test_shared_tools_run_in_parallel_and_exclusive_tools_serialise",
    )),
    "B6": ("all-or-nothing locksets, no hold-and-wait, lock_timeout", (
        f"{TL}::test_no_partially_held_lockset_is_ever_observable",
        f"{TL}::test_100_concurrent_opposite_order_pairs_all_finish",
        f"{TA}::test_lock_timeout_is_typed_audited_and_runs_nothing",
    )),
    "B7": ("templated lock keys; workspace:X intention locks", (
        f"{TS}::test_lock_templates_parse_and_render",
        f"{TL}::test_intention_locks_make_workspace_conflict_with_files",
    )),
    "B8": ("pipeline order, timeout, locks released; local or delegated", (
        f"{TA}::test_pipeline_order_validate_policy_lock_execute_commit_release",
        f"{TA}::test_a_timed_out_call_releases_its_locks",
        f"{TA}::test_a_body_exception_is_committed_released_and_typed",
        f"{B18}::test_B18_host_delegated_call_holds_its_locks_and_is_committed_like_a_local_one",
    )),
    "B9": ("append-only commit log, audit records, normalised results", (
        f"{TA}::test_results_are_normalised_and_payloads_content_addressed",
        f"{TA}::test_external_side_effects_get_an_audit_record",
        f"{TC}::test_sqlite_log_refuses_update_and_delete",
    )),
    "B10": ("exposure routes results to lanes", (
        f"{TA}::test_exposure_routes_results_to_lanes",
        f"{MN}::test_B16_exposure_routes_results_to_lane_views",
    )),
    "B11": ("prompt_mask shows summary and ref only", (
        f"{TA}::test_prompt_mask_shows_only_status_summary_and_ref",
    )),
    "B12": ("file tools confined to the workspace", (
        f"{TY}::test_path_escapes_are_refused_with_a_typed_error",
        f"{TY}::test_search_does_not_follow_symlinks_out",
    )),
    "B13": ("secrets reach only the declaring tool", (
        f"{TY}::test_a_secret_never_reaches_any_persisted_or_model_bound_byte",
    )),
    "B14": ("propose.* meta-tools only create pending proposals", (
        f"{MP}::test_B14_meta_tools_only_create_pending_proposals",
        f"{MP}::test_B14_running_session_keeps_its_registry_version",
    )),
    "B15": ("one Tool protocol for callables and subprocess tools", (
        f"{TR}::test_external_tool_speaks_json_on_stdin_stdout",
        f"{TR}::test_external_tool_arguments_follow_its_json_schema",
    )),
    "B16": ("edge and core lanes run concurrently", (
        f"{MN}::test_B16_edge_and_core_lanes_run_concurrently",
        f"{MN}::test_B16_lane_machines_are_data_checked_by_the_one_validator",
    )),
    "B17": ("working-memory window and per-lane summary", (
        f"{MN}::test_B17_working_memory_keeps_last_n_in_full_and_rolls_older_into_summary",
        f"{MN}::test_B17_each_lane_has_its_own_memory_and_summary",
    )),
    "B18": ("the 14 built-ins as example plugins with fakes", (
        f"{B18}::test_B18_the_fourteen_builtins_register_through_the_plugin_hooks",
        f"{B18}::test_B18_every_builtin_runs_through_one_arbiter_and_is_committed",
        f"{B18}::test_B18_memory_query_modes_semantic_hash_range",
        f"{B18}::test_B18_email_send_check_receive_over_smtp_and_imap",
        "tests/tools/test_seed_b18_tls.py::test_B18_email_send_check_receive_over_tls",
        "tests/tools/test_seed_b18_tls.py"
        "::test_B18_a_bad_server_certificate_is_a_typed_error_and_sends_nothing",
    )),
    "B19": ("fs.write patches by lines: replace a range, insert at a line, append", (
        "tests/tools/test_tools_builtins.py"
        "::test_B19_fs_write_patches_by_lines_replace_a_range_insert_at_a_line_append",
        "tests/tools/test_tools_builtins.py"
        "::test_B19_a_bad_line_patch_is_a_typed_error_and_leaves_the_file_as_it_was",
        "tests/tools/test_tools_builtins.py::test_B19_a_line_patch_stays_inside_the_workspace",
    )),
    "B20": ("a tool built from its source directory at registry build, sandboxed", (
        f"{TB}::test_B20_a_tool_is_built_from_its_source_directory_when_the_registry_is_built",
        f"{TB}::test_B20_a_changed_source_changes_the_tools_identity",
        f"{TB}::test_B20_a_failed_build_names_the_tool_the_directory_and_the_stderr_tail",
        f"{TB}::test_B20_the_build_has_no_network_and_writes_only_a_copy_of_its_sources",
    )),
    "B21": ("a per-tool mutex is the lock tool:<name>:X", (
        f"{TA}::test_B21_a_tool_holding_its_own_mutex_never_runs_twice_at_once",
    )),
    # C. Schemas
    "C1": ("schema = prompt + states + guard", (
        f"{MS}::test_C1_schema_is_prompt_states_guard_and_states_carry_described_moves",
    )),
    "C2": ("prompt order, top to bottom", (
        f"{MS}::test_C2_three_level_prompt_is_master_levels_top_down_user_context",
    )),
    "C3": ("tools and transitions from the innermost schema", (
        f"{MS}::test_C3_tools_and_transitions_come_only_from_the_innermost_level",
    )),
    "C4": ("masks; configurable positions", (
        f"{MS}::test_C4_masks_hide_ancestor_prompts_and_positions_are_configurable",
    )),
    "C5": ("parent completes when the child exits; exit status -> event", (
        f"{MS}::test_C5_a_spawning_state_cannot_be_completed_without_running_the_child",
        f"{MS}::test_C5_the_childs_exit_status_picks_the_parents_event",
    )),
    "C6": ("every level bounded", (
        f"{MS}::test_C6_every_level_is_bounded_exit_to_parent_or_hand_back_to_user",
    )),
    "C7": ("declared spawns only; cycles fail compile", (
        f"{MS}::test_C7_only_declared_sub_schemas_spawn_and_cycles_fail_compile",
    )),
    "C8": ("root loop is a schema, hot-swapped", (
        f"{MS}::test_C8_root_loop_is_a_schema_hot_swapped_by_a_user_command",
    )),
    # D. Colibri / AMS
    "D1": ("SKILL.md parser; name is a slug, '_' refused with a fix", (
        f"{SL}::test_D1_a_name_with_an_underscore_is_refused_naming_file_name_and_fix",
        f"{SL}::test_D1_frontmatter_fields_unknown_keys_and_references",
        f"{SL}::test_D1_every_problem_named_with_file_and_key",
        f"{SL}::test_D1_donor_section_format",
    )),
    "D2": ("lenient and strict scans", (
        f"{SL}::test_D2_strict_load_lists_all_five_problems",
        f"{SL}::test_D2_lenient_load_reports_counts_and_loads_45",
    )),
    "D3": ("workflow and verification compile to graphs", (
        f"{SR}::test_D3_workflow_runs_end_to_end_with_a_real_arbiter",
        f"{SR}::test_D3_verification_failures_are_reported_and_halt",
    )),
    "D4": ("trigger matching", (f"{SL}::test_D4_registry_match_keywords_tags_tool_patterns",)),
    "D5": ("required_tools within the CV's permissions", (
        f"{AL}::test_D5_required_tools_outside_permissions_fail_initialization",
    )),
    "D6": ("agent lifecycle, SQLite state, audit rows", (
        f"{AL}::test_D6_lifecycle_is_data_validated_by_the_machine_validator",
        f"{AL}::test_D6_illegal_transition_raises",
        f"{AL}::test_D6_states_in_sqlite_and_each_transition_audited",
    )),
    "D7": ("writeback contract, warn or block", (
        f"{AL}::test_D7_writeback_warn_mode_warns_and_terminates",
        f"{AL}::test_D7_writeback_block_mode_refuses_termination",
    )),
    "D8": ("orphan scan", (
        f"{AL}::test_D8_orphan_scan_flags_terminated_agents_without_thought_record",
        f"{AP}::test_D8_orphan_scan_leaves_live_and_failed_agents_alone",
    )),
    "D9": ("CV validates; allocation respects skills, permissions, limits", (
        f"{AL}::test_D9_profile_validates_and_allocation_respects_skills_permissions_limits",
        f"{AP}::test_D9_write_access_decides_allocation",
        f"{AP}::test_D9_admin_access_decides_allocation",
    )),
    "D10": ("hash-chained audit, verify_chain", (
        f"{AL}::test_D10_tampered_audit_row_is_detected",
        f"{TC}::test_first_record_chains_from_64_zeros_and_hash_is_d10",
    )),
    "D11": ("spawn params, pool strategies, 6-tier taxonomy", (
        f"{AP}::test_D11_spawn_injects_params_through_the_store",
        f"{AP}::test_D11_each_pool_strategy_chooses_by_its_own_rule",
        f"{AP}::test_D11_six_tier_taxonomy_tags_skill_list",
    )),
    "D12": ("GATHER -> ANALYZE -> PLAN -> APPLY, a checkpoint per phase boundary", (
        f"{AQ}::test_D12_each_phase_boundary_is_a_checkpoint_and_a_crash_resumes_at_the_last",
    )),
    "D13": ("at TERMINATE the slot is released and the parent notified", (
        f"{AQ}::test_D13_terminate_releases_the_agent_and_notifies_the_parent_durably",
        f"{AQ}::test_D13_a_waiting_parent_wakes_when_its_agent_terminates",
        f"{AQ}::test_D13_a_parent_waiting_on_another_handle_of_the_file_sees_the_notification",
        f"{AQ}::test_D13_a_failed_agent_notifies_with_its_error_and_waiting_can_time_out",
    )),
    "D14": ("the orphan scan runs periodically", (
        f"{AQ}::test_D14_orphan_scan_runs_periodically",
        f"{AQ}::test_D14_the_scanner_loop_scans_on_schedule_until_stopped",
        f"{AQ}::test_D14_a_real_scanner_thread_stops_on_request",
    )),
    "D15": ("profile limits size the pool and the queue depth", (
        f"{AQ}::test_D15_limits_size_the_pool_and_the_queue_depth",
        f"{AQ}::test_D15_the_default_queue_depth_is_one_task_per_slot",
        f"{AQ}::test_D15_an_ended_agent_gives_its_slot_to_the_oldest_queued_task",
        f"{AQ}::test_D15_the_queue_full_error_survives_a_process_boundary",
    )),
    # E. Stargraph skills page
    "E1": ("Skill validates name, version, kind, tool ids", (
        f"{SK}::test_skill_validators_name_field_and_value",
    )),
    "E2": ("utility skill with a write tool, workflow skill routing on any path from an LLM", (
        f"{SK}::test_utility_skill_with_a_write_tool_is_rejected",
        f"{SE}::test_E2_utility_skill_with_write_and_exec_tools_is_refused_where_registered",
        f"{SE}::test_E2_utility_skill_with_write_and_exec_tools_is_refused_where_compiled",
        f"{SE}::test_E2_utility_skill_with_write_and_exec_tools_is_refused_where_mounted",
        f"{SE}::test_E2_utility_skill_with_write_and_exec_tools_is_refused_where_compiled_from_ir",
        f"{SE}::test_E2_a_router_two_plain_nodes_after_an_llm_node_is_refused_naming_the_path",
        f"{SE}::test_E2_a_router_after_a_subgraph_that_calls_a_model_is_refused",
        f"{SE}::test_E2_a_routed_path_is_refused_where_a_workflow_skill_is_compiled_from_ir",
    )),
    "E3": ("a plugin name clash names both providers", (
        "tests/plugin/test_plugins.py::test_two_plugins_registering_one_skill_fail_naming_both",
    )),
    "E4": ("site ids from the IR position, stable", (
        f"{SK}::test_site_ids_are_stable_and_distinct",
        f"{SK}::test_site_ids_match_across_processes",
    )),
    "E5": ("skill hash feeds the parent hash; old checkpoint fails loudly", (
        f"{SK}::test_child_change_changes_the_parent_hash_and_blocks_resume",
    )),
    "E6": ("a write to an undeclared parent key fails at compile time", (
        f"{SK}::test_skill_compile_rejects_undeclared_output",
    )),
    "E7": ("bubble_events", (f"{SK}::test_bubble_events_on_and_off",)),
    "E8": ("set rejected, frozenset accepted", (
        f"{SK}::test_set_field_rejected_frozenset_accepted",
        f"{SE}::test_E8_a_set_inside_a_nested_model_is_rejected",
    )),
    "E9": ("ReAct: native calls; max_steps, done, error_budget 3", (
        f"{RA}::test_three_tool_run_ends_with_the_right_final_answer",
        f"{RA}::test_a_model_that_never_stops_halts_at_max_steps",
        f"{RA}::test_done_stops_the_loop_and_is_named_in_the_run_record",
        f"{RA}::test_error_budget_stops_the_loop_and_is_named_in_the_run_record",
        "tests/skills/react/test_react_graph.py::test_graph_shape_config_and_rules",
        "tests/skills/react/test_issue44_react_termination.py::test_issue44_each_way_out_is_a_rule_named_on_the_stored_run",
        "tests/skills/react/test_issue44_react_termination.py::test_issue44_a_done_flag_ends_the_loop_and_keeps_the_tool_result",
    )),
    "E10": ("replay stubs by (node, step); think is must-stub", (
        "tests/replay/test_replay.py::test_replay_reproduces_state_and_events_without_calling_the_model",
        "tests/replay/test_replay.py::test_more_calls_than_recorded_is_a_miss",
        "tests/skills/react/test_react_graph.py::test_graph_shape_config_and_rules",
    )),
    "E11": ("rag, autoresearch and wiki reference skills", (
        "tests/skills/refs/test_refs_rag.py::test_rag_is_a_workflow_skill_with_separate_nodes",
        "tests/skills/refs/test_refs_autoresearch.py::test_autoresearch_is_an_agent_skill_listing_its_tools",
        "tests/skills/refs/test_refs_wiki.py::test_wiki_is_an_agent_skill_fanning_out_with_send",
        "tests/skills/refs/test_refs_wiki.py::test_every_claim_cites_a_retrieved_source",
    )),
    "E12": ("requires checked: a live run lacking a required service does not start", (
        f"{SE}::test_E12_a_live_run_without_a_required_service_does_not_start",
        f"{SE}::test_E12_replay_needs_no_services_and_resume_does",
    )),
    "E13": ("observe appends the result and updates salience", (
        f"{RS}::test_E13_a_failed_call_outranks_an_old_success_and_scores_decay_by_step",
        f"{RS}::test_E13_a_repeated_or_superseded_result_ranks_low",
        f"{RS}::test_E13_a_budgeted_run_elides_the_least_salient_observation_and_keeps_the_pairing",
        f"{RS}::test_E13_replay_with_the_budget_is_byte_identical",
        f"{RS}::test_E13_without_a_budget_nothing_changes",
    )),
}  # fmt: skip

OPEN_ROWS: dict[str, str] = {
    "E14": "issue 48: replay across graph versions (unchanged regions served from the "
    "record) is a project of its own",
}
"""Rows not covered yet: row id -> why, and which issue or work will cover it. A visible debt,
not a pass: a row leaves this mapping for :data:`ROWS` when a test proves it."""

ROW_ID = re.compile(r"^test_([A-E]\d{1,2})_")

# Tests that prove two rows at once, listed under both on purpose.
SHARED_TESTS = {("B16", "B10"), ("B18", "B8"), ("A9", "A22")}


def _shared(named: str, listed: str) -> bool:
    return (named, listed) in SHARED_TESTS


def _row_key(row: str) -> tuple[str, int]:
    return row[0], int(row[1:])


ROW_IDS: list[str] = sorted(ROWS, key=_row_key)


@functools.cache
def _functions_in(path: str) -> frozenset[str]:
    """The test functions of a file, as node-id suffixes (``name``, ``Class::name``)."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"), filename=path)
    found: set[str] = set()

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if node.name.startswith("test_"):
                    found.add(prefix + node.name)
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                walk(node.body, f"{prefix}{node.name}::")

    walk(tree.body, "")
    return frozenset(found)


def _expected_rows() -> list[str]:
    return [f"{s}{i}" for s, count in SECTIONS.items() for i in range(1, count + 1)]


def test_the_table_and_the_open_rows_are_exactly_the_checklist_rows() -> None:
    expected = _expected_rows()
    assert sorted({*ROWS, *OPEN_ROWS}, key=_row_key) == expected
    assert len(ROWS) + len(OPEN_ROWS) == 81
    # The checklist lives beside the repository in the project's shared folder; where it
    # is, its own rows must be these (a row added there must be added here).
    if CHECKLIST.is_file():
        listed: list[str] = re.findall(
            r"^\| ([A-E]\d{1,2}) \|", CHECKLIST.read_text(), re.MULTILINE
        )
        assert sorted(listed, key=_row_key) == expected


def test_no_row_is_both_covered_and_open() -> None:
    assert sorted(set(ROWS) & set(OPEN_ROWS), key=_row_key) == []


def test_every_open_row_says_why_and_what_covers_it() -> None:
    assert [row for row, why in OPEN_ROWS.items() if len(why.split()) < 5] == []


def test_an_open_row_has_no_test_named_for_it() -> None:
    # A test named for a row means the row is covered: it belongs in ROWS with that test.
    named = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        relative = path.relative_to(ROOT).as_posix()
        for name in _functions_in(relative):
            match = ROW_ID.match(name.rpartition("::")[2])
            if match and match.group(1) in OPEN_ROWS:
                named.append(f"{relative}::{name}")
    assert named == [], "open rows with a test named for them; move them to ROWS"


@pytest.mark.parametrize("row", ROW_IDS)
def test_every_row_has_a_named_test_that_exists(row: str) -> None:
    """One case per checklist row (its id is in the test id): the tests listed for the row
    exist, so a row cannot lose its proof by a rename or a deletion."""
    _, node_ids = ROWS[row]
    assert node_ids, f"row {row} lists no test"
    missing = []
    for node_id in node_ids:
        path, _, name = node_id.partition("::")
        if not (ROOT / path).is_file() or name.split("[")[0] not in _functions_in(path):
            missing.append(node_id)
    assert missing == [], f"row {row}: renamed or deleted tests; update ROWS:\n" + "\n".join(
        missing
    )


def test_tests_named_for_a_row_name_a_row_that_exists() -> None:
    strays = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        relative = path.relative_to(ROOT).as_posix()
        for name in _functions_in(relative):
            match = ROW_ID.match(name.rpartition("::")[2])
            if match and match.group(1) not in ROWS and match.group(1) not in OPEN_ROWS:
                strays.append(f"{relative}::{name}")
    assert strays == []


def test_the_row_named_tests_of_a_row_are_listed_under_it_when_listed_at_all() -> None:
    # A test named for one row but listed under another is a mapping mistake.
    wrong = []
    for row, (_, node_ids) in ROWS.items():
        for node_id in node_ids:
            match = ROW_ID.match(node_id.rpartition("::")[2])
            if match and match.group(1) != row and not _shared(match.group(1), row):
                wrong.append(f"{row}: {node_id}")
    assert wrong == []
