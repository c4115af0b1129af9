"""`chatbot budget set|show|clear` and the budgets in `chatbot usage`, against a real Postgres."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from typer.testing import CliRunner

from chatbot.cli.main import app as cli


def _run(url: str, *args: str) -> tuple[int, str, str]:
    done = CliRunner().invoke(cli, list(args), env={"CHATBOT_DATABASE_URL": url})
    return done.exit_code, done.stdout, done.stderr


def test_budgets_are_set_shown_and_cleared(isolated_database_url: str) -> None:
    url = isolated_database_url
    code, out, err = _run(url, "budget", "set", "--tenant", "acme", "--daily", "50000", "--tokens")
    assert code == 0, err
    assert "set: tenant 'acme', daily: 50000 tokens" in out
    assert "no model usage or budget is recorded for tenant 'acme'" in err  # a warning, not a failure
    code, out, err = _run(url, "budget", "set", "--tenant", "acme", "--user", "u1", "--monthly", "2.5", "--usd")
    assert code == 0 and "no model usage" not in err, err  # the tenant is known by now
    assert "CHATBOT_MODEL_PRICES is not set" in err  # dollars need prices on the replicas
    assert _run(url, "budget", "set", "--tenant", "acme", "--each-user", "--daily", "8000", "--tokens")[0] == 0
    code, out, _ = _run(url, "budget", "show", "--tenant", "acme", "--format", "json")
    assert code == 0
    shown = json.loads(out)["budgets"]
    # The each-user default is shown per user who spent under it: nobody yet.
    assert [(b["scope"], b["user_id"], b["period"], b["unit"], b["limit"]) for b in shown] == [
        ("tenant", None, "day", "tokens", 50000),
        ("user", "u1", "month", "usd", 2.5),
    ]
    assert shown[0]["spent"] == 0 and shown[0]["reserved"] == 0 and shown[0]["left"] == 50000
    today = datetime.now(UTC).date()
    assert shown[0]["starts"] == today.isoformat() and shown[1]["starts"] == today.replace(day=1).isoformat()
    code, out, _ = _run(url, "budget", "show", "--tenant", "acme")
    assert code == 0 and "50,000" in out and "2.500000" in out
    code, out, _ = _run(url, "usage", "--since", "2000-01-01", "--format", "json")
    assert code == 0
    assert [(b["tenant_id"], b["scope"]) for b in json.loads(out)["budgets"]] == [("acme", "tenant"), ("acme", "user")]
    code, out, _ = _run(url, "budget", "clear", "--tenant", "acme", "--user", "u1")
    assert code == 0 and "cleared: 1" in out
    code, out, _ = _run(url, "budget", "clear", "--tenant", "acme", "--monthly")
    assert code == 0 and "nothing to clear" in out  # the tenant's budget is daily
    assert "cleared: 1" in _run(url, "budget", "clear", "--tenant", "acme")[1]
    assert "cleared: 1" in _run(url, "budget", "clear", "--tenant", "acme", "--each-user", "--daily")[1]
    code, out, _ = _run(url, "budget", "show", "--tenant", "acme")
    assert code == 0 and "no budget for tenant 'acme'" in out


def test_bad_budget_input_is_refused_with_a_reason(isolated_database_url: str) -> None:
    url = isolated_database_url
    cases = {
        ("--daily", "-5", "--tokens"): "above zero and below 10^15",
        ("--daily", "5"): "give the unit",
        ("--daily", "5", "--tokens", "--usd"): "give the unit",
        ("--daily", "five", "--usd"): "not a number",
        ("--daily", "1.5", "--tokens"): "whole number of tokens",
        ("--daily", "--monthly", "5", "--tokens"): "not both",
        ("5", "--tokens"): "give --daily or --monthly",
        ("--user", "u1", "--each-user", "--daily", "5", "--tokens"): "--user or --each-user",
        ("--daily", "nan", "--usd"): "above zero and below 10^15",
        ("--daily", "1e5000", "--tokens"): "above zero and below 10^15",
        ("--daily", "1e400", "--usd"): "above zero and below 10^15",
        ("--daily", "inf", "--usd"): "above zero and below 10^15",
        ("--daily", "-inf", "--tokens"): "above zero and below 10^15",
        ("--daily", "0", "--tokens"): "above zero and below 10^15",
        ("--daily", "-1", "--usd"): "above zero and below 10^15",
        ("--daily", "1000000000000000", "--tokens"): "above zero and below 10^15",
    }
    for args, reason in cases.items():
        code, _, err = _run(url, "budget", "set", "--tenant", "acme", *args)
        assert code == 2 and reason in err, (args, err)
        assert len(err.strip().splitlines()) == 1, err  # one line, no traceback
    code, _, err = _run(url, "budget", "set", "--tenant", "acme", "--daily", "5", "--euros")
    assert code == 2 and "unknown unit or option --euros" in err  # an unknown unit is named
    code, out, _ = _run(url, "budget", "show", "--tenant", "acme", "--format", "json")
    assert json.loads(out)["budgets"] == []  # nothing was set by the refused commands


def test_reports_never_fail_on_stored_amounts_and_print_valid_json(isolated_database_url: str) -> None:
    """Rows stored before amounts were bounded (or by hand) still show, as numbers JSON can carry."""
    import psycopg

    url = isolated_database_url
    with psycopg.connect(url, autocommit=True) as conn:
        for user, unit, amount in (("", "tokens", "1e5000"), ("u1", "usd", "Infinity"), ("u2", "usd", "NaN")):
            scope = "user" if user else "tenant"
            conn.execute(
                "insert into budgets (tenant_id, scope, user_id, period, unit, amount)"
                " values ('odd', %s, %s, 'day', %s, %s)",
                (scope, user, unit, amount),
            )
    code, out, err = _run(url, "budget", "show", "--tenant", "odd", "--format", "json")
    assert code == 0, err
    shown = json.loads(out, parse_constant=_refuse)["budgets"]
    assert [b["limit"] for b in shown] == [10**15, 1e15, 1e15]
    code, out, err = _run(url, "usage", "--since", "2000-01-01", "--format", "json")
    assert code == 0, err
    assert len(json.loads(out, parse_constant=_refuse)["budgets"]) == 3
    code, out, err = _run(url, "budget", "show", "--tenant", "odd")
    assert code == 0 and "budgets of odd" in out, err


def _refuse(constant: str) -> None:
    raise AssertionError(f"not JSON: {constant}")
