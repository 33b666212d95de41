"""The usage reports (usage daily|weekly|monthly|session|blocks|calls) and
the statusline, through the real command on a real index, checked figure by
figure against totals counted by hand (issue 30, acceptance 2)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import write_jsonl
from indexer.cli.commands import cli

SONNET = "claude-sonnet-4-5-20250929"   # $3 in, $15 out, 0.30 read, 3.75 / 6 writes
OPUS = "claude-opus-4-7"                 # $5, $25, 0.50, 6.25 / 10
HAIKU = "claude-haiku-4-5-20251001"      # $1, $5, 0.10, 1.25 / 2
A = "aaaaaaaa-0000-0000-0000-00000000000a"
B = "bbbbbbbb-0000-0000-0000-00000000000b"   # a fork of A: holds A's first call again
C = "cccccccc-0000-0000-0000-00000000000c"
D = "dddddddd-0000-0000-0000-00000000000d"   # not ingested


def line(session, uuid, parent, mid, rid, model, ts, inp, out, read, w5, w1):
    return {"type": "assistant", "uuid": uuid, "parentUuid": parent, "sessionId": session,
            "timestamp": ts, "cwd": "/work/app", "requestId": rid,
            "message": {"id": mid, "type": "message", "role": "assistant", "model": model,
                        "content": [{"type": "text", "text": "x"}],
                        "usage": {"input_tokens": inp, "output_tokens": out,
                                  "cache_read_input_tokens": read,
                                  "cache_creation_input_tokens": w5 + w1,
                                  "cache_creation": {"ephemeral_5m_input_tokens": w5,
                                                     "ephemeral_1h_input_tokens": w1}}}}


def prompt(session, uuid, text, ts):
    return {"type": "user", "uuid": uuid, "parentUuid": None, "sessionId": session,
            "timestamp": ts, "cwd": "/work/app", "message": {"role": "user", "content": text}}


# Call 1 (A, Sonnet), streamed as three lines whose output grows 1, 40, 250
# (the last is the call's), at a time with microseconds; 1-hour cache writes.
CALL_1 = [line(A, f"a1-{i}", "p-a" if i == 0 else f"a1-{i - 1}", "msg_1", "req_1", SONNET,
               f"2026-11-24T09:15:00.{123456 + i}Z", 100, out, 2000, 0, 1000)
          for i, out in enumerate((1, 40, 250))]


@pytest.fixture
def reported(index):
    write_jsonl(index.projects / "-work-app" / f"{A}.jsonl", [
        prompt(A, "p-a", "Fix the login bug", "2026-11-24T09:14:59.000Z"), *CALL_1,
        # call 2: 5-minute writes
        line(A, "a2", "a1-2", "msg_2", "req_2", SONNET, "2026-11-24T11:30:00Z",
             10, 500, 5000, 400, 0),
        # call 3: 23:30 UTC is 00:30 the next day in Europe/Berlin
        line(A, "a3", "a2", "msg_3", "req_3", SONNET, "2026-11-24T23:30:00.500Z",
             5, 100, 0, 0, 0),
    ])
    # B forks A: its file repeats call 1's three lines (B's session id), then call 4.
    write_jsonl(index.projects / "-work-app-fork" / f"{B}.jsonl", [
        prompt(B, "p-a", "Fix the login bug", "2026-11-24T09:14:59.000Z"),
        *[dict(r, sessionId=B) for r in CALL_1],
        prompt(B, "p-b", "Try another way", "2026-11-25T09:59:00.000Z") | {"parentUuid": "a1-2"},
        line(B, "b4", "p-b", "msg_4", "req_4", OPUS, "2026-11-25T10:00:00Z",
             20, 300, 10000, 0, 2000),
    ])
    write_jsonl(index.projects / "-work-shop" / f"{C}.jsonl", [
        prompt(C, "p-c", "Price the shop", "2026-12-02T07:59:00.000Z"),
        line(C, "c5", "p-c", "msg_5", "req_5", HAIKU, "2026-12-02T08:00:00Z",
             1000, 2000, 0, 1000, 0),
        line(C, "c6", "c5", "msg_6", "req_6", HAIKU, "2026-12-02T09:00:00Z",
             0, 1000, 0, 0, 0),
    ])
    index.ingest()
    return index


# Each call's figures and cost, counted by hand (USD per MTok rates above).
#   1: in 100, out 250, read 2000, 1h 1000: 300 + 3750 + 600 + 6000 = 10650 / 1e6
#   2: in 10, out 500, read 5000, 5m 400:   30 + 7500 + 1500 + 1500 = 10530 / 1e6
#   3: in 5, out 100:                       15 + 1500               =  1515 / 1e6
#   4: in 20, out 300, read 10000, 1h 2000: 100 + 7500 + 5000 + 20000 = 32600 / 1e6 (Opus)
#   5: in 1000, out 2000, 5m 1000:          1000 + 10000 + 1250     = 12250 / 1e6 (Haiku)
#   6: out 1000:                            5000                    =  5000 / 1e6 (Haiku)
def figures(calls, inp, out, read, w5, w1, cost, models):
    return {"calls": calls, "input_tokens": inp, "output_tokens": out,
            "cache_read_tokens": read, "cache_write_5m_tokens": w5,
            "cache_write_1h_tokens": w1, "total_tokens": inp + out + read + w5 + w1,
            "cost_usd": cost, "unpriced_calls": 0, "models": models}


NOV_24 = figures(3, 115, 850, 7000, 400, 1000, 0.022695, [SONNET])          # calls 1-3
NOV_25 = figures(1, 20, 300, 10000, 0, 2000, 0.0326, [OPUS])                # call 4
DEC_02 = figures(2, 1000, 3000, 0, 1000, 0, 0.01725, [HAIKU])               # calls 5-6
NOVEMBER = figures(4, 135, 1150, 17000, 400, 3000, 0.055295, [OPUS, SONNET])
TOTALS = figures(6, 1135, 4150, 17000, 1400, 3000, 0.072545, [HAIKU, OPUS, SONNET])


def run(index, *args):
    result = CliRunner().invoke(cli, ["usage", *args, "--db", str(index.path)])
    assert result.exit_code == 0, result.output
    return result


def report(index, *args):
    result = run(index, *args, "--json")
    assert result.stderr == ""
    return json.loads(result.stdout)


def test_daily_in_utc_and_in_another_time_zone(reported):
    got = report(reported, "daily", "--timezone", "UTC")
    assert got == {"daily": [{"date": "2026-11-24", **NOV_24}, {"date": "2026-11-25", **NOV_25},
                             {"date": "2026-12-02", **DEC_02}],
                   "totals": TOTALS, "timezone": "UTC", "since": None, "until": None}
    berlin = report(reported, "daily", "--timezone", "Europe/Berlin")
    assert berlin["daily"] == [   # call 3 is 00:30 on the 25th in Berlin
        {"date": "2026-11-24", **figures(2, 110, 750, 7000, 400, 1000, 0.02118, [SONNET])},
        {"date": "2026-11-25", **figures(2, 25, 400, 10000, 0, 2000, 0.034115, [OPUS, SONNET])},
        {"date": "2026-12-02", **DEC_02}]
    assert berlin["totals"] == TOTALS


def test_the_time_zone_defaults_to_this_machines(reported):
    result = CliRunner().invoke(cli, ["usage", "daily", "--json", "--db", str(reported.path)],
                                env={"TZ": "Asia/Kolkata"})   # UTC+5:30
    got = json.loads(result.stdout)
    assert got["timezone"] == "Asia/Kolkata"
    assert [(r["date"], r["calls"]) for r in got["daily"]] == [
        ("2026-11-24", 2), ("2026-11-25", 2), ("2026-12-02", 2)]


def test_weekly_and_monthly(reported):
    assert report(reported, "weekly", "--timezone", "UTC")["weekly"] == [
        {"week": "2026-11-22", **NOVEMBER}, {"week": "2026-11-29", **DEC_02}]   # Sundays
    assert [r["week"] for r in report(reported, "weekly", "--timezone", "UTC",
                                      "--start-of-week", "monday")["weekly"]] == [
        "2026-11-23", "2026-11-30"]
    got = report(reported, "monthly", "--timezone", "UTC")
    assert got["monthly"] == [{"month": "2026-11", **NOVEMBER}, {"month": "2026-12", **DEC_02}]
    assert got["totals"] == TOTALS


def test_session_with_title_and_project(reported):
    got = report(reported, "session", "--timezone", "UTC")
    assert got["sessions"] == [
        {"session_id": A, "title": "Fix the login bug", "project": "-work-app",
         "cwd": "/work/app", "first_call": "2026-11-24T09:15:00.123458+00:00",
         "last_call": "2026-11-24T23:30:00.500000+00:00", **NOV_24},
        {"session_id": B, "title": "Fix the login bug", "project": "-work-app-fork",
         "cwd": "/work/app", "first_call": "2026-11-25T10:00:00+00:00",
         "last_call": "2026-11-25T10:00:00+00:00", **NOV_25},
        {"session_id": C, "title": "Price the shop", "project": "-work-shop",
         "cwd": "/work/app", "first_call": "2026-12-02T08:00:00+00:00",
         "last_call": "2026-12-02T09:00:00+00:00", **DEC_02}]
    assert got["totals"] == TOTALS
    by_session = json.loads(run(reported, "--by", "session", "--json").stdout)
    assert [{k: r[k] for k in ("session_id", "title", "project", "calls", "cost_usd")}
            for r in by_session] == [   # the listing: costliest first
        {"session_id": B, "title": "Fix the login bug", "project": "-work-app-fork",
         "calls": 1, "cost_usd": 0.0326},
        {"session_id": A, "title": "Fix the login bug", "project": "-work-app",
         "calls": 3, "cost_usd": 0.022695},
        {"session_id": C, "title": "Price the shop", "project": "-work-shop",
         "calls": 2, "cost_usd": 0.01725}]


def test_blocks_with_the_active_one_projected(reported):
    got = report(reported, "blocks", "--timezone", "UTC", "--now", "2026-12-02T10:00:00Z")
    done = {"active": False}
    assert got["blocks"] == [
        # calls 1 and 2: the block starts at the hour of call 1
        {"start": "2026-11-24T09:00:00+00:00", "end": "2026-11-24T14:00:00+00:00",
         "first_call": "2026-11-24T09:15:00.123458+00:00",
         "last_call": "2026-11-24T11:30:00+00:00", **done,
         **figures(2, 110, 750, 7000, 400, 1000, 0.02118, [SONNET])},
        # call 3, 12 hours later: a new block
        {"start": "2026-11-24T23:00:00+00:00", "end": "2026-11-25T04:00:00+00:00",
         "first_call": "2026-11-24T23:30:00.500000+00:00",
         "last_call": "2026-11-24T23:30:00.500000+00:00", **done,
         **figures(1, 5, 100, 0, 0, 0, 0.001515, [SONNET])},
        {"start": "2026-11-25T10:00:00+00:00", "end": "2026-11-25T15:00:00+00:00",
         "first_call": "2026-11-25T10:00:00+00:00", "last_call": "2026-11-25T10:00:00+00:00",
         **done, **NOV_25},
        # active at 10:00: $0.01725 and 5,000 tokens in the 60 minutes from the
        # first call to the last; 180 minutes left at that rate
        {"start": "2026-12-02T08:00:00+00:00", "end": "2026-12-02T13:00:00+00:00",
         "first_call": "2026-12-02T08:00:00+00:00", "last_call": "2026-12-02T09:00:00+00:00",
         "active": True, **DEC_02, "remaining_minutes": 180.0, "cost_per_hour": 0.01725,
         "tokens_per_minute": 83.3, "projected_cost_usd": 0.069,
         "projected_total_tokens": 20000}]
    assert got["totals"] == TOTALS
    later = report(reported, "blocks", "--timezone", "UTC", "--now", "2026-12-02T14:00:00Z")
    assert not any(b["active"] for b in later["blocks"])


def test_since_and_until_take_dates_and_words(reported):
    def days(*args):
        return [r["date"] for r in report(reported, "daily", "--timezone", "UTC",
                                          "--now", "2026-11-25T12:00:00Z", *args)["daily"]]

    assert days("--since", "yesterday", "--until", "today") == ["2026-11-24", "2026-11-25"]
    assert days("--until", "2026-11-24") == ["2026-11-24"]      # a date includes its day
    assert days("--since", "20261125") == ["2026-11-25", "2026-12-02"]
    assert days("--since", "1 days ago", "--until", "1 days ago") == ["2026-11-24"]
    assert days("--since", "2026-11-30") == ["2026-12-02"]
    # a time with microseconds is the instant it is: call 1 is after .123
    since = report(reported, "daily", "--timezone", "UTC", "--since",
                   "2026-11-24T09:15:00.123Z", "--until", "2026-11-24T12:00:00Z")
    assert since["totals"]["calls"] == 2
    assert report(reported, "daily", "--timezone", "UTC", "--since",
                  "2026-11-24T09:15:00.124Z")["totals"]["calls"] == 5
    # the listing command takes the words too, and never names --now
    old = CliRunner().invoke(cli, ["usage", "--since", "yesterday", "--db",
                                   str(reported.path)])
    assert old.exit_code == 0 and "--now" not in old.output


@pytest.mark.parametrize("args, says", [
    (["daily", "--since", "soon"], "Invalid value for --since: 'soon' is not a date"),
    (["daily", "--until", "2026-13-01"], "Invalid value for --until: '2026-13-01' is not a date"),
    (["daily", "--timezone", "Mars/Olympus"], "'Mars/Olympus' is not an IANA time zone"),
    # (times Python's dates cannot hold were an OverflowError: exit 3, 'internal error')
    (["daily", "--until", "9999-12-31", "--timezone", "UTC"],
     "Invalid value for --until: '9999-12-31' is out of the range of dates"),
    (["weekly", "--since", "99999999 days ago"],
     "Invalid value for --since: '99999999 days ago' is out of the range of dates"),
    (["--since", "99999999 days ago"],
     "Invalid value for --since: '99999999 days ago' is out of the range of dates"),
    (["session", "--until", "999999999 hours ago"],
     "Invalid value for --until: '999999999 hours ago' is out of the range of dates"),
])
def test_a_bad_time_or_zone_is_a_usage_error(reported, args, says):
    result = CliRunner().invoke(cli, ["usage", *args, "--db", str(reported.path)])
    assert result.exit_code == 2
    assert says in result.output.splitlines()[-1]


def test_breakdown_by_model(reported):
    got = report(reported, "monthly", "--timezone", "UTC", "--breakdown")
    sonnet = {k: v for k, v in NOV_24.items() if k != "models"}
    opus = {k: v for k, v in NOV_25.items() if k != "models"}
    assert got["monthly"][0]["breakdown"] == [{"model": OPUS, **opus},
                                              {"model": SONNET, **sonnet}]
    csv = run(reported, "monthly", "--timezone", "UTC", "--breakdown", "--csv").stdout
    assert csv.splitlines()[:3] == [
        "month,model,calls,input_tokens,output_tokens,cache_read_tokens,"
        "cache_write_5m_tokens,cache_write_1h_tokens,total_tokens,cost_usd,unpriced_calls",
        f"2026-11,{OPUS},1,20,300,10000,0,2000,12320,0.0326,0",
        f"2026-11,{SONNET},3,115,850,7000,400,1000,9365,0.022695,0"]


def test_the_human_report_has_dollars_separators_and_a_totals_row(reported):
    result = run(reported, "daily", "--timezone", "UTC")
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["Date", "Models", "Calls", "Input", "Output", "Cache", "read",
                                "Cache", "write", "5m", "Cache", "write", "1h", "Total",
                                "tokens", "Cost"]
    assert lines[2].split() == ["2026-11-24", "sonnet-4-5", "3", "115", "850", "7,000", "400",
                                "1,000", "9,365", "$0.02"]
    assert lines[-2].split() == ["Total", "6", "1,135", "4,150", "17,000", "1,400", "3,000",
                                 "26,685", "$0.07"]
    assert lines[-1] == "Times in UTC."


def test_each_figure_shows_its_calls_once_across_forks(reported):
    rows = report(reported, "calls", "--day", "2026-11-24", "--timezone", "UTC")
    assert [(r["message_id"], r["session_id"], r["lines"], r["files"], r["sessions"],
             r["output_tokens"], r["cost_usd"]) for r in rows] == [
        ("msg_1", A, 6, 2, [A, B], 250, pytest.approx(0.01065)),
        ("msg_2", A, 1, 1, [A], 500, pytest.approx(0.01053)),
        ("msg_3", A, 1, 1, [A], 100, pytest.approx(0.001515))]
    assert sum(r["cost_usd"] for r in rows) == pytest.approx(NOV_24["cost_usd"])
    block = report(reported, "calls", "--block", "2026-12-02T08:00:00+00:00",
                   "--timezone", "UTC")
    assert [r["message_id"] for r in block] == ["msg_5", "msg_6"]
    assert [r["message_id"] for r in report(reported, "calls", "--session", B)] == ["msg_4"]
    evidence = report(reported, "weekly", "--timezone", "UTC", "--evidence")["weekly"]
    assert [[c["message_id"] for c in w["calls_counted"]] for w in evidence] == [
        ["msg_1", "msg_2", "msg_3", "msg_4"], ["msg_5", "msg_6"]]


def test_no_zero_information_line_on_stderr(index):
    # a `claude -p` run that cost $0 and whose session made no call: its
    # comparison ($0 against $0) was printed on every run
    write_jsonl(index.projects / "-work-app" / f"{A}.jsonl",
                [prompt(A, "p-a", "hello", "2026-11-24T09:00:00Z")])
    write_jsonl(index.projects / "-work-app" / "run.jsonl", [
        {"type": "system", "subtype": "init", "session_id": A},
        {"type": "result", "subtype": "success", "is_error": False, "session_id": A,
         "result": "ok", "num_turns": 1, "total_cost_usd": 0, "duration_ms": 5}])
    index.ingest()
    assert index.value("SELECT executions_usd FROM usage_reported") == 0
    result = run(index, "--by", "day")
    assert (result.stdout, result.stderr) == ("", "")


def test_the_evidence_in_words(reported):
    text = run(reported, "daily", "--timezone", "UTC", "--until", "2026-11-24",
               "--evidence").stdout
    assert text.splitlines()[6:10] == [
        "date 2026-11-24: 3 calls",
        "  2026-11-24 09:15  msg_1  sonnet-4-5  3,350 tokens  $0.0107  6 lines, 2 files "
        "(aaaaaaaa, bbbbbbbb)",
        "  2026-11-24 11:30  msg_2  sonnet-4-5  5,910 tokens  $0.0105  1 line",
        "  2026-11-24 23:30  msg_3  sonnet-4-5  105 tokens  $0.0015  1 line"]


def statusline(index, payload, *args):
    result = CliRunner().invoke(cli, ["statusline", "--db", str(index.path), *args],
                                input=payload)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_statusline_prints_the_verdict_and_cost(reported):
    status = {"session_id": C, "transcript_path": str(reported.projects / "-work-shop"
                                                      / f"{C}.jsonl"),
              "model": {"id": HAIKU, "display_name": "Haiku"},
              "workspace": {"current_dir": "/work/app", "project_dir": "/work/app"},
              "cost": {"total_cost_usd": 0.5, "total_duration_ms": 1000}}
    assert statusline(reported, json.dumps(status)) == (
        "resumable · $0.02 (2 calls) · Claude Code: $0.50\n")
    status["cost"]["total_cost_usd"] = 0.017
    assert statusline(reported, json.dumps(status)) == "resumable · $0.02 (2 calls)\n"
    for odd in ("1e309", "-1e309", "NaN", "-1"):   # (Claude Code's or not: not a cost to show)
        assert statusline(reported, json.dumps(status).replace("0.017", odd)) == (
            "resumable · $0.02 (2 calls)\n"), odd
    # a transcript written since the last ingest: said, not read (unless --freshen)
    path = reported.projects / "-work-shop" / f"{C}.jsonl"
    path.write_text(path.read_text() + json.dumps(
        line(C, "c7", "c6", "msg_7", "req_7", HAIKU, "2026-12-02T09:30:00Z",
             0, 2000, 0, 0, 0)) + "\n")
    assert statusline(reported, json.dumps(status)) == (
        "resumable (as of the last ingest) · $0.02 (2 calls)\n")
    status["cost"]["total_cost_usd"] = 0.027
    assert statusline(reported, json.dumps(status), "--freshen") == (
        "resumable · $0.03 (3 calls)\n")


def test_statusline_gives_checks_verdict_and_where_to_read_it(reported):
    # seed 001's shape: the resume chain ends at a "No response requested."
    # placeholder (not msg_...): a resume gets a 400
    E = "eeeeeeee-0000-0000-0000-00000000000e"
    placeholder = line(E, "e2", "p-e2", "5f0c1a52-3a49-4a4e-9f0e-2f1c6e3b7d11", "req_e2",
                       "<synthetic>", "2026-12-03T08:00:03Z", 0, 0, 0, 0, 0)
    placeholder["message"]["content"] = [{"type": "text", "text": "No response requested."}]
    write_jsonl(reported.projects / "-work-app" / f"{E}.jsonl", [
        prompt(E, "p-e", "hi", "2026-12-03T08:00:00Z"),
        line(E, "e1", "p-e", "msg_9", "req_9", HAIKU, "2026-12-03T08:00:01Z",
             0, 1_000_000, 0, 0, 0),
        prompt(E, "p-e2", "go on", "2026-12-03T08:00:02Z") | {"parentUuid": "e1"},
        placeholder])
    reported.ingest()
    checked = CliRunner().invoke(cli, ["check", E, "--json", "--db", str(reported.path)])
    assert json.loads(checked.stdout)["verdict"] == "poisoned"
    assert statusline(reported, json.dumps({"session_id": E})) == (
        f"poisoned · session-index check {E} · $5.00 (1 call)\n")


def test_statusline_freshen_ingests_a_new_session(reported):
    path = write_jsonl(reported.projects / "-work-new" / f"{D}.jsonl", [
        prompt(D, "p-d", "hi", "2026-12-03T08:00:00Z"),
        line(D, "d1", "p-d", "msg_8", "req_8", HAIKU,
             "2026-12-03T08:00:01Z", 0, 1_000_000, 0, 0, 0)])   # $5
    status = json.dumps({"session_id": D,
                         "transcript_path": str(path)})
    assert statusline(reported, status) == (
        "session-index: session not indexed yet (session-index ingest)\n")
    assert statusline(reported, status, "--freshen") == "resumable · $5.00 (1 call)\n"


@pytest.mark.parametrize("payload, says", [
    ("not json", "session-index: stdin is not Claude Code's statusLine JSON"),
    ("{}", "session-index: no session_id on stdin"),
    (json.dumps({"session_id": D}),
     "session-index: session not indexed yet (session-index ingest)"),
])
def test_statusline_always_prints_one_line(reported, payload, says):
    assert statusline(reported, payload) == says + "\n"


def test_statusline_without_an_index(tmp_path):
    result = CliRunner().invoke(cli, ["statusline", "--db", str(tmp_path / "none.db")],
                                input='{"session_id": "x"}')
    assert result.exit_code == 0
    assert result.stdout.startswith("session-index: ") and result.stdout.count("\n") == 1
