"""pg_cron statement budgets: parsing, rendering, reading live commands back, and planning."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leaseguard.core.budgets.config import (
    MAX_BUDGET_MS,
    BudgetConfig,
    FunctionName,
    UnparseableCommand,
    budget_config_from_mapping,
    format_budget,
    load_budget_config,
    parse_budget_ms,
    parse_function_name,
    parse_live_command,
    render_command,
)
from leaseguard.core.budgets.planning import HIDDEN_COMMAND, Action, LiveJob, plan_budgets
from leaseguard.core.errors import ConfigError

WHERE = "cron_budgets.jobs.claim.budget"
EXAMPLES = "such as 3s, 1500ms or 1min"

# --- budgets --------------------------------------------------------------------------------

VALID_CASES = [
    ("3s", 3000, "3s"),
    ("3000ms", 3000, "3s"),
    ("1min", 60_000, "60s"),
    ("2 min", 120_000, "120s"),
    ("1.5s", 1500, "1500ms"),
    ("60s", 60_000, "60s"),
    ("6s", 6000, "6s"),
    (" 3s \n", 3000, "3s"),
    ("3000", 3000, "3s"),  # a bare number is milliseconds, as statement_timeout reads it
    ("250", 250, "250ms"),
    (3000, 3000, "3s"),
    (1500.0, 1500, "1500ms"),
    ("0.25s", 250, "250ms"),
    (".5s", 500, "500ms"),
    ("1h", 3_600_000, "3600s"),
    ("24h", MAX_BUDGET_MS, "86400s"),
    ("1d", MAX_BUDGET_MS, "86400s"),
    ("+3s", 3000, "3s"),
]

INVALID_CASES = [
    ("-1s", f"{WHERE} must be greater than 0, got '-1s'"),
    (-5, f"{WHERE} must be greater than 0, got -5"),
    ("abc", f"{WHERE}: expected a statement budget {EXAMPLES}, got 'abc'"),
    ("0", f"{WHERE} must be greater than 0 (0 would disable statement_timeout)"),
    (0, f"{WHERE} must be greater than 0 (0 would disable statement_timeout)"),
    ("0s", f"{WHERE} must be greater than 0 (0 would disable statement_timeout)"),
    ("-0s", f"{WHERE} must be greater than 0 (0 would disable statement_timeout)"),
    ("", f"{WHERE} is empty: give a statement budget {EXAMPLES}"),
    ("  ", f"{WHERE} is empty: give a statement budget {EXAMPLES}"),
    ("inf", f"{WHERE}: expected a statement budget {EXAMPLES}, got 'inf'"),
    ("nan", f"{WHERE}: expected a statement budget {EXAMPLES}, got 'nan'"),
    (float("inf"), f"{WHERE}: expected a statement budget {EXAMPLES}, got inf"),
    (float("nan"), f"{WHERE}: expected a statement budget {EXAMPLES}, got nan"),
    ("1e3", f"{WHERE}: expected a statement budget {EXAMPLES}, got '1e3'"),
    ("3s; drop", f"{WHERE}: expected a statement budget {EXAMPLES}, got '3s; drop'"),
    (
        "3s'; select pg_sleep(100); --",
        f'{WHERE}: expected a statement budget {EXAMPLES}, got "3s\'; select pg_sleep(100); --"',
    ),
    ("25h", f"{WHERE}: '25h' exceeds the maximum budget of 24h"),
    (10**12, f"{WHERE}: 1000000000000 exceeds the maximum budget of 24h"),
    ("9" * 100, f"{WHERE}: '{'9' * 35}...' exceeds the maximum budget of 24h"),
    ("3S", f"{WHERE}: unknown unit 'S' in '3S'; use ms, s, min, h or d"),
    ("3 sec", f"{WHERE}: unknown unit 'sec' in '3 sec'; use ms, s, min, h or d"),
    ("1.5", f"{WHERE}: a bare number means milliseconds and must be whole, got '1.5'"),
    (1.5, f"{WHERE}: a bare number means milliseconds and must be whole, got 1.5"),
    ("0.5ms", f"{WHERE}: '0.5ms' is not a whole number of milliseconds"),
    (True, f"{WHERE}: expected a statement budget {EXAMPLES}, got True"),
    (None, f"{WHERE}: expected a statement budget {EXAMPLES}, got None"),
    (["3s"], f"{WHERE}: expected a statement budget {EXAMPLES}, got ['3s']"),
]


def job_in(plan, name):
    return next(job for job in plan.jobs if job.job.name == name)


@pytest.mark.parametrize(("value", "ms", "canonical"), VALID_CASES)
def test_budgets_normalise_to_milliseconds_and_render_canonically(value, ms, canonical):
    assert parse_budget_ms(value, where=WHERE) == ms
    assert format_budget(ms) == canonical


@pytest.mark.parametrize(("value", "message"), INVALID_CASES)
def test_invalid_budgets_are_rejected_naming_the_job_and_key(value, message):
    with pytest.raises(ConfigError) as caught:
        parse_budget_ms(value, where=WHERE)
    assert str(caught.value) == message


@given(st.integers(min_value=1, max_value=MAX_BUDGET_MS))
def test_parse_of_the_canonical_form_gives_the_same_milliseconds(ms):
    assert parse_budget_ms(format_budget(ms), where=WHERE) == ms


# --- function names -------------------------------------------------------------------------

FWHERE = "cron_budgets.jobs.claim.function"
SPELLING = (
    "a function name is schema.name in lower-case letters, digits and _ "
    "(no quotes, spaces, parentheses or semicolons)"
)
QUALIFY = "must be schema-qualified as schema.name, e.g. public.claim_stats_projection_job_v1"

VALID_FUNCTIONS = [
    ("public.claim_stats_projection_job_v1", "public", "claim_stats_projection_job_v1"),
    ("stats._private2", "stats", "_private2"),
]

INVALID_FUNCTIONS = [
    ("public.f;drop", f"{FWHERE} = 'public.f;drop' contains ';': {SPELLING}"),
    ("public.f()", f"{FWHERE} = 'public.f()' contains '(': {SPELLING}"),
    ('public."f"', f"{FWHERE} = 'public.\"f\"' contains '\"': {SPELLING}"),
    ("public.f'", f'{FWHERE} = "public.f\'" contains "\'": {SPELLING}'),
    ("public .f", f"{FWHERE} = 'public .f' contains ' ': {SPELLING}"),
    ("Public.f", f"{FWHERE} = 'Public.f' contains 'P': {SPELLING}"),
    ("f", f"{FWHERE} = 'f' {QUALIFY}"),
    ("a.b.c", f"{FWHERE} = 'a.b.c' {QUALIFY}"),
    (
        "public.1f",
        f"{FWHERE} = 'public.1f': '1f' is not an identifier "
        "(a lower-case letter or _ first, then letters, digits or _)",
    ),
    (
        "public.",
        f"{FWHERE} = 'public.': '' is not an identifier "
        "(a lower-case letter or _ first, then letters, digits or _)",
    ),
    (
        "public." + "x" * 64,
        f"{FWHERE} = 'public.{'x' * 28}...': '{'x' * 20}'... is longer than 63 bytes; "
        "PostgreSQL would truncate it",
    ),
    ("", f"{FWHERE} must be a schema-qualified function name such as {VALID_FUNCTIONS[0][0]}"),
    (None, f"{FWHERE} must be a schema-qualified function name such as {VALID_FUNCTIONS[0][0]}"),
]


@pytest.mark.parametrize(("text", "schema", "name"), VALID_FUNCTIONS)
def test_schema_qualified_lower_case_names_are_accepted(text, schema, name):
    assert parse_function_name(text, where=FWHERE) == FunctionName(schema, name)


@pytest.mark.parametrize(("text", "message"), INVALID_FUNCTIONS)
def test_anything_that_would_need_quoting_is_refused(text, message):
    with pytest.raises(ConfigError) as caught:
        parse_function_name(text, where=FWHERE)
    assert str(caught.value) == message


# --- rendering --------------------------------------------------------------------------------

CLAIM = FunctionName("public", "claim_stats_projection_job_v1")


def test_the_command_sets_the_budget_then_calls_the_function():
    assert render_command(CLAIM, 3000) == (
        'set statement_timeout = \'3s\'; select "public"."claim_stats_projection_job_v1"();'
    )
    assert render_command(CLAIM, 1500).startswith("set statement_timeout = '1500ms'; ")


def test_psycopg_quotes_the_identifier_even_for_names_the_validator_would_refuse():
    hostile = FunctionName('pub"lic', "f(); drop table x; --")
    command = render_command(hostile, 3000)
    assert command == (
        'set statement_timeout = \'3s\'; select "pub""lic"."f(); drop table x; --"();'
    )
    assert parse_live_command(command) == (3000, hostile)


@pytest.mark.parametrize("budget_ms", [0, -1, MAX_BUDGET_MS + 1, True])
def test_render_refuses_a_budget_outside_the_range(budget_ms):
    with pytest.raises(ConfigError):
        render_command(CLAIM, budget_ms)


IDENT = st.from_regex(r"[a-z_][a-z0-9_]{0,30}", fullmatch=True)


@given(IDENT, IDENT, st.integers(min_value=1, max_value=MAX_BUDGET_MS))
def test_parse_of_a_rendered_command_gives_back_budget_and_function(schema, name, ms):
    function = FunctionName(schema, name)
    assert parse_live_command(render_command(function, ms)) == (ms, function)


# --- reading live commands back ---------------------------------------------------------------

F = FunctionName("public", "f")

LIVE_VARIANTS = [
    ("set statement_timeout = '3s'; select public.f();", 3000, F),
    ("SET statement_timeout TO '3s'; SELECT public.f()", 3000, F),
    ("set statement_timeout='3000'; select public.f();", 3000, F),
    ("set statement_timeout = 3000; select public.f();", 3000, F),
    ("set statement_timeout = 3000;select public.f()  ;  \n", 3000, F),
    ('set statement_timeout = \'3s\'; select "public"."f"()', 3000, F),
    ("  SET SESSION STATEMENT_TIMEOUT = '1min' ;\n SELECT Public . F ( ) ; ", 60_000, F),
    ("set statement_timeout = ' 6 s '; select public.f()", 6000, F),
    ("set statement_timeout = '1500ms'; select public.f()", 1500, F),
    ("select public.f()", None, F),
    ("set statement_timeout = '3s'; select f()", 3000, FunctionName(None, "f")),
    ('select "Odd""Schema"."F"()', None, FunctionName('Odd"Schema', "F")),
]

GRAMMAR = "only [SET statement_timeout = <budget>;] SELECT <function>(); is understood"

LIVE_REFUSALS = [
    (
        "set statement_timeout = '3s'; set lock_timeout = '1s'; select public.f()",
        f"expected SELECT at offset 30, found 'set': {GRAMMAR}",
    ),
    (
        "set lock_timeout = '1s'; select public.f()",
        f"the command sets 'lock_timeout', not statement_timeout: {GRAMMAR}",
    ),
    (
        "set statement_timeout = '3s'; select public.f(); select 1",
        f"expected the end of the command at offset 49, found 'select': {GRAMMAR}",
    ),
    (
        "set statement_timeout = '3s'; select public.f(); delete from t",
        f"expected the end of the command at offset 49, found 'delete': {GRAMMAR}",
    ),
    ("vacuum analyze", f"expected SELECT at offset 0, found 'vacuum': {GRAMMAR}"),
    (
        "set statement_timeout = '3s'; call public.f()",
        f"expected SELECT at offset 30, found 'call': {GRAMMAR}",
    ),
    (
        "set statement_timeout = '3s'; select public.f(1)",
        f"expected ')' (a call without arguments) at offset 46, found '1': {GRAMMAR}",
    ),
    (  # an argument may be a token or a password: never quoted back
        "select public.notify('tok-S3CRET')",
        f"expected ')' (a call without arguments) at offset 21, found a string literal: {GRAMMAR}",
    ),
    (
        "set statement_timeout = '3s'; select * from public.f()",
        f"unexpected character '*' at offset 37: {GRAMMAR}",
    ),
    (
        "set statement_timeout = '3s'; select public.f() -- note",
        f"unexpected character '-' at offset 48: {GRAMMAR}",
    ),
    (
        "set statement_timeout = '3s'; select public.f();;",
        f"expected the end of the command at offset 48, found ';': {GRAMMAR}",
    ),
    (
        "set statement_timeout = E'3s'; select public.f()",
        f"expected a statement_timeout value at offset 24, found 'E': {GRAMMAR}",
    ),
    (
        "set statement_timeout = '3s' select public.f()",
        f"expected ';' after SET at offset 29, found 'select': {GRAMMAR}",
    ),
    (
        "set local statement_timeout = '3s'; select public.f()",
        f"SET LOCAL is not understood: {GRAMMAR}",
    ),
    (
        "set statement_timeout = '0'; select public.f()",
        "statement_timeout must be greater than 0 (0 would disable statement_timeout)",
    ),
    (
        "set statement_timeout = 'soon'; select public.f()",
        f"statement_timeout is set to a string literal that is not a budget {EXAMPLES}: {GRAMMAR}",
    ),
    (  # a literal that is no budget may be anything: never quoted back
        "set statement_timeout = 'tok-S3CRET'; select public.f()",
        f"statement_timeout is set to a string literal that is not a budget {EXAMPLES}: {GRAMMAR}",
    ),
    (
        "set statement_timeout = '3S3CRET'; select public.f()",
        f"statement_timeout is set to a string literal that is not a budget {EXAMPLES}: {GRAMMAR}",
    ),
    (
        "set 'S3CRET' = '3s'; select public.f()",
        f"expected statement_timeout at offset 4, found a string literal: {GRAMMAR}",
    ),
    (
        "set statement_timeout = '25h'; select public.f()",
        "statement_timeout: '25h' exceeds the maximum budget of 24h",
    ),
    (
        "set statement_timeout = '3s'; select public.f",
        f"the command ends where '(' (a call without arguments) was expected: {GRAMMAR}",
    ),
    ("", f"the command ends where SELECT was expected: {GRAMMAR}"),
    (
        "do $$ begin perform public.f(); end $$",
        f"unexpected character '$' at offset 3: {GRAMMAR}",
    ),
]


@pytest.mark.parametrize(("command", "budget_ms", "function"), LIVE_VARIANTS)
def test_live_commands_are_read_back_whatever_their_spelling(command, budget_ms, function):
    assert parse_live_command(command) == (budget_ms, function)


@pytest.mark.parametrize(("command", "reason"), LIVE_REFUSALS)
def test_anything_outside_the_two_statement_grammar_is_refused(command, reason):
    with pytest.raises(UnparseableCommand) as caught:
        parse_live_command(command)
    assert str(caught.value) == reason


# --- config -----------------------------------------------------------------------------------

SECTION = {
    "jobs": {
        "claim": {
            "schedule": "* * * * *",
            "function": "public.claim_stats_projection_job_v1",
            "budget": "3s",
        },
        "compute": {
            "schedule": "* * * * *",
            "function": "public.compute_stats_projection_job_v1",
            "budget": "60s",
        },
        "publish": {
            "schedule": "* * * * *",
            "function": "public.publish_stats_projection_job_v1",
            "budget": "3s",
        },
    },
    "overrides": {"production": {"publish": "6s"}, "staging": None},
}


@pytest.fixture
def config() -> BudgetConfig:
    return budget_config_from_mapping(SECTION)


def job_section(**changes):
    spec = {"schedule": "* * * * *", "function": "public.f", "budget": "3s", **changes}
    return {"jobs": {"claim": {k: v for k, v in spec.items() if v is not None}}}


INVALID_CONFIGS = [
    ({"job": {}}, "unknown config key(s): cron_budgets.job"),
    ({}, "cron_budgets.jobs must declare at least one job"),
    ({"jobs": []}, "cron_budgets.jobs must declare at least one job"),
    ({"jobs": "claim"}, "cron_budgets.jobs must map a job name to {schedule, function, budget}"),
    (job_section(budget=None), "cron_budgets.jobs.claim.budget is required"),
    (job_section(schedule=None), "cron_budgets.jobs.claim.schedule is required"),
    (job_section(timeout="3s"), "unknown config key(s): cron_budgets.jobs.claim.timeout"),
    (job_section(budget="-1s"), "cron_budgets.jobs.claim.budget must be greater than 0, got '-1s'"),
    (
        job_section(function="public.f; drop"),
        f"cron_budgets.jobs.claim.function = 'public.f; drop' contains ';': {SPELLING}",
    ),
    (job_section(schedule="  "), "cron_budgets.jobs.claim.schedule must be a cron schedule"),
    (
        {"jobs": {"cl aim": job_section()["jobs"]["claim"]}},
        "cron_budgets.jobs: job name 'cl aim' must be 1-63 characters",
    ),
    (
        {"jobs": [{"name": "a", **job_section()["jobs"]["claim"]}] * 2},
        "cron_budgets.jobs.a is declared twice",
    ),
    (
        {**job_section(), "overrides": {"production": {"pubish": "6s"}}},
        "cron_budgets.overrides.production.pubish overrides a job that is not declared",
    ),
    (
        {**job_section(), "overrides": {"production": {"claim": "0"}}},
        "cron_budgets.overrides.production.claim must be greater than 0 (0 would disable",
    ),
    (
        {**job_section(), "overrides": {"production": ["claim"]}},
        "cron_budgets.overrides.production must map a job name to a budget",
    ),
    ({**job_section(), "database": ""}, "cron_budgets.database must be a database name"),
]


@pytest.mark.parametrize(("section", "message"), INVALID_CONFIGS)
def test_invalid_sections_are_rejected_naming_the_job_and_key(section, message):
    with pytest.raises(ConfigError) as caught:
        budget_config_from_mapping(section)
    assert str(caught.value).startswith(message)


class TestDeclare:
    def test_defaults_are_declared_with_their_source(self, config):
        declared = config.declare(None)
        assert [(j.name, j.budget_ms, j.source_label) for j in declared.jobs] == [
            ("claim", 3000, "default"),
            ("compute", 60_000, "default"),
            ("publish", 3000, "default"),
        ]

    def test_the_environment_s_override_wins_over_the_default(self, config):
        publish = config.declare("production").jobs[2]
        assert (publish.budget_ms, publish.default_budget_ms) == (6000, 3000)
        assert publish.source_label == "override:production"

    def test_an_environment_without_overrides_keeps_the_defaults(self, config):
        assert {j.source_label for j in config.declare("staging").jobs} == {"default"}
        assert {j.source_label for j in config.declare("qa").jobs} == {"default"}

    def test_a_list_of_named_jobs_is_the_same_as_a_mapping(self):
        listed = budget_config_from_mapping(
            {"jobs": [{"name": name, **spec} for name, spec in SECTION["jobs"].items()]}
        )
        assert listed.jobs == budget_config_from_mapping({"jobs": SECTION["jobs"]}).jobs

    def test_schedules_are_whitespace_normalised(self):
        config = budget_config_from_mapping(job_section(schedule=" */5  *  * * * "))
        assert config.jobs[0].schedule == "*/5 * * * *"


@pytest.mark.parametrize("wrapped", [True, False])
def test_the_section_is_read_from_yaml_at_top_level_or_under_leaseguard(tmp_path, wrapped):
    body = (
        "table: execution_runs\n"
        "cron_budgets:\n"
        "  jobs:\n"
        '    publish: {schedule: "* * * * *", function: public.p, budget: 3s}\n'
        "  overrides:\n"
        "    production: {publish: 6s}\n"
    )
    if wrapped:
        body = "leaseguard:\n" + "".join(f"  {line}\n" for line in body.splitlines())
    path = tmp_path / "lg.yaml"
    path.write_text(body)
    config = load_budget_config(path)
    assert config.declare("production").jobs[0].budget_ms == 6000


def test_a_file_without_the_section_is_a_usage_error(tmp_path):
    path = tmp_path / "lg.yaml"
    path.write_text("table: runs\n")
    with pytest.raises(ConfigError, match="has no cron_budgets section"):
        load_budget_config(path)


# --- planning ---------------------------------------------------------------------------------


def live(name, budget="3s", *, function=None, jobid=None, schedule="* * * * *", command=None):
    functions = {
        "claim": "claim_stats_projection_job_v1",
        "compute": "compute_stats_projection_job_v1",
        "publish": "publish_stats_projection_job_v1",
    }
    function = function or FunctionName("public", functions[name])
    if command is None:
        command = render_command(function, parse_budget_ms(budget, where="test"))
    return LiveJob(
        jobid=jobid or {"claim": 1, "compute": 2, "publish": 3}[name],
        name=name,
        schedule=schedule,
        command=command,
        database="app",
    )


def converged_live(publish="3s"):
    return [live("claim"), live("compute", "60s"), live("publish", publish)]


def states(plan):
    return {job.job.name: job.action for job in plan.jobs}


class TestPlan:
    def test_missing_jobs_are_created_with_the_rendered_command(self, config):
        plan = plan_budgets(config.declare(None), [])
        assert set(states(plan).values()) == {Action.CREATE}
        assert plan.changed and not plan.converged
        claim = job_in(plan, "claim")
        assert claim.after()["command"] == (
            'set statement_timeout = \'3s\'; select "public"."claim_stats_projection_job_v1"();'
        )
        assert claim.before() is None
        assert claim.after()["budget"] == "3s"
        assert (plan.drift, plan.warnings) == ((), ())

    def test_matching_jobs_are_unchanged(self, config):
        plan = plan_budgets(config.declare(None), converged_live())
        assert set(states(plan).values()) == {Action.UNCHANGED}
        assert not plan.changed and plan.converged

    def test_a_differently_spelt_but_equal_command_is_left_alone(self, config):
        spelt = live(
            "claim",
            command="SET statement_timeout TO 3000; SELECT public.claim_stats_projection_job_v1()",
        )
        plan = plan_budgets(config.declare(None), [spelt, *converged_live()[1:]])
        assert job_in(plan, "claim").action is Action.UNCHANGED

    def test_the_production_override_matches_a_live_6s_publish(self, config):
        plan = plan_budgets(config.declare("production"), converged_live(publish="6s"))
        publish = job_in(plan, "publish")
        assert publish.action is Action.UNCHANGED
        assert (publish.live_budget_ms, publish.job.source_label) == (6000, "override:production")
        assert not plan.changed and plan.drift == ()

    def test_an_override_is_written_when_live_still_has_the_default(self, config):
        plan = plan_budgets(config.declare("production"), converged_live(publish="3s"))
        publish = job_in(plan, "publish")
        assert publish.action is Action.UPDATE
        assert publish.changes == ("budget",)
        assert "'6s'" in publish.after()["command"]
        assert (plan.drift, plan.warnings) == ((), ())  # raising, declared: nothing to warn

    def test_a_live_6s_without_a_declared_override_is_drift_and_left_alone(self, config):
        plan = plan_budgets(config.declare("staging"), converged_live(publish="6s"))
        publish = job_in(plan, "publish")
        assert publish.action is Action.DRIFT
        assert not publish.writes and not plan.changed and not plan.converged
        assert publish.after() == publish.before()
        assert list(plan.drift) == [
            {
                "job": "publish",
                "live": "6s",
                "declared": "3s",
                "source": "default",
                "applied": False,
            }
        ]
        assert "no override declares it; left untouched" in publish.reason

    def test_a_routine_run_without_environment_never_reverts_production(self, config):
        plan = plan_budgets(config.declare(None), converged_live(publish="6s"))
        assert job_in(plan, "publish").action is Action.DRIFT
        assert not plan.changed

    def test_on_drift_apply_overwrites_and_still_reports_the_lowering(self, config):
        plan = plan_budgets(config.declare(None), converged_live(publish="6s"), on_drift="apply")
        publish = job_in(plan, "publish")
        assert publish.action is Action.UPDATE and plan.changed
        assert plan.drift[0]["applied"] is True
        assert plan.warnings == (
            "job publish: lowering the live statement budget 6s -> 3s (source default)",
        )

    def test_an_override_below_the_live_budget_is_applied_with_a_warning(self):
        config = budget_config_from_mapping(
            {**SECTION, "overrides": {"production": {"publish": "4s"}}}
        )
        plan = plan_budgets(config.declare("production"), converged_live(publish="6s"))
        assert job_in(plan, "publish").action is Action.UPDATE
        assert plan.warnings == (
            "job publish: lowering the live statement budget 6s -> 4s (source override:production)",
        )
        assert plan.drift == ()

    def test_a_raised_default_is_drift_too_until_converged_deliberately(self, config):
        plan = plan_budgets(config.declare(None), [live("claim", "2s"), *converged_live()[1:]])
        assert job_in(plan, "claim").action is Action.DRIFT
        applied = plan_budgets(
            config.declare(None), [live("claim", "2s"), *converged_live()[1:]], on_drift="apply"
        )
        assert job_in(applied, "claim").action is Action.UPDATE
        assert applied.warnings == ()

    def test_a_live_command_without_a_budget_is_drift_and_applying_it_warns(self, config):
        bare = live("claim", command="select public.claim_stats_projection_job_v1()")
        plan = plan_budgets(config.declare(None), [bare], on_drift="apply")
        assert plan.drift[0]["live"] is None
        assert plan.warnings == (
            "job claim: lowering the live statement budget none -> 3s (source default)",
        )

    def test_a_schedule_change_keeps_the_live_command_spelling(self, config):
        moved = live("claim", schedule="*/2 * * * *")
        plan = plan_budgets(config.declare(None), [moved, *converged_live()[1:]])
        claim = job_in(plan, "claim")
        assert (claim.action, claim.changes) == (Action.UPDATE, ("schedule",))
        assert claim.after()["schedule"] == "* * * * *"
        assert claim.after()["command"] == moved.command

    def test_a_new_function_rewrites_the_command(self, config):
        old = live("claim", function=FunctionName("public", "claim_v0"))
        claim = job_in(plan_budgets(config.declare(None), [old]), "claim")
        assert (claim.action, claim.changes) == (Action.UPDATE, ("function",))
        assert "claim_stats_projection_job_v1" in claim.after()["command"]

    def test_drift_holds_back_the_other_changes_of_that_job(self, config):
        old = live("publish", "6s", schedule="*/2 * * * *")
        publish = job_in(plan_budgets(config.declare(None), [old]), "publish")
        assert publish.action is Action.DRIFT
        assert publish.reason.endswith("left untouched; also pending: schedule")

    def test_an_unparseable_live_command_is_refused_and_reported(self, config):
        odd = live("claim", command="set statement_timeout='3s'; select public.x(); select 1")
        plan = plan_budgets(config.declare(None), [odd, *converged_live()[1:]], on_drift="apply")
        claim = job_in(plan, "claim")
        assert claim.action is Action.UNPARSEABLE and not claim.writes
        assert not plan.changed and not plan.converged
        assert plan.warnings[0].startswith("job claim: live command not understood (expected ")
        assert plan.warnings[0].endswith("); left untouched")

    def test_a_refused_live_command_is_not_shown_in_the_result_or_the_diff(self, config):
        secret = "select public.notify('tok-S3CRET')"
        for jobs in ([live("claim", command=secret)], [live("claim", command=secret)] * 2):
            plan = plan_budgets(config.declare(None), [*jobs, *converged_live()[1:]])
            assert job_in(plan, "claim").refused
            shown = json.dumps([plan.as_dict(), plan.diff()])
            assert "S3CRET" not in shown
            assert job_in(plan, "claim").before()["command"] == HIDDEN_COMMAND
        # a command of the grammar is shown as it is: its one literal is the budget
        compute = job_in(plan, "compute").before()["command"]
        assert compute == render_command(
            FunctionName("public", "compute_stats_projection_job_v1"), 60_000
        )

    def test_two_live_jobs_of_one_name_are_refused(self, config):
        plan = plan_budgets(config.declare(None), [live("claim"), live("claim", jobid=9)])
        assert job_in(plan, "claim").action is Action.AMBIGUOUS
        assert plan.warnings == (
            "job claim: 2 live pg_cron jobs share this name (jobids 1, 9); left untouched",
        )

    def test_a_job_in_another_database_is_moved(self, config):
        declared = config.declare(None)
        moved = type(declared)(declared.jobs, None, "other")
        claim = job_in(plan_budgets(moved, converged_live()), "claim")
        assert (claim.action, claim.changes, claim.after()["database"]) == (
            Action.UPDATE,
            ("database",),
            "other",
        )

    def test_undeclared_live_jobs_are_ignored(self, config):
        stranger = LiveJob(99, "vacuum_nightly", "0 3 * * *", "vacuum")
        plan = plan_budgets(config.declare(None), [*converged_live(), stranger])
        assert plan.converged and len(plan.jobs) == 3

    def test_an_unknown_drift_policy_is_a_usage_error(self, config):
        with pytest.raises(ConfigError, match="on_drift must be one of report, apply"):
            plan_budgets(config.declare(None), [], on_drift="ignore")

    def test_the_result_serialises_with_a_diff_per_job(self, config):
        plan = plan_budgets(config.declare("production"), converged_live(publish="3s"))
        document = json.loads(json.dumps(plan.as_dict()))
        assert document["changed"] is True
        assert document["environment"] == "production"
        publish = next(j for j in document["jobs"] if j["job"] == "publish")
        assert publish["state"] == "update"
        assert (publish["live_budget"], publish["declared_budget"]) == ("3s", "6s")
        assert publish["source"] == "override:production"
        diff = plan.diff()
        assert diff["before"]["publish"]["budget"] == "3s"
        assert diff["after"]["publish"]["budget"] == "6s"
        assert diff["before"]["claim"] == diff["after"]["claim"]


class TestAllOrNothing:
    """The one budget policy: a plan with drift or a refused job is written by nobody."""

    def test_a_plan_without_refusals_may_be_written(self, config):
        plan = plan_budgets(config.declare("production"), [live("claim")])
        assert plan.changed and plan.refusals == ()

    def test_drift_refuses_the_whole_plan_also_the_jobs_to_create(self, config):
        plan = plan_budgets(config.declare(None), [live("publish", "6s")])
        assert {states(plan)[n] for n in ("claim", "compute")} == {Action.CREATE}
        assert plan.changed and not plan.converged
        assert plan.refusals == ("job publish: live=6s declared=3s (default)",)

    def test_a_live_command_without_a_budget_is_named_as_none(self, config):
        bare = live("claim", command="select public.claim_stats_projection_job_v1()")
        plan = plan_budgets(config.declare(None), [bare, *converged_live()[1:]])
        assert plan.refusals == ("job claim: live=none declared=3s (default)",)

    def test_applied_drift_refuses_nothing(self, config):
        plan = plan_budgets(config.declare(None), [live("publish", "6s")], on_drift="apply")
        assert plan.refusals == ()

    def test_a_refused_live_job_refuses_the_plan_even_with_on_drift_apply(self, config):
        twins = [live("claim"), live("claim", jobid=9)]
        plan = plan_budgets(config.declare(None), twins, on_drift="apply")
        assert plan.refusals == ("job claim: 2 live pg_cron jobs share this name (jobids 1, 9)",)
        odd = live("claim", command="select public.x(); select 1")
        plan = plan_budgets(config.declare(None), [odd], on_drift="apply")
        assert plan.refusals[0].startswith("job claim: expected the end of the command")

    def test_the_refusals_are_in_the_json_document(self, config):
        plan = plan_budgets(config.declare(None), converged_live(publish="6s"))
        document = plan.as_dict()
        assert document["refusals"] == ["job publish: live=6s declared=3s (default)"]
        assert (document["applied"], document["changed"], document["converged"]) == (
            False,
            False,
            False,
        )
