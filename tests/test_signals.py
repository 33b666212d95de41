"""Operator signals: execution logs, session refs, retention, the signal views
and the pre-resume check, with the seeds' own strings."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import Transcript, write_jsonl
from indexer.cli.commands import cli

SID = "11111111-2222-3333-4444-555555555555"
GONE = "99999999-2222-3333-4444-555555555555"
# Seed 001: the API's answer to a resume whose tail is a synthetic placeholder.
SEED001_400 = ("API Error: 400 {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\","
               "\"message\":\"diagnostics.previous_message_id: must be the `id` from a prior "
               "/v1/messages response (starts with `msg_`)\"}}")
# Seed 003: a resume of a transcript cleanup deleted; the message is only in errors[].
SEED003_RESULT = {"type": "result", "subtype": "error_during_execution", "is_error": True,
                  "num_turns": 0, "total_cost_usd": 0,
                  "errors": [f"No conversation found with session ID: {GONE}"]}
SYNTHETIC = {"id": "5f0c1a52-3a49-4a4e-9f0e-2f1c6e3b7d11", "type": "message", "role": "assistant",
             "model": "<synthetic>", "content": [{"type": "text", "text": "API Error: 529"}],
             "usage": {"input_tokens": 0, "output_tokens": 0}}
# A placeholder a resume names as previous_message_id (not an API error, with
# the requestId of its call): its id, no msg_, gets the 400.
NAMED = dict(SYNTHETIC, content=[{"type": "text", "text": "No response requested."}])


def run(env, *args):
    result = CliRunner().invoke(cli, [*args, "--db", str(env.path)], catch_exceptions=False)
    return result


def session(env, sid=SID, *, tail_synthetic=False, mid_synthetic=False, cwd=None, splice=False):
    t = Transcript(sid)
    t.add("u1", None, "user", cwd=cwd or "/nonexistent/project")
    t.add("a1", "u1", "assistant")
    if mid_synthetic:
        t.add("s1", "a1", "assistant", message=dict(SYNTHETIC, id="0c8f5a0e-1111-4444-8888-000000000001"),
              isApiErrorMessage=True)
        t.add("u2", "s1", "user")
        t.add("a2", "u2", "assistant")
    if splice:
        t.add("e1", "u1", "system", subtype="api_error", ts="2026-09-01T00:00:00.500Z")
        t.add("h1", "e1", "system", subtype="stop_hook_summary")
    if tail_synthetic:
        t.add("u3", t.records[-1]["uuid"], "user")
        t.add("s2", "u3", "assistant", message=NAMED, requestId="req_s2")
    return t.write(env.projects / "-tmp-demo")


def execution_log(env, *events, name="run.jsonl"):
    return write_jsonl(env.projects.parent / "logs" / name, [
        {"type": "system", "subtype": "init", "cwd": "/tmp/demo", "session_id": SID, "tools": []},
        *events])


def ingest(env, *extra):
    return env.ingest(env.projects, *extra)


def check(env, sid=SID, *extra):
    result = run(env, "check", sid, "--json", *extra)
    return result.exit_code, json.loads(result.output)


# --- executions ------------------------------------------------------------

def test_seed003_result_is_a_failure_with_its_message_and_target(env):
    log = execution_log(env, dict(SEED003_RESULT, session_id="fresh-id"))
    ingest(env, log)
    [row] = env.rows("SELECT * FROM failed_executions")
    assert {k: row[k] for k in ("line_no", "session_id", "init_session_id", "subtype", "is_error",
                                "result", "error_class", "resume_target", "num_turns")} == {
        "line_no": 2, "session_id": "fresh-id", "init_session_id": SID,
        "subtype": "error_during_execution", "is_error": 1, "result": None,
        "error_class": "resume_not_found", "resume_target": GONE, "num_turns": 0}
    assert row["error_message"] == f"No conversation found with session ID: {GONE}"
    assert json.loads(row["errors"]) == SEED003_RESULT["errors"]
    assert env.rows("SELECT kind, session_id FROM files WHERE kind = 'execution_log'") == [
        {"kind": "execution_log", "session_id": SID}]


@pytest.mark.parametrize("event, error_class", [
    ({"subtype": "success", "is_error": True, "result": SEED001_400}, "poisoned_previous_message_id"),
    ({"subtype": "success", "is_error": True, "result": "API Error: 429 rate_limit_error"}, "rate_limit"),
    ({"subtype": "error_max_turns", "is_error": True, "result": ""}, "max_turns"),
    ({"subtype": "error_max_budget_usd", "is_error": False}, "max_budget"),
    ({"subtype": "success", "is_error": True, "result": "Invalid API key · Please run /login"}, "auth"),
    ({"subtype": "success", "is_error": True, "result": "API Error: 500 Internal server error"}, "other_error"),
    ({"subtype": "error_during_execution", "is_error": False, "errors": []}, "other_error"),
    ({"subtype": "success", "is_error": False, "result": "done"}, "ok"),
])
def test_error_classes(env, event, error_class):
    ingest(env, execution_log(env, dict(type="result", session_id=SID, **event)))
    [row] = env.rows("SELECT error_class, error_message FROM executions")
    assert row["error_class"] == error_class
    if error_class != "ok":  # never empty for an error
        assert row["error_message"]
        assert env.value("SELECT count(*) FROM failed_executions") == 1
    else:
        assert env.value("SELECT count(*) FROM failed_executions") == 0


def test_garbage_in_an_execution_log_is_kept_apart(env):
    log = execution_log(env, "{not json", [1, 2],
                        {"type": "result", "subtype": 7, "is_error": "yes", "result": ["x"],
                         "errors": "a plain string", "num_turns": "many", "session_id": 5},
                        {"type": "result", "subtype": "success", "is_error": False, "result": "ok",
                         "session_id": SID, "x": float("nan")},
                        dict(SEED003_RESULT, session_id="after"))
    s = ingest(env, log)
    assert s.bad_lines == 2
    rows = env.rows("SELECT line_no, session_id, subtype, is_error, error_class, error_message, "
                    "num_turns FROM executions ORDER BY line_no")
    assert rows == [
        {"line_no": 4, "session_id": None, "subtype": None, "is_error": 1,
         "error_class": "other_error", "error_message": "a plain string", "num_turns": None},
        # NaN is valid to Python but not to SQLite's JSON: read as {}.
        {"line_no": 5, "session_id": None, "subtype": None, "is_error": 0,
         "error_class": "ok", "error_message": None, "num_turns": None},
        {"line_no": 6, "session_id": "after", "subtype": "error_during_execution", "is_error": 1,
         "error_class": "resume_not_found",
         "error_message": f"No conversation found with session ID: {GONE}", "num_turns": 0}]


def test_corpus_stream_json_log_success_with_is_error_is_a_failure(env):
    corpus = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus" / "novotnyllc__ContainAI"
    if not corpus.is_dir():
        pytest.skip("../shared/corpus is not here")
    ingest(env, corpus)
    [row] = env.rows("SELECT subtype, is_error, error_class, error_message FROM failed_executions")
    assert (row["subtype"], row["is_error"], row["error_class"]) == ("success", 1, "other_error")
    assert row["error_message"].startswith("API Error: 500")


# --- poisoned sessions -----------------------------------------------------

def test_synthetic_at_the_resume_tail_poisons_the_session(env):
    session(env, tail_synthetic=True)
    ingest(env)
    [row] = env.rows("SELECT * FROM poisoned_sessions")
    assert {k: row[k] for k in ("session_id", "message_id", "uuid", "at_resume_tail",
                                "synthetic_on_chain", "failed_resumes")} == {
        "session_id": SID, "message_id": SYNTHETIC["id"], "uuid": "s2", "at_resume_tail": 1,
        "synthetic_on_chain": 1, "failed_resumes": 0}
    code, verdict = check(env)
    assert (code, verdict["verdict"], verdict["exit_code"]) == (5, "poisoned", 5)
    assert SYNTHETIC["id"] in verdict["reason"]
    assert verdict["details"]["poisoned"]["uuid"] == "s2"


def test_synthetic_mid_chain_followed_by_real_replies_is_not_poisoned(env):
    session(env, mid_synthetic=True)
    ingest(env)
    [row] = env.rows("SELECT at_resume_tail, synthetic_on_chain, uuid FROM poisoned_sessions")
    assert row == {"at_resume_tail": 0, "synthetic_on_chain": 1, "uuid": "s1"}
    code, verdict = check(env)
    assert (code, verdict["verdict"]) == (0, "resumable")


def test_failed_resumes_with_the_seed001_400_are_counted(env):
    session(env)
    ingest(env, execution_log(env, {"type": "result", "subtype": "success", "is_error": True,
                                    "result": SEED001_400, "session_id": SID}))
    [row] = env.rows("SELECT session_id, at_resume_tail, failed_resumes FROM poisoned_sessions")
    assert row == {"session_id": SID, "at_resume_tail": 0, "failed_resumes": 1}
    code, verdict = check(env)
    assert code == 0 and "previous_message_id" in verdict["warnings"][0]


def test_the_one_session_poisoned_query_equals_the_view(env):
    """check asks poisoned_sessions for one session through a query that reads
    only that session's records: the same row as the view, for a poisoned
    tail, a placeholder mid-chain, failed resumes, and a clean session."""
    from indexer.signals.classes import POISONED_SESSION_SQL

    sids = [f"{k}1111111-2222-3333-4444-555555555555" for k in range(4)]
    session(env, sids[0], tail_synthetic=True)
    session(env, sids[1], mid_synthetic=True)
    session(env, sids[2])
    session(env, sids[3])
    ingest(env, execution_log(env, {"type": "result", "subtype": "success", "is_error": True,
                                    "result": SEED001_400, "session_id": sids[2]}))
    assert env.value("SELECT count(*) FROM poisoned_sessions") == 3
    for sid in sids:
        assert env.rows(POISONED_SESSION_SQL, {"session_id": sid}) == env.rows(
            "SELECT * FROM poisoned_sessions WHERE session_id = ?", [sid]), sid


# --- stale refs, deleted and expired transcripts ---------------------------

def refs_file(env, rows, name="refs.jsonl"):
    return write_jsonl(env.path.parent / name, rows)


def test_refs_import_is_idempotent_and_rejects_bad_rows(env):
    path = refs_file(env, [{"session_id": SID, "source": "app", "key": "issue-1"},
                           "{broken", {"source": "app"}, {"session_id": 42},
                           {"session_id": GONE, "cached_at": "2026-10-01T00:00:00Z", "key": 7},
                           ["not", "an", "object"], {"session_id": SID, "source": ["x"]}])
    result = run(env, "refs", "import", str(path), "--json")
    assert result.exit_code == 1
    out = json.loads(result.output)
    assert (out["rows"], out["added"], out["updated"]) == (7, 2, 0)
    assert [r["row"] for r in out["rejected"]] == [2, 3, 4, 6, 7]
    assert env.rows("SELECT source, key, session_id, cached_at FROM session_refs ORDER BY id") == [
        {"source": "app", "key": "issue-1", "session_id": SID, "cached_at": None},
        {"source": "", "key": "7", "session_id": GONE, "cached_at": "2026-10-01T00:00:00Z"}]
    again = json.loads(run(env, "refs", "import", str(path), "--json").output)
    assert (again["added"], again["updated"]) == (0, 0)
    assert env.value("SELECT count(*) FROM session_refs") == 2


def test_refs_import_csv_and_json(env):
    csv_path = env.path.parent / "refs.csv"
    csv_path.write_text(f"session_id,source,key,cached_at\n{SID},web,k1,2026-11-01\n,web,k2,\n")
    result = run(env, "refs", "import", str(csv_path))
    assert result.exit_code == 1 and "1 new references" in result.output
    json_path = env.path.parent / "refs.json"
    json_path.write_text(json.dumps([{"session_id": GONE, "source": "web"}]))
    assert run(env, "refs", "import", str(json_path)).exit_code == 0
    assert env.value("SELECT count(*) FROM session_refs") == 2
    bad = env.path.parent / "bad.json"
    bad.write_text("[{")
    result = CliRunner().invoke(cli, ["refs", "import", str(bad), "--db", str(env.path)])
    assert result.exit_code == 3 and "not valid JSON" in result.output


def test_refs_import_of_a_string_row_says_it_is_not_an_object(env):
    # A string row was taken for a reason: "rejected row 1: x".
    array = env.path.parent / "strings.json"
    array.write_text('["x", 1]')
    lines = env.path.parent / "strings.jsonl"
    lines.write_text('"x"\n{broken\n')
    for path, reasons in ((array, ["not an object (a str)", "not an object (a int)"]),
                          (lines, ["not an object (a str)", "invalid JSON: "])):
        out = json.loads(run(env, "refs", "import", str(path), "--json").output)
        assert [(r["row"], r["error"][:len(why)]) for r, why in zip(out["rejected"], reasons)] \
            == [(1, reasons[0]), (2, reasons[1])]
    result = run(env, "refs", "import", str(array))
    assert result.exit_code == 1
    assert "rejected row 1: not an object (a str)" in result.output


def test_stale_refs_never_indexed_deleted_and_expired(env):
    live = session(env)
    deleted = session(env, "22222222-2222-3333-4444-555555555555")
    old = session(env, "33333333-2222-3333-4444-555555555555")
    os.utime(old, (time.time() - 40 * 86400,) * 2)
    ingest(env)
    deleted.unlink()
    ingest(env)
    refs = [{"session_id": s, "source": "app"} for s in
            (SID, "22222222-2222-3333-4444-555555555555", "33333333-2222-3333-4444-555555555555", GONE)]
    run(env, "refs", "import", str(refs_file(env, refs)))
    ingest(env, execution_log(env, dict(SEED003_RESULT, session_id="fresh")))
    rows = env.rows("SELECT session_id, reason, refs, sources, last_execution_class, "
                    "deleted_at IS NOT NULL AS has_deleted_at FROM stale_session_refs ORDER BY session_id")
    assert rows == [
        {"session_id": "22222222-2222-3333-4444-555555555555", "reason": "deleted", "refs": 1,
         "sources": "app", "last_execution_class": None, "has_deleted_at": 1},
        {"session_id": "33333333-2222-3333-4444-555555555555", "reason": "expired", "refs": 1,
         "sources": "app", "last_execution_class": None, "has_deleted_at": 0},
        {"session_id": GONE, "reason": "never_indexed", "refs": 2, "sources": "app,execution",
         "last_execution_class": "resume_not_found", "has_deleted_at": 0}]
    # --now moves the clock: 40 days on, the live one has expired too.
    later = run(env, "stale", "--json", "--now", "2099-01-01T00:00:00Z")
    assert later.exit_code == 1
    assert {r["session_id"]: r["reason"] for r in json.loads(later.output)}[SID] == "expired"
    assert live.exists()


def test_cached_id_whose_file_was_deleted_after_ingest_is_missing(env):
    path = session(env)
    ingest(env)
    path.unlink()  # cleanup ran; no ingest since
    code, verdict = check(env)
    assert (code, verdict["verdict"]) == (4, "missing")
    assert f"No conversation found with session ID: {SID}" in verdict["reason"]
    assert "since the last ingest" in verdict["reason"]


def test_check_never_seen_id_is_missing_and_unindexed_file_is_picked_up(env):
    code, verdict = check(env, GONE)
    assert (code, verdict["verdict"], verdict["path"]) == (4, "missing", None)
    session(env)  # on disk under the config dir, never ingested
    code, verdict = check(env, SID)
    assert (code, verdict["verdict"]) == (0, "resumable")


def test_check_spliced_session_points_at_the_repair(env):
    session(env, splice=True)
    ingest(env)
    code, verdict = check(env)
    assert (code, verdict["verdict"]) == (6, "spliced")
    assert "re-parent" in verdict["reason"]
    assert verdict["details"]["api_error_splices"][0]["api_error_uuid"] == "e1"


def test_check_sees_a_splice_written_since_the_last_ingest(env):
    path = session(env)
    ingest(env)
    session(env, splice=True)  # the file grows past the index
    assert path.exists()
    code, verdict = check(env)
    assert (code, verdict["verdict"]) == (6, "spliced")


def test_check_resumable_warns_when_it_expires_soon(env):
    path = session(env)
    ingest(env)
    mtime = path.stat().st_mtime
    code, verdict = check(env, SID, "--now", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime + 25 * 86400)))
    assert (code, verdict["verdict"]) == (0, "resumable")
    assert verdict["warnings"] and "expires in 5.0 days" in verdict["warnings"][0]
    code, verdict = check(env, SID, "--now", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime + 31 * 86400)))
    assert code == 0 and "the next Claude Code start deletes it" in verdict["warnings"][0]
    code, verdict = check(env, SID, "--now", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime + 86400)))
    assert code == 0 and verdict["warnings"] == []
    assert verdict["details"]["retention"]["days"] == 30


def test_check_text_output_and_bad_now(env):
    session(env)
    ingest(env)
    result = run(env, "check", SID)
    assert result.exit_code == 0 and result.output.startswith("resumable:")
    result = CliRunner().invoke(cli, ["check", SID, "--now", "yesterday", "--db", str(env.path)])
    assert result.exit_code == 2 and "ISO-8601" in result.output


# --- retention ---------------------------------------------------------------

@pytest.mark.parametrize("where, days", [
    ("user", 5), ("project", 6), ("local", 7), ("managed", 8)])
def test_retention_from_each_settings_file(env, tmp_path, where, days):
    project = tmp_path / "work" / "proj"
    (project / ".claude").mkdir(parents=True)
    files = {"user": env.config / "settings.json",
             "project": project / ".claude" / "settings.json",
             "local": project / ".claude" / "settings.local.json",
             "managed": tmp_path / "managed.json"}
    order = ["user", "project", "local", "managed"]  # lowest precedence first
    for name in order[: order.index(where) + 1]:
        files[name].write_text(json.dumps({"cleanupPeriodDays": days - order.index(where) + order.index(name)}))
    session(env, cwd=str(project))
    ingest(env)
    [row] = env.rows("SELECT retention_days, retention_source FROM files")
    assert row == {"retention_days": days, "retention_source": str(files[where])}
    code, verdict = check(env)
    assert verdict["details"]["retention"]["days"] == days
    assert verdict["details"]["retention"]["source"] == str(files[where])


def test_project_settings_only_count_when_the_cwd_exists(env, tmp_path):
    (env.config / "settings.json").write_text('{"cleanupPeriodDays": 12}')
    session(env, cwd=str(tmp_path / "gone"))
    ingest(env)
    assert env.rows("SELECT retention_days FROM files") == [{"retention_days": 12}]


def test_cleanup_period_zero_is_reported_loudly(env):
    (env.config / "settings.json").write_text('{"cleanupPeriodDays": 0}')
    path = session(env)
    result = CliRunner().invoke(cli, ["ingest", "--db", str(env.path), "--silent"])
    assert result.exit_code == 0
    assert "cleanupPeriodDays is 0" in result.output  # CliRunner mixes stderr in
    [row] = env.rows("SELECT status, retention_days FROM expired_transcripts")
    assert row == {"status": "expired", "retention_days": 0}
    code, verdict = check(env)
    assert code == 0 and any("cleanupPeriodDays is 0" in w for w in verdict["warnings"])
    assert path.exists()


def test_bad_settings_are_warned_about_and_skipped(env):
    (env.config / "settings.json").write_text('{"cleanupPeriodDays": "ten"}')
    session(env)
    s = ingest(env)
    assert any("not a number of days" in w for w in s.warnings)
    assert env.rows("SELECT retention_days, retention_source FROM files") == [
        {"retention_days": 30, "retention_source": "default"}]


def test_expiring_listing_with_now_and_days(env):
    path = session(env)
    gone = session(env, "22222222-2222-3333-4444-555555555555")
    ingest(env)
    gone.unlink()
    ingest(env)
    mtime = path.stat().st_mtime
    at = lambda d: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime + d * 86400))
    rows = json.loads(run(env, "expiring", "--json", "--now", at(1)).output)
    assert [(r["status"], r["session_id"]) for r in rows] == [
        ("deleted", "22222222-2222-3333-4444-555555555555")]
    rows = json.loads(run(env, "expiring", "--json", "--now", at(1), "--days", "30").output)
    assert [r["status"] for r in rows] == ["expiring", "deleted"]
    assert rows[0]["days_left"] == pytest.approx(29, abs=0.01)
    rows = json.loads(run(env, "expiring", "--json", "--now", at(31)).output)
    assert rows[0]["status"] == "expired" and rows[0]["days_left"] == pytest.approx(-1, abs=0.01)


@pytest.mark.parametrize("days, why", [
    ("nan", "'nan' is not a finite number"), ("inf", "'inf' is not a finite number"),
    ("-inf", "-inf is not in the range x>=0"), ("-1", "-1.0 is not in the range x>=0")])
def test_expiring_days_is_a_finite_number_not_below_0(env, days, why):
    # nan, inf and -inf were taken and changed the answer (nan: no file expiring).
    session(env)
    ingest(env)
    result = run(env, "expiring", "--days", days)
    assert result.exit_code == 2 and why in result.output, result.output


def test_expired_transcripts_judge_every_file_due_around_its_edges(env):
    """expired_transcripts reads only the files it can judge (deleted, or
    due within the window, a second either side for expires_at's rounding):
    every file its CASE judges is still there, to the millisecond either
    side of expires_at and of the window's end, for any window, negative
    ones included."""
    from indexer.signals.classes import EXPIRED_TRANSCRIPTS_TEMPLATE
    session(env)
    ingest(env)
    now = "2026-09-10T12:00:00.000Z"
    # A file's expires_at is its mtime + 30 days: mtimes that put it a few
    # milliseconds before, at and after now and now + the window.
    offsets_ms = [-1500, -1, 0, 1, 1500]
    for window in (7, 0.5, 0, -3):
        env.db.conn.execute("DELETE FROM files WHERE id > 1")
        [main] = env.rows("SELECT * FROM files WHERE id = 1")
        for n, (days, ms) in enumerate((d, ms) for d in (0, window) for ms in offsets_ms):
            mtime = env.value("SELECT strftime('%Y-%m-%dT%H:%M:%fZ', julianday(?) - 30 + ? "
                              "+ ? / 86400000.0)", [now, days, ms])
            row = dict(main, id=None, path=f"/p/{n}.jsonl", mtime=mtime,
                       retention_days=30)
            cols = ", ".join(row)
            env.db.conn.execute(f"INSERT INTO files ({cols}) VALUES "
                                f"({', '.join('?' * len(row))})", list(row.values()))
        judged = {r["path"]: r["status"] for r in env.rows(
            "SELECT path, CASE WHEN deleted_at IS NOT NULL THEN 'deleted' "
            "WHEN julianday(:now) >= julianday(e) THEN 'expired' "
            "WHEN julianday(e) - julianday(:now) <= :w THEN 'expiring' END AS status FROM ("
            "SELECT path, deleted_at, strftime('%Y-%m-%dT%H:%M:%fZ', julianday(mtime) + 30) AS e "
            "FROM files WHERE id > 1)", {"now": now, "w": window})}
        view = {r["path"]: r["status"] for r in env.rows(
            EXPIRED_TRANSCRIPTS_TEMPLATE.format(now=":now", window=":w"), {"now": now, "w": window})
            if r["path"].startswith("/p/")}
        assert view == {p: st for p, st in judged.items() if st is not None}, window
        assert len(set(view.values())) > 1 or window <= 0, (window, view)


def test_status_counts_the_signals(env):
    session(env, tail_synthetic=True)
    ingest(env, execution_log(env, dict(SEED003_RESULT, session_id="fresh")))
    s = json.loads(run(env, "status", "--json").output)
    assert (s["poisoned_sessions"], s["stale_session_refs"], s["failed_executions"],
            s["execution_logs"]) == (1, 1, 1, 1)


# --- listing output formats ------------------------------------------------

@pytest.mark.parametrize("fmt", ["", "--json", "--nl", "--csv", "--tsv", "--table"])
def test_listings_print_each_format_and_nothing_when_empty(env, fmt):
    import csv
    import io

    ingest(env)
    result = run(env, "poisoned", *([fmt] if fmt else []))
    assert result.exit_code == 0
    assert result.output == ("[]\n" if fmt == "--json" else "")   # nothing to list
    session(env, tail_synthetic=True)
    ingest(env)
    result = run(env, "poisoned", *([fmt] if fmt else []))
    assert result.exit_code == 1
    out = result.output
    if fmt == "--json":
        [row] = json.loads(out)
    elif fmt == "--nl":
        [row] = [json.loads(line) for line in out.splitlines()]
    elif fmt == "--csv":
        [row] = list(csv.DictReader(io.StringIO(out)))
    elif fmt == "--table":
        header, rule, line = out.splitlines()
        assert set(rule.replace(" ", "")) == {"-"} and header.split()[0] == "session_id"
        row = {"session_id": line.split()[0]}
    else:
        header, line = out.splitlines()
        row = dict(zip(header.split("\t"), line.split("\t")))
    assert row["session_id"] == SID


def test_sessions_lists_titles_state_newest_first(env):
    other = "22222222-2222-3333-4444-555555555555"
    path = session(env, tail_synthetic=True)
    with open(path, "a") as f:
        for record in ({"type": "summary", "summary": "An old summary", "leafUuid": "a1"},
                       {"type": "ai-title", "aiTitle": "Fixing the login redirect",
                        "sessionId": SID}):
            f.write(json.dumps(record) + "\n")
    t = Transcript(other)
    t.add("u1", None, "user", ts="2026-10-01T00:00:00.000Z",
          message={"role": "user", "content": "Why is the build red?"})
    t.add("a1", "u1", "assistant", ts="2026-10-01T00:00:01.000Z")
    t.write(env.projects / "-tmp-other")
    ingest(env)
    rows = json.loads(run(env, "sessions", "--json").output)
    assert [(r["session_id"], r["title"], r["state"]) for r in rows] == [
        (other, "Why is the build red?", "resumable"),
        (SID, "Fixing the login redirect", "poisoned")]
    with open(path, "a") as f:   # the user's own title wins
        f.write(json.dumps({"type": "custom-title", "customTitle": "login", "sessionId": SID})
                + "\n")
    ingest(env)
    rows = json.loads(run(env, "sessions", "--json", "--project", "-tmp-demo").output)
    assert [(r["session_id"], r["title"]) for r in rows] == [(SID, "login")]
    assert json.loads(run(env, "sessions", "--json", "--since", "2026-09-15").output)[0][
        "session_id"] == other
    assert run(env, "sessions", "--since", "2030-01-01").output == ""
    assert run(env, "sessions", "--since", "soon").exit_code == 2


def test_poisoned_with_nothing_to_cut_back_to_says_start_a_new_session(env):
    from indexer.cli import web

    t = Transcript(SID)
    t.add("u1", None, "user", cwd="/nonexistent/project")
    t.add("s1", "u1", "assistant", message=NAMED, requestId="req_s1")
    path = t.write(env.projects / "-tmp-demo")
    old = time.time() - 600
    os.utime(path, (old, old))
    ingest(env)
    code, verdict = check(env)
    assert code == 5 and verdict["details"]["nothing_to_cut_back_to"] is True
    assert "nothing to cut back to" in verdict["reason"] and "start a new session" in \
        verdict["reason"] and "session-index repair" not in verdict["reason"]
    before = path.read_bytes()
    result = run(env, "repair", SID, "--write")
    assert result.exit_code == 0 and "start a new session" in result.output
    assert path.read_bytes() == before
    # The page says so too, and offers no "repaired" download identical to the original.
    import asyncio

    async def page():
        ds = web.make_datasette(env.path)
        return (await ds.client.get(f"/-/sessions/{SID}")).text

    html = asyncio.run(page())
    assert 'data-verdict="poisoned_uncuttable"' in html and "Start a new session." in html
    assert "/repaired" not in html
