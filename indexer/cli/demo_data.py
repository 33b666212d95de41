"""A small demo index, made by the package itself: one example of every
problem class the index names, so each page of the web UI has something on
it. Nothing is read from ~/.claude.

- an api_error splice (seed 000's shape: late-flushed errors take over the chain),
- parallel tool calls whose first result is off the chain (seed 002),
- a compaction, a rewind (an edited prompt abandons two turns), a session
  compacted more times than the compactions class flags,
- a poisoned tail (a ``<synthetic>`` placeholder with a requestId ends the resume
  chain: a resume names its id as previous_message_id) and
  the resume that failed on it,
- a wedged session (its latest answer's thinking blanked, signature kept, by
  Claude Code 2.1.154, which resends it on every resume: #63147),
- a long session with hook progress and a subagent (the page folds it),
- transcripts expired and expiring by mtime, one deleted after ingest,
- session references that are stale (never indexed, deleted, expired),
- failed ``claude -p`` executions (seed 003's "No conversation found"),
- one session id on three main transcripts (a copy in another project
  folder, a fork that kept the id),
- a session whose transcript was never written (its prompts in
  history.jsonl, its tool results in its folder) and one whose transcript
  stopped while the session went on (anthropics/claude-code #91284, #53417),
- a /branch fork of a session and an empty fork (#85875).

Ids are uuid5s of fixed names, so a rebuilt demo has the same session ids;
times are relative to ``now`` because retention is judged by the clock.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

from indexer.index import db as dbmod
from indexer.ingest import files as ingestmod
from indexer.ingest import refs as refsmod
from indexer.signals.classes import COMPACTIONS_MORE_THAN

NAMESPACE = uuid.UUID("6f1c2d0e-5b7a-4c1e-9a55-2f4d3c9b8e70")
PROJECT = "-home-demo-shop"          # the projects/ folder of the demo cwd
CWD = "/home/demo/shop"              # does not exist: no project settings apply
VERSION = "2.1.247"


def session_id(name: str) -> str:
    """The demo's session id for ``name`` (stable across builds)."""
    return str(uuid.uuid5(NAMESPACE, name))


def _iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Session:
    """Records of one transcript, with a clock that moves forward."""

    def __init__(self, name: str, start: datetime, *, agent: str | None = None):
        self.name, self.id, self.agent = name, session_id(name), agent
        self.clock, self.records, self.n = start, [], 0

    def add(self, type_: str, parent: str | None, *, after: float = 6.0,
            at: datetime | None = None, message=None, **fields) -> str:
        self.n += 1
        uid = str(uuid.uuid5(NAMESPACE, f"{self.name}/{self.agent}/{self.n}"))
        self.clock = at or self.clock + timedelta(seconds=after)
        record = {"parentUuid": parent, "isSidechain": self.agent is not None,
                  "userType": "external", "cwd": CWD, "sessionId": self.id,
                  "version": VERSION, "gitBranch": "main", "type": type_}
        if self.agent:
            record["agentId"] = self.agent
        if message is not None:
            record["message"] = message
        record.update(fields)
        record.update(uuid=uid, timestamp=_iso(self.clock))
        self.records.append(record)
        return uid

    def user(self, parent, text, **kw):
        return self.add("user", parent, message={"role": "user", "content": text}, **kw)

    def _msg_id(self):
        return f"msg_{self.n + 1:04d}{self.name[:6]}"

    def reply(self, parent, text, *, msg=None, **kw):
        content = [{"type": "text", "text": text}]
        return self.add("assistant", parent, message=_assistant(msg or self._msg_id(), content),
                        **kw)

    def tool_call(self, parent, name, tool_input, *, msg=None, tool_id=None, **kw):
        tool_id = tool_id or f"toolu_{self.name[:6]}{self.n + 1:04d}"
        uid = self.add("assistant", parent, message=_assistant(
            msg or self._msg_id(),
            [{"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}]), **kw)
        return uid, tool_id

    def tool_result(self, parent, tool_id, output, **kw):
        return self.add("user", parent, message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tool_id, "content": output}]},
            toolUseResult={"stdout": output}, sourceToolAssistantUUID=parent, **kw)

    def system(self, parent, subtype, **kw):
        return self.add("system", parent, subtype=subtype, **dict({"level": "info"}, **kw))

    def progress(self, parent, hook="PostToolUse", **kw):
        return self.add("progress", parent, after=0.2, data={
            "type": "hook_progress", "hookEvent": hook, "hookName": f"{hook}:lint",
            "command": "npm run lint --silent"}, **kw)

    def write(self, projects: Path, project: str = PROJECT, name: str | None = None) -> Path:
        folder = projects / project
        path = (folder / self.id / "subagents" / f"agent-{self.agent}.jsonl" if self.agent
                else folder / (name or f"{self.id}.jsonl"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in self.records), encoding="utf-8")
        stamp = self.clock.timestamp()
        os.utime(path, (stamp, stamp))
        return path


# A thinking block's signature as the API gives one (base64, the length of a
# short thought's): a block without one is thinking the API refuses
# (transcripts/thinking.py).
DEMO_SIGNATURE = ("2kSOOBWV5pt93FZslCQFRTTv+urYSSEv5S0xzh6pmHSpl2SCi3R5XoWvCWujuIZMNFxPctr+Qcvb"
                  "A5VJZCObNPLU/Mz0mIVksmUoyCeQ360cp6kR4LxRuK5TO3vf0N+V8jVZPnt23Iyg6YitzhHmYPFo"
                  "wuMfFK7zBFdKqiByUXc9MosRhieVHw3Uy+WD3AlcwR5YiqvMxNkhEtRUhHZRJANq8UJZZwO04xe7"
                  "5RobXNExrEgRVv3a52iic/m6oSL9xyOgT1j4MdrbFFpFhA23Rke4Ou5HnRGQ")


def _assistant(msg_id, content, model="claude-sonnet-4-5"):
    return {"id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": "end_turn",
            "usage": {"input_tokens": 1200, "output_tokens": 180}}


def splice(start):
    """Seed 000: the recovered reply and its tool work are off the chain."""
    s = Session("api-error-splice", start)
    p = s.user(None, "Refactor the invoice totals into one function and run the tests.")
    a, tid = s.tool_call(p, "Bash", {"command": "grep -rn 'total' src/invoices"})
    r = s.tool_result(a, tid, "src/invoices/sum.py:12: def total(lines):", after=3)
    b, tid2 = s.tool_call(r, "Edit", {"file_path": "src/invoices/sum.py"}, after=40)
    r2 = s.tool_result(b, tid2, "The file has been updated.", after=2)
    s.reply(r2, "Done: `total()` now handles discounts; 48 tests pass.", after=300)
    errors_at = start + timedelta(seconds=30)
    e1 = s.system(r, "api_error", at=errors_at, level="error", retryAttempt=1,
                  error={"status": 429, "message": "429 rate_limit_error"})
    e2 = s.system(e1, "api_error", at=errors_at + timedelta(seconds=2), level="error",
                  retryAttempt=2, error={"status": 429, "message": "429 rate_limit_error"})
    stop = s.system(e2, "stop_hook_summary", at=start + timedelta(seconds=360), hookCount=0)
    q = s.user(stop, "What did you change in sum.py?", after=120)
    s.reply(q, "I don't see any changes to sum.py in our conversation.")
    return [s]


def seed000(start):
    """Seed 000 line for line: the resume leaf is the late stop_hook_summary,
    the SDK's leaf the orphaned reply, so the two readers disagree."""
    s = Session("seed-000", start)
    p = s.user(None, "Pick a random animal and tell me what it eats.", at=start)
    s.reply(p, "The otter. It eats shellfish and small fish.", after=5)
    e = s.system(p, "api_error", at=start + timedelta(seconds=2), level="error",
                 retryAttempt=1, error={"status": 429, "message": "429 rate_limit_error"})
    s.system(e, "stop_hook_summary", at=start + timedelta(seconds=5.5), hookCount=0)
    return [s]


def parallel(start):
    """Seed 002: two tool calls in one response; the next turn continues from
    the second result, so the first result is off the chain."""
    s = Session("parallel-tools", start)
    p = s.user(None, "Write README.md and CHANGELOG.md in parallel.")
    thinking = [{"type": "thinking", "thinking": "Two writes.", "signature": DEMO_SIGNATURE}]
    t = s.add("assistant", p, message=_assistant("msg_P01", thinking))
    a, ta = s.tool_call(t, "Write", {"file_path": "README.md"}, msg="msg_P01", tool_id="toolu_a")
    b, tb = s.tool_call(a, "Write", {"file_path": "CHANGELOG.md"}, msg="msg_P01", tool_id="toolu_b")
    s.tool_result(a, ta, "Wrote README.md")
    rb = s.tool_result(b, tb, "Wrote CHANGELOG.md")
    s.reply(rb, "Created both files.", msg="msg_P02")
    return [s]


def compaction(start):
    s = Session("compaction", start)
    last = None
    for i in range(4):
        q = s.user(last, f"Step {i + 1}: migrate the orders table, part {i + 1}.", after=60)
        last = s.reply(q, f"Part {i + 1} migrated.")
    boundary = s.system(None, "compact_boundary", logicalParentUuid=last,
                        compactMetadata={"trigger": "auto", "preTokens": 155000})
    summary = s.add("user", boundary, isCompactSummary=True, message={
        "role": "user", "content": "This session is being continued from a previous "
                                   "conversation: the orders table was migrated in four parts."})
    q = s.user(summary, "Now add the index on orders.created_at.")
    s.reply(q, "Added the index.")
    return [s]


def many_compactions(start):
    """A session compacted more times than the compactions class flags."""
    s = Session("many-compactions", start)
    last = s.reply(s.user(None, "Port the reports module, file by file."), "Starting.")
    for i in range(COMPACTIONS_MORE_THAN + 2):
        boundary = s.system(None, "compact_boundary", logicalParentUuid=last, after=600,
                            compactMetadata={"trigger": "auto", "preTokens": 150000 + i})
        summary = s.add("user", boundary, isCompactSummary=True, message={
            "role": "user", "content": f"Continued: {i + 1} files of the reports module ported."})
        last = s.reply(s.user(summary, f"Port file {i + 2}."), f"File {i + 2} ported.")
    return [s]


def rewind(start):
    """An edited prompt: the two turns after the original are abandoned."""
    s = Session("rewind", start)
    q1 = s.user(None, "Add a /health endpoint.")
    a1 = s.reply(q1, "Added GET /health returning 200.")
    q2 = s.user(a1, "Now make it check the database with a 5 second timeout.")
    a2 = s.reply(q2, "It now pings the database.")
    pr = s.progress(a2, "Stop")
    stop = s.system(pr, "stop_hook_summary", hookCount=1)
    s.user(stop, "Also the cache.")
    q2b = s.user(a1, "Now make it check the database and the cache.", after=90)
    s.reply(q2b, "It checks both, in parallel, with a 2 second timeout.")
    return [s]


def copies(start, projects: Path) -> None:
    """One session id on three main transcripts: the session in its own
    project folder (what `claude --resume` opens from the demo cwd), a copy
    in another project folder that went on a turn, and a fork that kept the
    id in a file named otherwise (never opened for that id)."""
    s = Session("copied-session", start)
    q = s.user(None, "Rename the Cart class to Basket.")
    a = s.reply(q, "Renamed it in 14 files.")
    s.write(projects)
    q2 = s.user(a, "Also rename the tests.", after=600)
    s.reply(q2, "Renamed the tests too.")
    s.write(projects, "-home-demo-shop-copy")
    s.write(projects, name="copied-session-fork.jsonl")


def poisoned(start):
    """A synthetic placeholder is the last assistant on the resume chain."""
    s = Session("poisoned-tail", start)
    q = s.user(None, "Summarize yesterday's failed deploys.")
    a = s.reply(q, "Three deploys failed, all on the migration step.")
    q2 = s.user(a, "Open an issue for each one.")
    # Claude Code's placeholder with the requestId of the call it stands for:
    # the record a resume names as previous_message_id (its id is no msg_).
    s.add("assistant", q2, isApiErrorMessage=False, requestId="req_011CVdemoPlaceholder",
          message={
              "id": str(uuid.uuid5(NAMESPACE, "placeholder")), "type": "message",
              "role": "assistant", "model": "<synthetic>",
              "content": [{"type": "text", "text": "No response requested."}],
              "usage": {"input_tokens": 0, "output_tokens": 0}})
    return [s]


def wedged(start):
    """#63147: the latest answer's thinking written back blanked (its text
    emptied, its signature kept) by Claude Code 2.1.154, whose every resume
    resends it and gets the 400; the first answer's thinking shows the API
    was showing this session's thinking."""
    s = Session("wedged-thinking", start)
    then = {"version": "2.1.154"}
    model = "claude-opus-4-7"
    q = s.user(None, "Why does the coupon test fail?", **then)
    t = s.add("assistant", q, message=_assistant("msg_01WedgeDemoA", [
        {"type": "thinking", "thinking": "Run the coupon test first.",
         "signature": DEMO_SIGNATURE}], model), **then)
    a = s.add("assistant", t, message=_assistant("msg_01WedgeDemoA", [
        {"type": "text", "text": "Let me run it."}], model), **then)
    q2 = s.user(a, "Go on.", **then)
    t2 = s.add("assistant", q2, message=_assistant("msg_01WedgeDemoB", [
        {"type": "thinking", "thinking": "", "signature": DEMO_SIGNATURE[::-1]}], model),
        **then)
    s.add("assistant", t2, message=_assistant("msg_01WedgeDemoB", [
        {"type": "text", "text": "The coupon in the fixture expired on May 1."}], model),
        **then)
    return [s]


def late_graft(start):
    """#62301: a call left waiting for permission, answered as interrupted;
    the conversation went on from that answer; two days later the drained
    permission response is written onto the old call and takes the resume."""
    s = Session("late-graft", start)
    p = s.user(None, "Clear the staging cache.")
    a, tid = s.tool_call(p, "Bash", {"command": "redis-cli -n 2 FLUSHDB"})
    r = s.add("user", a, after=300, message={"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": tid, "is_error": True,
         "content": "[Request interrupted by user for tool use]"}]})
    q = s.user(r, "Leave the cache; bump the staging image to 4.2 instead.", after=3600)
    s.reply(q, "Bumped: deploy/staging.yaml now pins 4.2.")
    s.tool_result(a, tid, "OK", at=start + timedelta(days=2))
    return [s]


def truncated(start):
    """#46603: after a compaction, a prompt whose parentUuid was never
    written: the resume's walk stops at it, and the summary and the turn
    before it are lost."""
    s = Session("truncated-compaction", start)
    q = s.user(None, "Split the billing service into two modules.")
    last = s.reply(q, "Split into billing/core and billing/api.")
    boundary = s.system(None, "compact_boundary", logicalParentUuid=last, after=600,
                        compactMetadata={"trigger": "manual", "preTokens": 120000})
    summary = s.add("user", boundary, isCompactSummary=True, message={
        "role": "user", "content": "This session is being continued from a previous "
                                   "conversation: billing was split into two modules."})
    s.reply(s.user(summary, "Move the invoice tests to billing/api."), "Moved 14 tests.")
    never = str(uuid.uuid5(NAMESPACE, f"{s.name}/never-written"))
    s.reply(s.user(never, "Now run them.", after=600), "All 14 pass.")
    return [s]


def long_session(start):
    """Sixty turns with hook progress and one subagent: the page folds it."""
    s = Session("long-session", start)
    last = None
    for i in range(60):
        q = s.user(last, f"Fix lint error {i + 1} in src/app.ts.", after=30)
        a, tid = s.tool_call(q, "Edit", {"file_path": "src/app.ts", "line": 10 + i})
        for hook in ("PreToolUse", "PostToolUse", "PostToolUse"):
            s.progress(a, hook)
        r = s.tool_result(a, tid, "The file has been updated.")
        last = s.reply(r, f"Fixed lint error {i + 1}.")
        if i == 30:
            task, ttid = s.tool_call(last, "Task", {"description": "Review the fixes",
                                                    "subagent_type": "code-reviewer"})
            last = s.tool_result(task, ttid, "The review found no problems.")
    sub = Session("long-session", start + timedelta(minutes=20), agent="a1b2c3d4")
    q = sub.user(None, "Review the lint fixes in src/app.ts.")
    a, tid = sub.tool_call(q, "Read", {"file_path": "src/app.ts"})
    r = sub.tool_result(a, tid, "export function app() {}")
    sub.reply(r, "No problems found.")
    return [s, sub]


def _history_line(session: str, display: str, at: datetime) -> str:
    """A line of history.jsonl as Claude Code writes one per prompt."""
    return json.dumps({"display": display, "pastedContents": {},
                       "timestamp": int(at.timestamp() * 1000), "project": CWD,
                       "sessionId": session}, separators=(",", ":")) + "\n"


def unwritten(now, root: Path, projects: Path) -> None:
    """A session whose transcript was never written (its prompts in
    history.jsonl, its tool results in its folder: #76829, #91284) and one
    whose transcript stopped after a turn while its prompts went on (#53417)."""
    never = session_id("never-written")
    results = projects / PROJECT / never / "tool-results"
    results.mkdir(parents=True, exist_ok=True)
    output = results / "toolu_01DemoNeverWritten.txt"
    output.write_text("PASS src/app.test.ts (214 tests)\n" * 200, encoding="utf-8")
    stamp = (now - timedelta(hours=2, minutes=5)).timestamp()
    os.utime(output, (stamp, stamp))
    s = Session("stopped-writing", now - timedelta(hours=5))
    q = s.user(None, "Profile the checkout page.")
    s.reply(q, "The slowest call is the tax lookup: 1.8 s.")
    s.write(projects)
    (root / "history.jsonl").write_text("".join([
        _history_line(s.id, "Profile the checkout page.", s.clock - timedelta(seconds=6)),
        _history_line(s.id, "Cache the tax lookup.", s.clock + timedelta(hours=2)),
        _history_line(never, "Run the test suite and fix what fails.",
                      now - timedelta(hours=2, minutes=10)),
        _history_line(never, "/exit", now - timedelta(hours=1)),
    ]), encoding="utf-8")


def forks(start, projects: Path) -> None:
    """A session and its /branch (every copied record carries forkedFrom, as
    Claude Code 2.1.332 writes a branch), and an empty fork: title rows only
    (#85875)."""
    parent = Session("fork-parent", start)
    q = parent.user(None, "Sketch a schema for coupons.")
    a = parent.reply(q, "A coupons table: code, percent_off, expires_at.")
    parent.write(projects)
    branch = Session("fork-branch", start + timedelta(hours=1))
    branch.records = [dict(r, sessionId=branch.id,
                           forkedFrom={"sessionId": parent.id, "messageUuid": r["uuid"]})
                      for r in parent.records]
    branch.n = len(branch.records)
    q2 = branch.user(a, "Now the same with per-customer limits.")
    branch.reply(q2, "Added a coupon_redemptions table with a per-customer count.")
    branch.write(projects)
    empty = session_id("empty-fork")
    rows = [{"type": "ai-title", "aiTitle": "Sketch a schema for coupons", "sessionId": empty},
            {"type": "agent-name", "agentName": "Sketch a schema for coupons (fork)",
             "sessionId": empty}]
    path = projects / PROJECT / f"{empty}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    stamp = (start + timedelta(hours=2)).timestamp()
    os.utime(path, (stamp, stamp))


def aged(name, start, prompt):
    s = Session(name, start)
    q = s.user(None, prompt)
    s.reply(q, "Done.")
    return [s]


def execution_log(path: Path, events: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")


def _run(init_sid, result):
    return [{"type": "system", "subtype": "init", "session_id": init_sid, "model": "claude"},
            dict({"type": "result", "num_turns": 0, "total_cost_usd": 0, "duration_ms": 1800,
                  "session_id": init_sid}, **result)]


def build_demo(directory: str | os.PathLike, now: datetime | None = None) -> Path:
    """Write the demo transcripts, logs and refs under ``directory`` and
    index them into ``directory/demo.db``; returns the index's path."""
    now = now or datetime.now(timezone.utc)
    root = Path(directory)
    projects, logs = root / "projects", root / "logs"
    db_path = root / "demo.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)
    day = timedelta(days=1)
    sessions = (splice(now - 2 * day) + seed000(now - 2 * day + timedelta(hours=5))
                + parallel(now - 3 * day) + compaction(now - 4 * day) + rewind(now - 5 * day)
                + poisoned(now - day) + long_session(now - 6 * day)
                + many_compactions(now - 9 * day) + wedged(now - 11 * day)
                + late_graft(now - 14 * day)
                + truncated(now - 12 * day)
                + aged("expired", now - 40 * day, "Tidy the old fixtures.")
                + aged("expiring", now - 27 * day, "Pin the node version."))
    for s in sessions:
        s.write(projects)
    deleted = aged("deleted", now - 8 * day, "Bump the lockfile.")[0].write(projects)
    copies(now - 7 * day, projects)
    unwritten(now, root, projects)
    forks(now - 10 * day, projects)

    never = session_id("never-indexed")
    execution_log(logs / "run-0001.jsonl", _run(session_id("long-session"), {
        "subtype": "success", "is_error": False, "result": "All lint errors fixed.",
        "num_turns": 12, "total_cost_usd": 0.42, "duration_ms": 95000}))
    execution_log(logs / "run-0002.jsonl", _run(session_id("fresh-after-missing"), {
        "subtype": "error_during_execution", "is_error": True, "result": "",
        "errors": [f"No conversation found with session ID: {never}"]}))
    execution_log(logs / "run-0003.jsonl", _run(session_id("poisoned-tail"), {
        "subtype": "success", "is_error": True,
        "result": "API Error: 400 " + json.dumps({"type": "error", "error": {
            "type": "invalid_request_error",
            "message": "diagnostics.previous_message_id: must be the `id` from a prior "
                       "/v1/messages response (starts with `msg_`)"}}, separators=(",", ":"))}))
    for i, path in enumerate(sorted(logs.iterdir())):
        stamp = (now - timedelta(hours=3 - i)).timestamp()
        os.utime(path, (stamp, stamp))

    db = dbmod.open_db(db_path)
    # as `session-index ingest` makes an index: search on (the word index)
    ingestmod.ingest(db, [str(projects), str(logs)], config_dir=root, search_new=True)
    deleted.unlink()
    ingestmod.ingest(db, [str(projects), str(logs)], config_dir=root)

    refs = root / "refs.jsonl"
    refs.write_text("".join(json.dumps(r) + "\n" for r in [
        {"source": "agent-server", "key": "task-17", "session_id": never,
         "cached_at": _iso(now - 12 * day)},
        {"source": "agent-server", "key": "task-18", "session_id": session_id("deleted"),
         "cached_at": _iso(now - 8 * day)},
        {"source": "agent-server", "key": "task-19", "session_id": session_id("expired"),
         "cached_at": _iso(now - 40 * day)},
        {"source": "agent-server", "key": "task-20", "session_id": session_id("long-session"),
         "cached_at": _iso(now - 6 * day)},
    ]), encoding="utf-8")
    refsmod.import_refs(db, str(refs))
    db.conn.close()
    return db_path
