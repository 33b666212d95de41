"""``session-index check``: may an agent server ``--resume`` this session?

The first verdict that matches wins:

| verdict | exit | meaning |
|---|---|---|
| missing | 4 | no main transcript on disk: the resume fails with "No conversation found"; or the transcript stopped being written while the session went on (history.jsonl, tool results): the resume loses what came after |
| poisoned | 5 | the resume chain ends at a synthetic placeholder: the resume gets a 400 |
| wedged | 11 | the latest assistant message holds thinking the API refuses, and the Claude Code that resumes resends it on every resume |
| spliced | 6 | late api_error records orphan output: the resume drops it |
| resumable | 0 | go ahead (warnings when the transcript expires soon or has expired) |

The answer comes from the index, after a fresh stat of the transcript: a
file deleted since the last ingest is missing, and a file that changed is
ingested first. A copy mirrored through the session store (indexer/ingest/store.py)
is on disk in the store: with no local transcript left, the session is
resumable from the store (a resume must load it through the Agent SDK's
session_store; a bare `claude --resume` fails).

Which transcript is checked: the one ``claude --resume`` opens
(mainfile.py) on the host the question is about: ``host``, else this
machine ('') when it holds a main transcript of the session, else the one
host that does (several, none of them this machine: mainfile.AmbiguousHost,
exit 10). Another host's copies never answer for it. Without ``cwd`` that is
the host's session_hosts.main_file_id (the file a resume from the session's
own working directory opens); with ``cwd``, the one a resume run from that
directory opens. A session whose only
transcripts on disk are not named ``<id>.jsonl``, or hold no message, is
missing: the CLI opens none of them.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timedelta

from indexer.sql import dict_rows
from indexer.chain import mainfile
from indexer.ingest import sidecars
from indexer.signals import verdict as verdicts
from indexer.transcripts import agents, retention, thinking
from indexer.signals import classes, listings as signals
from indexer.index import db as dbmod, views

# A check imports only what its answer needs: no click, dataclasses, pathlib
# or parser (indexer/cli/entry.py; bench/startup_speed.py).

EXIT_CODES = verdicts.EXIT_CODES
EXPIRY_WARNING_DAYS = classes.EXPIRING_WINDOW_DAYS

# The session's main transcripts: local files first, then store copies.
MAIN_FILES_SQL = """
SELECT f.id, f.path, f.size, f.mtime_ns, f.inode, f.deleted_at, f.cwd, f.origin,
       f.project_key, f.records, f.project_dir, f.host
FROM files f WHERE f.session_id = ? AND f.kind = 'main' AND coalesce(f.host, '') = ?
ORDER BY f.origin = 'store', f.deleted_at IS NOT NULL, f.mtime DESC, f.id DESC
""".strip()
# A store copy of this local transcript that says something else.
DIVERGED_COPIES_SQL = """
SELECT store_path, local_only, store_only FROM session_copies
WHERE session_id = ? AND local_file_id = ? AND diverged
""".strip()
POISONED_SQL = classes.POISONED_SESSION_SQL  # poisoned_sessions, for one session
SPLICES_SQL = "SELECT * FROM api_error_splices WHERE file_id = ? ORDER BY first_orphan_at"
# The messages another process resuming the session wrote on a branch the
# resume leaves (orphans named concurrent_resume), and the newest of them.
CONCURRENT_SQL = """
SELECT count(*) AS messages, max(timestamp) AS newest FROM orphans
WHERE file_id = ? AND cause = 'concurrent_resume' AND type IN ('user', 'assistant')
""".strip()
# A check that does not write (freshen=False) on a transcript that changed,
# or appeared, since the last ingest.
UNREAD_WARNING = ("{path} changed on disk since the index last read it: this answer is from "
                  "the index as it stands (session-index ingest, or a running ingest --watch, "
                  "brings it up to date)")
# ... on an index whose sessions rows an older session-index computed.
OLD_SESSIONS_WARNING = ("the index's sessions rows were computed by an older session-index: "
                        "this answer may be out of date until the next session-index ingest")
# Another host's last heartbeat (fleet_ingest.py records it).
FLEET_HOST_SQL = "SELECT last_heartbeat_at, last_message_at FROM fleet_hosts WHERE host = ?"
# The gaps of a shipped file's current generation (fleet_central: bytes the
# stream lost and its host did not send again), and the bytes they lack.
FLEET_FILE_GAPS_SQL = """
SELECT count(*) AS gaps, coalesce(sum(g.end - g.start), 0) AS gap_bytes
FROM fleet_gaps g JOIN fleet_files ff ON ff.file_id = g.file_id
WHERE g.file_id = ? AND g.generation = ff.remote_generation
""".strip()
# Its messages the central holds for earlier bytes not come yet (fleet_held,
# of the host's current generation of it): how many, the first byte they
# start at, and since when the oldest is held.
FLEET_FILE_HELD_SQL = """
SELECT count(*) AS held_messages, min(h.offset) AS held_from, min(h.held_at) AS held_since
FROM fleet_held h JOIN fleet_files ff ON ff.file_id = h.file_id
WHERE h.file_id = ? AND h.generation = ff.remote_generation
""".strip()


class Verdict:
    """A check's answer: the verdict, why, the transcript, warnings and details."""

    __slots__ = ("session_id", "verdict", "reason", "path", "warnings", "details",
                 "checked_in_ms")

    def __init__(self, session_id: str, verdict: str, reason: str, path: str | None = None,
                 warnings: list | None = None, details: dict | None = None,
                 checked_in_ms: float = 0.0):
        self.session_id, self.verdict, self.reason, self.path = session_id, verdict, reason, path
        self.warnings = [] if warnings is None else warnings
        self.details = {} if details is None else details
        self.checked_in_ms = checked_in_ms

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def as_dict(self) -> dict:
        return dict({k: getattr(self, k) for k in self.__slots__}, exit_code=self.exit_code)

    def __repr__(self) -> str:
        return f"Verdict({self.session_id!r}, {self.verdict!r}, {self.reason!r})"


def report(verdict: Verdict, as_json: bool, out, err) -> int:
    """Print a verdict as ``session-index check`` does; its exit code."""
    if as_json:
        out.write(json.dumps(verdict.as_dict(), indent=2) + "\n")
    else:
        out.write(verdicts.headline(verdict.verdict, verdict.reason) + "\n")
        for warning in verdict.warnings:
            err.write(f"warning: {warning}\n")
    return verdict.exit_code


def _rows(db, sql, params):
    return dict_rows(db.conn, sql, params)


def _on_disk(config_dir: str, session_id: str) -> list[str]:
    """Main transcripts of this id under the config dir's projects/."""
    if not session_id or any(c in session_id for c in "/\\*?[]"):
        return []
    projects = os.path.join(config_dir, "projects")
    try:
        folders = os.listdir(projects)
    except OSError:
        return []
    named = (os.path.join(projects, d, f"{session_id}.jsonl") for d in folders
             if not d.startswith("."))  # as glob's "*"
    return sorted(p for p in named if os.path.exists(p))


def check(db, session_id: str, *, now: str | None = None, config_dir=None,
          cwd: str | None = None, host: str | None = None,
          claude_version: str | None = None, freshen: bool = True) -> Verdict:
    """The verdict for a resume of ``session_id`` on ``host`` (see the
    module docstring), in four steps: bring the index up to date for it,
    pick the transcript a resume opens, then poisoned, wedged, spliced and
    retention in that order. ``claude_version``: the Claude Code that will
    resume (default: the one that last wrote the transcript). mainfile.AmbiguousHost when no host is named and the
    session is on several, none of them this machine. ``freshen=False``
    (a reader that never writes: ``session-index mcp``): nothing is
    ingested; a transcript that changed on disk since the last ingest is
    answered for as the index holds it, with a warning (UNREAD_WARNING);
    so is an index this user may only read (db.read_only)."""
    started = time.monotonic()
    freshen = freshen and not dbmod.read_only(db)
    if claude_version is not None:   # (else one that is not a version reads as today's)
        thinking.claude_version(claude_version)
    agents.require_claude_code(db.conn, session_id)   # a Codex or Gemini CLI session: no verdict
    searched = [os.fspath(config_dir)] if config_dir is not None else retention.config_dirs()
    config_dir = os.fspath(config_dir or retention.default_config_dir())
    now_iso = signals.iso_now(now)
    if host is None:
        host = mainfile.default_host(db, session_id)
    files, gone, unread = _freshen(db, session_id, config_dir, searched, host, freshen)
    choice = (mainfile.for_cwd(db, session_id, cwd, host) if cwd
              else mainfile.chosen(db, session_id, host))
    copies = mainfile.copies(db, session_id, main_files=len(files), host=host)
    main = {f["id"]: f for f in files}.get(choice.file_id)
    row = dict_rows(db.conn, verdicts.CHECK_VERDICT_SQL,
                    dict(_subject(session_id, host, choice, main, files, gone),
                         claude_version=claude_version))[0]
    if row["verdict"] == "missing":
        return _done(_missing(session_id, row, choice, files, main), started)
    verdict = _opened(db, session_id, row, main, choice, copies, files)
    _poisoned(db, verdict, row, session_id, main, host)
    _wedged(verdict, row, session_id)
    _spliced(db, verdict, main, row)
    _truncated(verdict, row)
    _concurrent(db, verdict, main, session_id)
    _retention(verdict, main, config_dir, now_iso)
    if main["origin"] == "fleet":
        _shipped(db, verdict, main, now_iso)
    verdict.warnings += [UNREAD_WARNING.format(path=p) for p in unread]
    if not freshen and not views.sessions_current(db.conn):
        verdict.warnings.append(OLD_SESSIONS_WARNING)
    return _done(verdict, started)


def _concurrent(db, verdict: Verdict, main: dict, session_id: str) -> None:
    """A warning when another process resuming the session at the same time
    wrote conversation the resume leaves (walk.is_concurrent)."""
    found = dict_rows(db.conn, CONCURRENT_SQL, [main["id"]])[0]
    if not found["messages"]:
        return
    verdict.details["concurrent_resume"] = found
    verdict.warnings.append(
        f"{found['messages']} message(s) (the newest at {found['newest']}) were written by "
        "another process resuming this session at the same time, on a branch the resume does "
        "not take: they are not sent (anthropics/claude-code#48270); read them with "
        f"session-index show {session_id}, and resume a session in one process at a time")


def _subject(session_id: str, host: str, choice, main, files: list, gone: list) -> dict:
    """CHECK_VERDICT_SQL's subject: the file a resume opens and the rule that
    chose it, with check --cwd's own facts. A cwd from which no named file is
    found, where none is on disk at all, answers for the deleted one."""
    file_id, rule = choice.file_id, choice.rule
    if main is None and rule == mainfile.NONE_NAMED and files \
            and not any(c["on_disk"] for c in choice.facts):
        file_id, rule = files[0]["id"], "deleted"
    path = next((f["path"] for f in files if f["id"] == file_id), None)
    unscanned = sum(1 for c in choice.facts if c["on_disk"] and c["named"] and c["has_messages"])
    return {"session_id": session_id, "host": host, "file_id": file_id,
            "rule": rule if files else None, "gone_now": path is not None and path in gone,
            "cwd": choice.cwd, "candidates": ", ".join(choice.candidates),
            "unscanned": unscanned if rule == mainfile.NONE_NAMED else 0}


def unread_warnings(db, session_id: str, host: str = "", config_dir=None) -> list[str]:
    """UNREAD_WARNING for each main transcript of the session on this
    machine that changed or appeared on disk since the index last read it:
    what a command that does not ingest first (on an index this user may
    only read) says beside its answer, as check does."""
    searched = [os.fspath(config_dir)] if config_dir is not None else retention.config_dirs()
    _, _, unread = _freshen(db, session_id, "", searched, host, write=False)
    return [UNREAD_WARNING.format(path=p) for p in unread]


def _freshen(db, session_id: str, config_dir: str, searched: list[str], host: str = "",
             write: bool = True):
    """(the session's main files on ``host``, those found gone, those left
    unread): a changed, vanished or newly appeared transcript of the session
    on this machine is ingested first (another host's are as last shipped);
    without ``write``, nothing is written and the changed and new ones are
    left unread."""
    files = _rows(db, MAIN_FILES_SQL, [session_id, host])
    stale, gone = [], []
    for f in files:
        if f["origin"] != "file":
            continue  # a store copy or another host's file (fleet): nothing here to stat
        try:
            st = os.stat(f["path"])
        except OSError:
            if f["deleted_at"] is None:
                gone.append(f["path"])
            continue
        if (st.st_size, st.st_mtime_ns, st.st_ino) != (f["size"], f["mtime_ns"], f["inode"]) \
                or f["deleted_at"] is not None:
            stale.append(f["path"])
    found = [p for d in (searched if host == "" else []) for p in _on_disk(d, session_id)
             if p not in {f["path"] for f in files}]
    if not write:
        return files, gone, stale + found
    if host == "":   # its prompts in history.jsonl and its session folders, afresh
        sidecars.refresh_session(db, session_id, searched)
    if stale or found or gone:  # bring the index up to date for this session first
        from indexer.ingest import files as ingestmod  # the parser: only when there is something to read

        ingestmod.ingest(db, stale + found + gone, config_dir=config_dir)
        files = _rows(db, MAIN_FILES_SQL, [session_id, host])
    if not views.sessions_current(db.conn):  # an index upgraded since its last ingest
        from indexer.ingest import derive   # (only for an index upgraded since its last ingest: a check's start-up time)

        derive.refresh_sessions_if_stale(db)
    return files, gone, []


def _opened(db, session_id: str, row: dict, main: dict, choice, copies: list,
            files: list) -> Verdict:
    """The verdict for the transcript a resume opens, with the warnings its
    copies (and a store copy) call for."""
    verdict = Verdict(session_id, row["verdict"], row["reason"], main["path"],
                      details={"cause": row["cause"], "fix": row["fix"]})
    verdict.details["main_file"] = {"file_id": main["id"], "rule": choice.rule, "cwd": choice.cwd}
    if copies:
        verdict.details["copies"] = [
            {k: c[k] for k in ("file_id", "path", "chosen", "why", "diverged", "only_here",
                               "only_in_chosen")} for c in copies]
        verdict.warnings += _copy_warnings(session_id, main, choice, copies)
    if main["origin"] == "store":
        _from_store(verdict, main)
    else:
        verdict.warnings += [
            f"the session store's copy ({c['store_path']}) differs from this transcript: "
            f"{c['local_only']} uuid(s) only here, {c['store_only']} only in the store "
            "(see session_copies)" for c in _rows(db, DIVERGED_COPIES_SQL, [session_id, main["id"]])]
    return verdict


def _poisoned(db, verdict: Verdict, row: dict, session_id: str, main: dict,
              host: str = "") -> None:
    """The placeholder a poisoned chain ends at; a warning when earlier
    resumes failed with the 400 (on this host) though the chain no longer
    ends at one."""
    failed = next((p["failed_resumes"] for p in _rows(db, POISONED_SQL, {"session_id": session_id})
                   if p["host"] == host), 0)
    if verdict.verdict == "poisoned":
        verdict.details["nothing_to_cut_back_to"] = row["cause"] == "synthetic_tail_uncuttable"
        verdict.details["poisoned"] = {
            "session_id": session_id, "file_id": main["id"], "message_id": row["tail_message_id"],
            "uuid": row["tail_uuid"], "at_resume_tail": 1, "failed_resumes": failed,
            "host": host}
    elif failed:
        verdict.warnings.append(
            f"{failed} earlier resume(s) failed with the "
            "previous_message_id 400; the chain no longer ends at a placeholder")


def _wedged(verdict: Verdict, row: dict, session_id: str) -> None:
    """The thinking block the API refuses in the latest assistant message;
    for a Claude Code that recovers from the 400, a warning naming the cost."""
    if row["thinking_fault"] is None:
        return
    verdict.details["thinking"] = {
        k: row[f"thinking_{k}"] for k in ("fault", "uuid", "block", "message_id")}
    verdict.details["thinking"]["claude_version"] = row["resumer_version"]
    if verdict.verdict == "wedged":
        return
    version, fault = row["resumer_version"], row["thinking_fault"]
    verdict.warnings.append(
        f"the latest assistant message (message.id {row['thinking_message_id']}, uuid "
        f"{row['thinking_uuid']}) holds a thinking block the API refuses ("
        f"{row['thinking_fault']}, content block {row['thinking_block']}): Claude Code "
        f"{version or 'of today'} answers the 400 by sending the request again without any "
        "thinking block, so the resume works but the conversation's thinking is lost (and "
        f"its prompt cache with it); session-index repair {session_id} --write cuts back to "
        "the last message the API accepts instead (a Claude Code before "
        f"{thinking.RECOVERS_FROM[fault]} stays stuck on it)")


def _spliced(db, verdict: Verdict, main: dict, row: dict) -> None:
    """The api_error splices that leave recovered output off the chain, or
    the records a late graft leaves off it."""
    if verdict.verdict == "spliced":
        verdict.details["api_error_splices"] = _rows(db, SPLICES_SQL, [main["id"]])
        verdict.details["grafted_records"] = row["grafted_records"]


def _truncated(verdict: Verdict, row: dict) -> None:
    """What a truncated resume loses: how many conversation records, after
    which compaction (signals/compaction.py)."""
    if verdict.verdict == "truncated":
        verdict.details["truncated_records"] = row["truncated_records"]
        verdict.details["compaction_uuid"] = row["compaction_uuid"]


def _retention(verdict: Verdict, main: dict, config_dir: str, now_iso: str) -> None:
    """The retention in force, and warnings when the transcript expires soon."""
    kept = retention.resolve(config_dir, main["cwd"])
    verdict.warnings += list(kept.warnings)
    if main["origin"] == "fleet":  # its host's retention is not known here
        verdict.details["retention"] = {
            "days": None, "source": f"host {main['host']}", "expires_at": None,
            "days_left": None}
        return
    if main["origin"] == "store":  # not swept by cleanupPeriodDays
        verdict.details["retention"] = {
            "days": None, "source": "session store", "expires_at": None, "days_left": None}
        if verdict.verdict != "resumable":
            verdict.warnings.append(
                "only the session store holds this session: a resume must load it from the store")
        if kept.deletes_everything:
            verdict.warnings.append(
                f"cleanupPeriodDays is 0 ({kept.source}): Claude Code writes no new transcripts, "
                "so nothing new is mirrored to the store")
        return
    st = os.stat(main["path"])
    expires = datetime.fromtimestamp(st.st_mtime).astimezone() + timedelta(days=kept.days)
    days_left = (expires - datetime.fromisoformat(now_iso.replace("Z", "+00:00"))).total_seconds() / 86400
    verdict.details["retention"] = {
        "days": kept.days, "source": kept.source,
        "expires_at": signals.iso_now(expires.isoformat()), "days_left": round(days_left, 2)}
    if kept.deletes_everything:
        verdict.warnings.append(
            f"cleanupPeriodDays is 0 ({kept.source}): Claude Code deletes every transcript at "
            "its next start and writes no new ones")
    elif days_left <= 0:
        verdict.warnings.append(
            f"expired {-days_left:.1f} days ago ({kept.days}-day retention from {kept.source}): "
            "the next Claude Code start deletes it; touch the file to keep it")
    elif days_left <= EXPIRY_WARNING_DAYS:
        verdict.warnings.append(
            f"expires in {days_left:.1f} days ({kept.days}-day retention from {kept.source})")


def _missing(session_id: str, row: dict, choice, files: list[dict], main) -> Verdict:
    """No transcript a resume opens: the verdict's reason, and what the index holds."""
    verdict = Verdict(session_id, "missing", row["reason"],
                      main["path"] if main else (files[0]["path"] if files else None),
                      details={"cause": row["cause"], "fix": row["fix"],
                               "indexed_files": [f["path"] for f in files],
                               "main_file": {"file_id": choice.file_id, "rule": choice.rule,
                                             "cwd": choice.cwd}})
    if row["host"]:
        verdict.details["host"] = row["host"]
    return verdict


def _copy_warnings(session_id: str, main: dict, choice, copies: list[dict]) -> list[str]:
    """What the session's other main transcripts mean for this resume."""
    out = []
    named = [c for c in copies if c["named"] and c["on_disk"] and c["has_messages"]
             and c["file_id"] != main["id"]]
    if named:
        where = (f"from {choice.cwd}" if choice.cwd else
                 "from the session's own working directory" if choice.rule == "named_in_cwd_project"
                 else "from a cwd whose project folder is " + str(main["project_dir"]))
        diverged = sum(1 for c in named if c["diverged"])
        out.append(
            f"{len(named) + 1} transcripts are named {session_id}.jsonl, in different project "
            f"folders (session_main_copies; other ones that differ from this one: {diverged}): a "
            f"resume {where} opens {main['path']}; one from a cwd whose project folder holds "
            "another opens that one, and one from a cwd whose folder holds none of them fails "
            "with \"No conversation found\" (check --cwd DIR answers for a resume from DIR)")
    unnamed = [c for c in copies if c["why"] == "not_named"]
    if unnamed:
        out.append(
            f"{len(unnamed)} other file(s) carry this session id but are not named "
            f"{session_id}.jsonl ({', '.join(c['path'] for c in unnamed)}): a resume never "
            "opens them (session_main_copies)")
    return out


def _from_store(verdict: Verdict, main: dict) -> None:
    """The session's only main transcript left is a session-store copy."""
    verdict.details["resume_from"] = "store"
    verdict.details["store"] = {"file_id": main["id"], "project_key": main["project_key"],
                                "path": main["path"], "records": main["records"]}


def _shipped(db, verdict: Verdict, main: dict, now_iso: str) -> None:
    """A transcript of another host answers from what its shipper last sent:
    how fresh that is, by the host's last heartbeat."""
    row = _rows(db, FLEET_HOST_SQL, [main["host"]])
    beat = row[0]["last_heartbeat_at"] if row else None
    age = None
    if beat:
        age = round((datetime.fromisoformat(now_iso.replace("Z", "+00:00"))
                     - datetime.fromisoformat(beat.replace("Z", "+00:00"))).total_seconds(), 1)
    [gaps] = _rows(db, FLEET_FILE_GAPS_SQL, [main["id"]])
    [held] = _rows(db, FLEET_FILE_HELD_SQL, [main["id"]])
    verdict.details["fleet"] = {"host": main["host"], "last_heartbeat_at": beat,
                                "heartbeat_age_s": age,
                                "last_message_at": row[0]["last_message_at"] if row else None,
                                **gaps, **held}
    if held["held_messages"]:
        verdict.warnings.append(f"host {main['host']}'s transcript waits for earlier bytes: "
                                f"{held['held_messages']} message(s) from byte "
                                f"{held['held_from']} on are held since {held['held_since']} "
                                "until the bytes before them come (or are recorded as a gap): "
                                "the index's copy stops before them")
    if gaps["gaps"]:
        verdict.warnings.append(f"host {main['host']}'s transcript lacks {gaps['gap_bytes']} "
                                f"bytes the fleet's stream lost ({gaps['gaps']} gaps: "
                                "session-index fleet-gaps): the index's copy is not the whole "
                                "file")
    if age is None:
        verdict.warnings.append(f"from what host {main['host']} last shipped; its shipper has "
                                "sent no heartbeat: the host may have written more since")
    elif age > views.STALE_HEARTBEAT_S:
        verdict.warnings.append(f"from what host {main['host']} last shipped; its last heartbeat "
                                f"was {age:.0f} s ago: the host may have written more since")


def _done(verdict: Verdict, started: float) -> Verdict:
    verdict.checked_in_ms = round((time.monotonic() - started) * 1000, 1)
    return verdict
