"""Problem classes, each declared once.

A problem class is what an operator looks for: a poisoned session, a stale
reference, a transcript about to be deleted, a failed run, ... Each is one
``ProblemClass`` below: its SQL (a view of its own, or the name of a view
it reads), its columns and what they mean, its severity, its CLI listing,
its canned query, its rows on the health page and what to do about it. The
surfaces are generated from these declarations and never restate them:

- the views: ``indexer/index/views.py`` registers every ``SignalView``;
- the listing commands: ``indexer/cli/commands.py`` makes one click
  command per ``Listing`` (exit 1 when it lists rows);
- the descriptions, facets, units and canned queries:
  ``datasette-plugins/metadata.py`` (and so ``metadata.yml``);
- the health page's rows: ``datasette-plugins/health.py``.

The file is one block per class (its SQL, its view, its canned query, its
declaration), then CLASSES, every class in the health page's order. Adding a
class is one block here, its name in CLASSES, and its tests (docs/contributing.md,
"Adding a problem class"); tests/test_classes.py fails for a class that is declared
for a surface and missing from it.

This module sits below the index (the view registry imports it): it imports
nothing of ``indexer.index``, ``indexer.ingest``, ``indexer.repair`` or
``indexer.cli``; the record model's rules and the chain's definitions it
reads from below.
"""

from __future__ import annotations

from collections import namedtuple

from indexer.chain.definitions import API_ERROR_SPLICES_SQL, TRANSCRIPT_KINDS
from indexer.signals import compaction, forks, unwritten, verdict
from indexer.transcripts import records, thinking
from indexer.transcripts.records import SYNTHETIC_RECORD
from indexer.transcripts.retention import DEFAULT_DAYS as DEFAULT_RETENTION_DAYS

# --- Severities -----------------------------------------------------------

NOW, SOON, HISTORY = "now", "soon", "history"
# (key, title, what it means), most urgent first: the health page's groups.
SEVERITIES = (
    (NOW, "Breaks a resume now", "the next claude --resume fails or loses work: fix these first"),
    (SOON, "Will break soon", "nothing is lost yet; act before the date"),
    (HISTORY, "History and information", "what the transcripts went through; no resume "
                                          "breaks because of it"),
)
TS = "ISO-8601 UTC"


# --- The declaration types ------------------------------------------------
# Immutable records (named tuples: a check process must not pay for
# dataclasses or typing; tests/test_entry.py counts its modules).

class SignalView(namedtuple("SignalView", "name description columns common sql template "
                                          "view_args units facets",
                            defaults=((), "", "", {}, {}, ()))):
    """A view of the SQL contract that a class reads. ``sql`` is its
    definition; or ``template`` is, with {slots} that ``view_args`` fill for
    the view and a listing's ``args`` fill for the listing. ``columns``: each column's meaning (units named in
    it), after the ``common`` ones whose meaning is shared across the index
    (file_id, session_id, host, ...: metadata.py's). ``units`` and
    ``facets`` are Datasette's."""

    __slots__ = ()

    def definition(self) -> str:
        """The view's SELECT."""
        if not self.template:
            return self.sql
        return self.template.format(**self.view_args)


class Param(namedtuple("Param", "name type default help metavar minimum",
                       defaults=(None, None))):
    """An option of a listing beyond --db, --now and the output formats:
    ``--name`` (underscores as dashes), bound as ``:name``; ``minimum`` is
    its least value (None: any). A float is a finite number (the CLI
    refuses nan and infinities)."""

    __slots__ = ()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


class Listing(namedtuple("Listing", "command summary example order_by where now args params "
                                    "columns", defaults=("", False, {}, (), ()))):
    """A listing command: ``SELECT * FROM <the view> [WHERE where] ORDER BY
    order_by``; with ``args``, from the view's template filled with them
    instead (``:now``, ``:days``: answered at --now, given with ``now``).
    ``summary`` says what it lists, ``example`` is a command line (its
    --help: listing_help); ``params`` are its other options (Param);
    ``columns`` the ones an operator reads (``--table``; blank: all), the
    view's others being for ``--all``, ``--columns`` and the machine formats."""

    __slots__ = ()


class CannedQuery(namedtuple("CannedQuery", "name title description sql")):
    """A Datasette canned query (blank parameters mean "any"); its name is
    never a table's or a view's."""

    __slots__ = ()


class HealthRow(namedtuple("HealthRow", "label at detail where link session source severity",
                           defaults=("", "", "session_id", "", ""))):
    """A row of the health page: one problem per row of ``SELECT session AS
    session_id, at AS at, detail AS detail FROM source WHERE where``
    (source: the class's view unless given), linked to the view with
    ``link`` as query string; ``severity``: the class's unless given. A
    filter of a view is a ``where`` and its ``link``."""

    __slots__ = ()

    def sql(self, view: str) -> str:
        where = f" WHERE {self.where}" if self.where else ""
        return (f"SELECT {self.session} AS session_id, {self.at} AS at, {self.detail} AS detail "
                f"FROM {self.source or view}{where}")


class ProblemClass(namedtuple("ProblemClass", "name view severity fix listing query health",
                              defaults=(None, None, ()))):
    """One problem class: its ``view`` (its own SignalView, or the name of a
    view declared elsewhere that it reads: orphans, leaves, files, ...), its
    ``severity`` (NOW, SOON, HISTORY), what an operator does about it
    (``fix``), and the surfaces it has: a ``listing`` command, a canned
    ``query``, its ``health`` rows."""

    __slots__ = ()

    @property
    def view_name(self) -> str:
        return self.view if isinstance(self.view, str) else self.view.name

    def health_severity(self, row: HealthRow) -> str:
        return row.severity or self.severity


# --- Time: the views answer at the clock, the listings at --now ----------------

# Time-dependent definitions are templates over {now} (an ISO-8601 UTC
# expression): the views use the clock, the CLI binds --now.
CLOCK = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
EXPIRING_WINDOW_DAYS = 7


# --- the verdict: sessions a resume of which fails or loses work now --------------

# The verdict (signals/verdict.py, the session_verdicts view) is one class,
# with a health row for each verdict that breaks a resume: filters of the one
# definition check, sessions, show and the session page read. at: when the
# transcript a resume opens was deleted, else last written (for a session
# with no main transcript, its newest file's).
_VERDICT_AT = ("coalesce((SELECT coalesce(f.deleted_at, f.mtime) FROM files f "
               "WHERE f.id = session_verdicts.file_id), (SELECT max(x.mtime) FROM files x "
               "WHERE x.session_id = session_verdicts.session_id))")
_ON_HOST = "CASE WHEN host <> '' THEN 'host ' || host || ': ' ELSE '' END || "


def _verdict_row(verdict_: str, label: str, detail: str, main_files: str = "",
                 narrow: str = "", hosts: str = "") -> HealthRow:
    """A health row of one verdict, narrowed before the view is computed for
    every session: to the sessions whose main transcript can have it
    (``main_files``, a query of files.id), to the session_hosts rows
    ``hosts`` picks (a condition on session_hosts h; the sessions without a
    main transcript kept), or by a condition on the view's columns
    (``narrow``); tests/test_one_answer.py holds each row equal to the
    view's filter."""
    source = (f"({verdict.verdicts_of_main_files(main_files)}) session_verdicts"
              if main_files else "")
    if hosts:
        source = f"({verdict.verdicts_of_hosts(hosts)}) session_verdicts"
    return HealthRow(label, at=_VERDICT_AT, detail=_ON_HOST + detail, source=source,
                     where=f"verdict = '{verdict_}'" + (f" AND {narrow}" if narrow else ""),
                     link=f"verdict={verdict_}")


# The sessions a loaded transcript can be missing for (stopped_writing):
# a prompt or a tool result came after its newest record.
_WITH_EVIDENCE = unwritten.STOPPED_CANDIDATES_SQL

SESSION_VERDICTS = SignalView(
    "session_verdicts",
    "The verdict of every session on every host: will a resume work, and if not, why and "
    "what fixes it. The one definition check, sessions, show and these pages read.",
    {"main_file_rule": "why file_id is the transcript a resume opens (sessions."
                       "main_file_rule); empty when the session has no main transcript",
     "path": "the path of file_id",
     "verdict": "missing, poisoned, wedged, spliced, truncated or resumable (check's exit "
                "codes 4, 5, 11, 6, 12, 0)",
     "cause": "why, in one word: never_seen, never_written, subagents_only, not_named, "
              "no_messages, husk, stopped_writing, deleted; synthetic_tail, "
              "synthetic_tail_uncuttable; thinking_refused, thinking_uncuttable; "
              "api_error_splice, late_graft; unreached_after_compaction, "
              "segment_not_relinked; real_tail, store_copy",
     "reason": "the sentence check prints",
     "fix": "the command (or step) that fixes it; empty when resumable",
     "tail_uuid": "the last assistant record on the resume chain",
     "tail_message_id": "its message.id",
     "splices": "api_error_splices of file_id",
     "spliced_records": "records those splices leave off the resume chain",
     "grafted_records": "records late grafts leave off the resume chain (orphans named "
                        "late_graft)",
     "truncated_records": "conversation records a truncated resume loses after (or kept by) "
                          "the last compaction",
     "compaction_uuid": "that compaction's compact_boundary uuid",
     "resumer_version": "the Claude Code version taken to resume: the one that last wrote "
                        "file_id",
     "thinking_fault": "unsigned, truncated or blanked: the first thinking block the API "
                       "refuses in the latest assistant message (empty when none)",
     "thinking_uuid": "the record holding it",
     "thinking_block": "its index in that record's message.content",
     "thinking_message_id": "the latest assistant message's message.id",
     "host": "the host the verdict is for ('' for this machine): each host's copy is "
             "judged on its own"},
    common=("file_id", "session_id"), sql=verdict.SESSION_VERDICTS_SQL,
    facets=("verdict", "cause", "host"))

VERDICTS = ProblemClass(
    "verdicts", SESSION_VERDICTS, NOW,
    "the verdict's fix column says it: session-index repair SESSION_ID --write for a "
    "poisoned or spliced session, session-index restore SESSION_ID for a deleted transcript, "
    "else start a new session (session-index check SESSION_ID explains)",
    health=(
        _verdict_row("missing", "Missing: a resume opens no transcript", "cause",
                     narrow="(" + verdict.NOT_LOADED_TEMPLATE.format(rule="main_file_rule")
                     + f" OR session_id IN ({_WITH_EVIDENCE}))",
                     # (the same, before the verdict is computed: an OR is not pushed)
                     hosts=verdict.NOT_LOADED_TEMPLATE.format(rule="h.main_file_rule")
                     + f" OR h.session_id IN ({_WITH_EVIDENCE})"),
        _verdict_row("poisoned", "Poisoned: a resume names an id the API refuses",
                     "'previous_message_id ' || coalesce(tail_message_id, '?')",
                     "SELECT r.file_id FROM records r WHERE "
                     + records.FOREIGN_REPLY_RECORD.format(r="r")),
        _verdict_row("wedged", "Wedged: the latest message's thinking is refused, and the "
                               "Claude Code that resumes resends it",
                     "thinking_fault || ' thinking, Claude Code ' || resumer_version",
                     "SELECT file_id FROM thinking_faults WHERE latest"),
        _verdict_row("spliced", "Spliced: late records orphan later conversation (api_error "
                                "splices, late grafts)",
                     "coalesce(spliced_records, grafted_records) || ' records off the chain'",
                     "SELECT file_id FROM orphans_cache WHERE cause IN "
                     "('api_error_splice', 'late_graft')"),
        _verdict_row("truncated", "Truncated: a resume loses conversation after the last "
                                  "compaction",
                     "truncated_records || ' conversation records lost: ' || cause",
                     "SELECT file_id FROM records WHERE type = 'system' "
                     "AND subtype = 'compact_boundary'"),
    ))


# --- poisoned: a synthetic placeholder on the resume chain ---------------------

# poisoned_sessions: one row per session and host whose main transcript
# there (session_hosts: each host's copy is judged on its own) has a
# synthetic placeholder on its resume ancestry, or whose resumes failed with
# the previous_message_id 400 (executions of that host's logs).
# message_id/uuid: the synthetic record nearest the leaf; at_resume_tail: it
# is the record the next resume names as previous_message_id
# (records.PREVIOUS_MESSAGE_ID_RECORD: not an API error, with a requestId)
# and the API refuses its id: the session's verdict is poisoned; synthetic_on_chain: how many are on it;
# failed_resumes: executions classed poisoned_previous_message_id naming the
# session (as its session_id or its init session id); last_seen: the newest
# record timestamp of the session on that host.
# Slots: {files}, {session_id}, {init_session_id} narrow it (POISONED_ARGS: the
# whole index).
POISONED_SESSIONS_TEMPLATE = f"""
WITH placeholders AS MATERIALIZED (
  SELECT r.file_id, r.id, r.uuid, r.message_id FROM records r
  WHERE {{files}} AND {SYNTHETIC_RECORD.format(r='r')}
),
synthetic AS (
  SELECT s.session_id, s.host, r.file_id, r.id, r.uuid, r.message_id, a.height
  FROM placeholders r
  JOIN session_hosts s ON s.main_file_id = r.file_id
  JOIN leaf_ancestry_cache a ON a.file_id = r.file_id AND a.rule = 'resume'
    AND a.uuid = r.uuid AND a.record_id = r.id
),
tails AS (
  SELECT f.file_id, (
    SELECT a.record_id FROM leaf_ancestry_cache a JOIN records t ON t.id = a.record_id
    WHERE a.file_id = f.file_id AND a.rule = 'resume'
      AND {records.PREVIOUS_MESSAGE_ID_RECORD.format(r="t")}
    ORDER BY a.height DESC LIMIT 1) AS record_id
  FROM (SELECT DISTINCT file_id FROM synthetic) f
),
on_chain AS (
  SELECT y.session_id, y.host, y.file_id, y.uuid, y.message_id, max(y.height) AS height,
         count(*) AS synthetic_on_chain, max(y.id = t.record_id) AS at_resume_tail
  FROM synthetic y JOIN tails t ON t.file_id = y.file_id
  GROUP BY y.session_id, y.host
),
failed AS (
  SELECT session_id, host, count(*) AS failed_resumes FROM (
    SELECT id, session_id, host FROM executions
    WHERE error_class = 'poisoned_previous_message_id' AND session_id IS NOT NULL
      AND {{session_id}}
    UNION
    SELECT id, init_session_id, host FROM executions
    WHERE error_class = 'poisoned_previous_message_id' AND init_session_id IS NOT NULL
      AND {{init_session_id}})
  GROUP BY session_id, host
),
ids AS (SELECT session_id, host FROM on_chain UNION SELECT session_id, host FROM failed)
SELECT i.session_id, coalesce(c.file_id, h.main_file_id) AS file_id, c.message_id, c.uuid,
       coalesce(c.at_resume_tail, 0) AS at_resume_tail,
       coalesce(c.synthetic_on_chain, 0) AS synthetic_on_chain,
       coalesce(fl.failed_resumes, 0) AS failed_resumes,
       CASE WHEN s.host = i.host THEN s.last_timestamp ELSE (
         SELECT max(m.last_timestamp) FROM files m WHERE m.session_id = i.session_id
           AND m.kind IN {TRANSCRIPT_KINDS} AND coalesce(m.host, '') = i.host) END AS last_seen,
       i.host
FROM ids i
LEFT JOIN on_chain c ON c.session_id = i.session_id AND c.host = i.host
LEFT JOIN failed fl ON fl.session_id = i.session_id AND fl.host = i.host
LEFT JOIN session_hosts h ON h.session_id = i.session_id AND h.host = i.host
LEFT JOIN sessions s ON s.session_id = i.session_id
""".strip()
POISONED_ARGS = {"files": "1", "session_id": "1", "init_session_id": "1"}
# The same for one session (:session_id), reading only its records: check's
# question (the view reads every placeholder in the index first).
POISONED_SESSION_SQL = POISONED_SESSIONS_TEMPLATE.format(
    files="r.file_id IN (SELECT main_file_id FROM session_hosts WHERE session_id = :session_id)",
    session_id="session_id = :session_id", init_session_id="init_session_id = :session_id")

# poisoned: sessions with a synthetic placeholder on the resume
# chain or a resume that failed with the previous_message_id 400, the ones
# whose next resume fails first; :since keeps sessions seen since that
# ISO time (blank: all).
POISONED_QUERY_SQL = """
SELECT * FROM poisoned_sessions
WHERE coalesce(last_seen, '') >= coalesce(nullif(:since, ''), '')
ORDER BY at_resume_tail DESC, last_seen DESC
""".strip()

POISONED_SESSIONS = SignalView(
    "poisoned_sessions",
    "Sessions with a synthetic placeholder on the resume chain, or whose resumes failed "
    "with the previous_message_id 400.",
    {"message_id": "message.id of the synthetic record nearest the leaf (a badge marks it)",
     "uuid": "uuid of that record",
     "at_resume_tail": "1 when the next resume names it as previous_message_id and fails",
     "synthetic_on_chain": "synthetic placeholders on the resume chain",
     "failed_resumes": "executions of this session classed poisoned_previous_message_id",
     "last_seen": f"the session's newest record, {TS}",
     "host": "the host of file_id ('' for this machine)"},
    common=("file_id", "session_id"), template=POISONED_SESSIONS_TEMPLATE,
    view_args=POISONED_ARGS, facets=("at_resume_tail",))

POISONED = ProblemClass(
    "poisoned", POISONED_SESSIONS, NOW,
    "session-index repair SESSION_ID --write cuts the chain back to its last real "
    "assistant message (the file is backed up first); with none to cut back to, start a "
    "new session",
    listing=Listing(
        "poisoned",
        "Sessions with a synthetic placeholder on their resume chain (at_resume_tail: "
        "the next resume fails with the previous_message_id 400) or failed resumes of "
        "that kind.",
        "session-index poisoned --json",
        columns=("session_id", "at_resume_tail", "synthetic_on_chain", "failed_resumes", "last_seen"),
        order_by="at_resume_tail DESC, last_seen DESC"),
    query=CannedQuery("poisoned", "Poisoned sessions",
                      "Sessions whose resume fails with the previous_message_id 400.",
                      POISONED_QUERY_SQL),
    health=(   # (a placeholder at the tail: the verdict's row, VERDICTS)
        HealthRow("Synthetic placeholders inside the resume chain",
                  at="last_seen", detail="synthetic_on_chain || ' on the chain'",
                  where="NOT at_resume_tail AND synthetic_on_chain",
                  link="at_resume_tail=0", severity=HISTORY),
    ))


# --- wedged: thinking the API refuses on the resume chain -------------------------

# thinking_faults: one row per thinking block the API refuses (thinking.py:
# unsigned, truncated, blanked) on the resume chain of a session's main
# transcript on a host (session_hosts). latest: 1 when it is in the latest
# assistant message a resume sends (verdict.LATEST_MESSAGE_ID_TEMPLATE),
# where the API refuses it (the wedge; #63147, #68768, #21726); 0 in an
# earlier message (history: repair removes it). resumer_version: the Claude
# Code that last wrote the file; stuck: 1 when the block is in the latest
# message and that version resends it on every resume (thinking.STAYS_STUCK;
# the session's verdict is wedged), 0 when it recovers by dropping every
# thinking block. last_seen: the file's newest record. {hosts}: a condition on
# session_hosts h that narrows it before it is computed (THINKING_FAULTS_ARGS:
# all; thinking_faults_where: some sessions or files, for a session's page or
# repair, which the view's materialized steps would not let SQLite narrow).
_THINKING_FAULTS_SHAPE = f"""
WITH mains AS MATERIALIZED (
  SELECT h.session_id, h.host, h.main_file_id AS file_id,
    {verdict.LATEST_MESSAGE_ID_TEMPLATE.format(file="h.main_file_id")} AS latest_message_id,
    {verdict.WRITER_VERSION_TEMPLATE.format(file="h.main_file_id")} AS resumer_version
  FROM session_hosts h WHERE h.main_file_id IS NOT NULL AND {{hosts}}@CACHED@
),
faults AS MATERIALIZED (
@FAULTS@
)
SELECT m.session_id, t.file_id, t.uuid, t.line_no, t.message_id, t.model, t.version,
  t.block, t.fault, t.message_id IS m.latest_message_id AS latest, m.resumer_version,
  (t.message_id IS m.latest_message_id)
    AND {thinking.STAYS_STUCK.format(v="m.resumer_version", fault="t.fault")} AS stuck,
  f.last_timestamp AS last_seen, m.host
FROM faults t JOIN mains m ON m.file_id = t.file_id
JOIN leaf_ancestry_cache k ON k.file_id = t.file_id AND k.rule = 'resume'
  AND k.record_id = t.record_id
JOIN files f ON f.id = t.file_id
""".strip()

THINKING_FAULTS_TEMPLATE = _THINKING_FAULTS_SHAPE.replace("@CACHED@", "").replace(
    "@FAULTS@", thinking.thinking_faults_sql("{a}.file_id IN (SELECT file_id FROM mains)"))
# The view reads the faults ingest keeps (thinking_cache: thinking.py), for
# the main transcripts that have any; thinking_faults_definition is
# THINKING_FAULTS_TEMPLATE over every session, and the tests hold the two
# equal (chain/definitions.CACHED_VIEWS).
THINKING_FAULTS_CACHED_SQL = _THINKING_FAULTS_SHAPE.replace(
    "@CACHED@", "\n    AND h.main_file_id IN (SELECT file_id FROM thinking_cache WHERE kind <> 'shown')"
).replace("@FAULTS@", thinking.CACHED_FAULTS_TEMPLATE.format(
    files="c.file_id IN (SELECT file_id FROM mains)")).format(hosts="1")

THINKING_FAULTS_ARGS = {"hosts": "1"}


def thinking_faults_where(hosts: str) -> str:
    """The thinking_faults rows of the session_hosts rows (alias h) that
    ``hosts`` picks, computed for them only."""
    return THINKING_FAULTS_TEMPLATE.format(hosts=hosts)


THINKING_FAULTS = SignalView(
    "thinking_faults",
    "Thinking blocks the API refuses on resume chains: unsigned, with a cut signature, or "
    "blanked after the API showed them (#63147, #68768, #21726). In the latest assistant "
    "message they wedge the session for Claude Code versions that resend them.",
    {"uuid": "the assistant record holding the block",
     "line_no": "its line in the transcript, 1-based",
     "message_id": "its message.id",
     "model": "its message.model",
     "version": "the Claude Code version that wrote it",
     "block": "the block's index in message.content",
     "fault": "unsigned (no signature), truncated (a signature cut short) or blanked (text "
              "emptied, signature kept, where the API showed this model's thinking)",
     "latest": "1 when the block is in the latest assistant message a resume sends",
     "resumer_version": "the Claude Code that last wrote the file, taken to resume it",
     "stuck": "1 when that version resends the block on every resume (the verdict is "
              "wedged: versions before " + ", ".join(
                  f"{v} ({f})" for f, v in thinking.RECOVERS_FROM.items()) + "); 0 when it "
              "recovers by dropping every thinking block, or the block is in an earlier "
              "message",
     "last_seen": f"the file's newest record, {TS}",
     "host": "the host of file_id ('' for this machine)"},
    common=("file_id", "session_id"), sql=THINKING_FAULTS_CACHED_SQL,
    facets=("fault", "latest", "stuck"))

WEDGED = ProblemClass(
    "wedged", THINKING_FAULTS, NOW,
    "session-index repair SESSION_ID --write cuts the chain back to the last assistant "
    "message before the refused one and removes refused thinking from earlier messages (the "
    "file is backed up first); or resume with Claude Code "
    f"{max(thinking.RECOVERS_FROM.values(), key=thinking.version_key)} or newer, which drops "
    "every thinking block",
    listing=Listing(
        "wedged",
        "Thinking blocks the API refuses in the latest assistant message of a session's "
        "resume chain (stuck: the Claude Code that last wrote it resends them on every "
        "resume: the session is wedged; else that version drops every thinking block and "
        "the resume loses the thinking).",
        "session-index wedged --json",
        columns=("session_id", "fault", "block", "model", "resumer_version", "stuck", "last_seen"),
        order_by="stuck DESC, last_seen DESC, session_id, line_no, block", where="latest"),
    query=CannedQuery("wedged", "Wedged sessions",
                      "Thinking blocks the API refuses in the latest assistant message, the "
                      "sessions whose resume stays stuck first.",
                      "SELECT * FROM thinking_faults WHERE latest "
                      "ORDER BY stuck DESC, last_seen DESC"),
    health=(   # (stuck: the verdict's row, VERDICTS)
        HealthRow("Refused thinking in the latest message: the resume drops all thinking",
                  at="last_seen", detail="fault || ' thinking, Claude Code ' || "
                                         "coalesce(resumer_version, '?')",
                  where="latest AND NOT stuck", link="latest=1&stuck=0", severity=SOON),
    ))

THINKING_HISTORY = ProblemClass(
    "thinking_faults", "thinking_faults", HISTORY,
    "the API refuses changed thinking only in the latest assistant message: these resume; "
    "session-index repair SESSION_ID --write removes them",
    health=(HealthRow("Refused thinking in earlier messages", at="last_seen",
                      detail="fault || ' thinking, line ' || line_no", where="NOT latest",
                      link="latest=0"),))


# --- api_error splices: recovered output --resume drops ------------------------

# api_error_splices: chain/definitions.py's API_ERROR_SPLICES_SQL (the verdict
# reads the same episodes for one file).

# splices: episodes where late-flushed api_error records took over
# the chain and --resume drops the recovered output, newest first, with at
# least :min_orphaned orphaned records (blank: 1).
SPLICES_QUERY_SQL = """
SELECT a.session_id, a.orphaned_records, a.orphaned_assistant_messages,
  a.first_orphan_at, a.last_orphan_at, a.minutes_spanned, a.api_error_uuid,
  a.branch_point_uuid, a.file_id, s.cwd
FROM api_error_splices a LEFT JOIN sessions s ON s.session_id = a.session_id
WHERE a.orphaned_records >= CAST(coalesce(nullif(:min_orphaned, ''), 1) AS INTEGER)
ORDER BY a.last_orphan_at DESC
""".strip()

API_ERROR_SPLICES = SignalView(
    "api_error_splices",
    "One row per episode where late-flushed api_error records took over the chain and "
    "--resume drops the recovered output (seed 000).",
    {"api_error_uuid": "the api_error record on the chain, parented on the branch point",
     "branch_point_uuid": "where the orphaned output leaves the chain",
     "orphaned_records": "records --resume drops in this episode",
     "orphaned_assistant_messages": "distinct assistant message.ids among them",
     "first_orphan_at": f"earliest orphaned record, {TS}",
     "last_orphan_at": f"latest orphaned record, {TS}",
     "minutes_spanned": "minutes between them"},
    common=("file_id", "session_id", "host"), sql=API_ERROR_SPLICES_SQL,
    units={"minutes_spanned": "min"})

SPLICED = ProblemClass(
    "api_error_splices", API_ERROR_SPLICES, NOW,
    "session-index repair SESSION_ID --write re-parents the recovered output onto the "
    "resume chain (the file is backed up first)",
    query=CannedQuery("splices", "api_error splices",
                      "Recovered output that --resume drops, newest first.",
                      SPLICES_QUERY_SQL),
    health=(HealthRow("api_error splices: --resume drops recovered output",
                      at="last_orphan_at",
                      detail="orphaned_records || ' records, ' || minutes_spanned || ' min'",
                      severity=HISTORY),   # in the transcript a resume opens: VERDICTS
            ))


# --- failed: claude -p runs that failed ----------------------------------------

# executions: one row per `result` event of a `claude -p --output-format
# stream-json` log. error_message: the result text, else the errors, never
# empty for an error. error_class: the first of resume_not_found,
# poisoned_previous_message_id, rate_limit, max_turns, max_budget, auth,
# other_error that matches; ok only when is_error is false and subtype is
# success. resume_target: the session id a "No conversation found" names.
# init_session_id: of the log's last init event before the result. A line
# SQLite cannot read as JSON (NaN) reads as {}. log_mtime orders executions.
EXECUTIONS_SQL = """
WITH events AS (
  SELECT r.id, r.file_id, f.path AS log_path, f.mtime AS log_mtime, r.line_no,
         coalesce(f.host, '') AS host,
         CASE WHEN json_valid(r.raw) THEN r.raw ELSE '{}' END AS j,
         (SELECT CASE WHEN json_valid(i.raw) AND json_type(i.raw, '$.session_id') = 'text'
                      THEN json_extract(i.raw, '$.session_id') END
          FROM records i
          WHERE i.file_id = r.file_id AND i.type = 'system' AND i.subtype = 'init'
            AND i.line_no < r.line_no
          ORDER BY i.line_no DESC LIMIT 1) AS init_session_id
  FROM records r JOIN files f ON f.id = r.file_id
  WHERE f.kind = 'execution_log' AND r.type = 'result'
),
fields AS (
  SELECT id, file_id, log_path, log_mtime, line_no, host, init_session_id,
    CASE json_type(j, '$.session_id') WHEN 'text' THEN json_extract(j, '$.session_id') END
      AS session_id,
    CASE json_type(j, '$.subtype') WHEN 'text' THEN json_extract(j, '$.subtype') END AS subtype,
    CASE json_type(j, '$.is_error') WHEN 'true' THEN 1
      WHEN 'integer' THEN json_extract(j, '$.is_error') <> 0
      WHEN 'text' THEN lower(json_extract(j, '$.is_error')) IN ('true', '1', 'yes')
      ELSE 0 END AS is_error,
    CASE json_type(j, '$.result') WHEN 'text' THEN json_extract(j, '$.result') END AS result,
    CASE json_type(j, '$.errors') WHEN 'array' THEN json_extract(j, '$.errors')
      WHEN 'text' THEN json_array(json_extract(j, '$.errors')) END AS errors,
    (SELECT group_concat(value, '; ') FROM json_each(j, '$.errors')
     WHERE value IS NOT NULL AND value <> '') AS errors_text,
    CASE WHEN json_type(j, '$.num_turns') IN ('integer', 'real')
      THEN json_extract(j, '$.num_turns') END AS num_turns,
    CASE WHEN json_type(j, '$.total_cost_usd') IN ('integer', 'real')
      THEN json_extract(j, '$.total_cost_usd') END AS total_cost_usd,
    CASE WHEN json_type(j, '$.duration_ms') IN ('integer', 'real')
      THEN json_extract(j, '$.duration_ms') END AS duration_ms
  FROM events
),
judged AS (
  SELECT *, (is_error OR coalesce(subtype, 'success') <> 'success') AS failed,
    lower(coalesce(result, '') || ' ' || coalesce(errors_text, '')) AS hay,
    coalesce(nullif(trim(result), ''), nullif(trim(errors_text), '')) AS message
  FROM fields
),
classed AS (
  SELECT *,
    CASE
      WHEN NOT failed THEN 'ok'
      WHEN hay LIKE '%no conversation found%' THEN 'resume_not_found'
      WHEN hay LIKE '%previous_message_id%' THEN 'poisoned_previous_message_id'
      WHEN hay LIKE '%rate_limit%' OR hay LIKE '%rate limit%' OR hay LIKE '%429%'
        THEN 'rate_limit'
      WHEN subtype = 'error_max_turns' OR hay LIKE '%max turns%'
        OR hay LIKE '%maximum number of turns%' THEN 'max_turns'
      WHEN subtype = 'error_max_budget_usd' OR hay LIKE '%budget%' THEN 'max_budget'
      WHEN hay LIKE '%authentication%' OR hay LIKE '%invalid api key%'
        OR hay LIKE '%unauthorized%' OR hay LIKE '%oauth token%' OR hay LIKE '%/login%'
        OR hay LIKE '% 401%' OR hay LIKE '%forbidden%' THEN 'auth'
      ELSE 'other_error'
    END AS error_class,
    ltrim(substr(message, instr(lower(message), 'session id:') + 11)) AS after_id
  FROM judged
)
SELECT id, file_id, log_path, line_no, session_id, init_session_id, subtype, is_error,
  result, errors,
  CASE WHEN failed THEN coalesce(message,
    'no message: ' || coalesce(subtype, 'result') || CASE WHEN is_error THEN ', is_error' ELSE '' END)
  ELSE message END AS error_message,
  error_class,
  CASE WHEN error_class = 'resume_not_found' AND instr(lower(message), 'session id:') > 0
    THEN rtrim(substr(after_id, 1, instr(after_id || ' ', ' ') - 1), '.,;:"`''')
  END AS resume_target,
  num_turns, total_cost_usd, duration_ms, log_mtime, host
FROM classed
""".strip()

# failed_executions: every execution that is not ok, with the real message
# and its class: success+is_error and error results with an empty `result`
# included (the seed 003 shape).
FAILED_EXECUTIONS_SQL = "SELECT * FROM executions WHERE error_class <> 'ok'"

# failed_runs: `claude -p` runs that failed, newest first, with the
# real message and class; :error_class narrows to one class (blank: all).
FAILED_RUNS_QUERY_SQL = """
SELECT * FROM failed_executions
WHERE error_class = coalesce(nullif(:error_class, ''), error_class)
ORDER BY log_mtime DESC, line_no DESC
""".strip()

EXECUTION_COLUMNS = {
    "id": "records.id of the result event",
    "log_path": "path of the claude -p stream-json log",
    "line_no": "line of the result event in the log, 1-based",
    "session_id": "session id the result event reports (links to the session page)",
    "init_session_id": "session id of the log's init event (links to the session page)",
    "subtype": "result subtype: success, error_during_execution, error_max_turns, ...",
    "is_error": "1 when the result says is_error",
    "result": "the result text",
    "errors": "the errors list, JSON",
    "error_message": "the result text, else the errors: never empty for an error",
    "error_class": "resume_not_found, poisoned_previous_message_id, rate_limit, max_turns, "
                   "max_budget, auth, other_error or ok",
    "resume_target": "the session id a 'No conversation found' error names",
    "num_turns": "turns the run took",
    "total_cost_usd": "cost of the run, US dollars",
    "duration_ms": "duration of the run, milliseconds",
    "log_mtime": f"the log file's mtime, {TS}",
    "host": "the host of the log ('' for this machine)",
}

EXECUTIONS = SignalView(
    "executions",
    "One row per result event of a claude -p --output-format stream-json log: how the run "
    "ended, classed.",
    EXECUTION_COLUMNS, common=("file_id",), sql=EXECUTIONS_SQL,
    units={"duration_ms": "ms"}, facets=("error_class", "subtype"))

FAILED_EXECUTIONS = SignalView(
    "failed_executions",
    "Executions that failed, with the real message and class, including success results "
    "with is_error and errors with an empty result.",
    EXECUTION_COLUMNS, common=("file_id",), sql=FAILED_EXECUTIONS_SQL,
    units={"duration_ms": "ms"}, facets=("error_class",))

FAILED = ProblemClass(
    "failed", FAILED_EXECUTIONS, HISTORY,
    "read error_message: resume_not_found names a session no resume can open (see stale); "
    "poisoned_previous_message_id: repair the session; rate_limit, max_turns, max_budget "
    "and auth are the run's limits or credentials",
    listing=Listing(
        "failed",
        "`claude -p` runs that failed, with the real message and its class, including "
        "those a parser reading `result` records as success (an empty result with the "
        "message in errors[], or subtype success with is_error).",
        "session-index failed --json",
        columns=("session_id", "error_class", "error_message", "subtype", "num_turns", "log_mtime"),
        order_by="log_mtime DESC, line_no DESC"),
    query=CannedQuery("failed_runs", "Failed executions",
                      "claude -p runs that failed, including ones reported as success.",
                      FAILED_RUNS_QUERY_SQL),
    health=(HealthRow("Failed executions (claude -p)", at="log_mtime",
                      detail="error_class || ': ' || substr(error_message, 1, 80)",
                      session="coalesce(session_id, init_session_id)"),))


# --- stale: referenced session ids a resume cannot use -------------------------

# stale_session_refs: every referenced session id (session_refs, and the
# resume targets of executions) that a resume cannot use now or soon:
# reason never_indexed (no main transcript ever seen), deleted (seen, gone
# from disk since deleted_at), unopenable (on disk, but `claude --resume`
# opens none of its files: none is named <id>.jsonl, or the named one holds
# no message; sessions.main_file_rule not_named / named_no_messages), expired
# (on disk but past retention: the next Claude Code start deletes it). refs/sources: its references; the last
# execution that named it, by log mtime and line.
STALE_SESSION_REFS_TEMPLATE = """
WITH refs AS (
  SELECT session_id, source, cached_at FROM session_refs
  UNION ALL
  SELECT resume_target, 'execution', NULL FROM executions WHERE resume_target IS NOT NULL
),
ref_ids AS (
  SELECT session_id, count(*) AS refs, group_concat(DISTINCT source) AS sources,
         max(cached_at) AS last_cached_at
  FROM refs GROUP BY session_id
),
state AS (
  SELECT i.*, m.id AS file_id, m.path, coalesce(m.host, '') AS host, s.deleted_at,
         s.main_file_rule,
         strftime('%Y-%m-%dT%H:%M:%fZ', julianday(m.mtime) + coalesce(m.retention_days, {DEFAULT_RETENTION_DAYS}))
           AS expires_at
  FROM ref_ids i
  LEFT JOIN sessions s ON s.session_id = i.session_id
  LEFT JOIN files m ON m.id = s.main_file_id
),
judged AS (
  SELECT *,
    CASE WHEN file_id IS NULL THEN 'never_indexed'
         WHEN deleted_at IS NOT NULL THEN 'deleted'
         WHEN main_file_rule IN ('not_named', 'named_no_messages') THEN 'unopenable'
         WHEN julianday({now}) >= julianday(expires_at) THEN 'expired'
    END AS reason
  FROM state
)
SELECT j.session_id, j.reason, j.deleted_at,
       CASE WHEN j.reason = 'expired' THEN j.expires_at END AS expired_at,
       j.path, j.refs, j.sources, j.last_cached_at,
       e.id AS last_execution_id, e.error_class AS last_execution_class,
       e.log_path AS last_execution_log, j.host
FROM judged j
LEFT JOIN executions e ON e.id = (
  SELECT x.id FROM executions x
  WHERE x.resume_target = j.session_id OR x.init_session_id = j.session_id
     OR x.session_id = j.session_id
  ORDER BY x.log_mtime DESC, x.line_no DESC LIMIT 1)
WHERE j.reason IS NOT NULL
""".strip()
STALE_SESSION_REFS_TEMPLATE = STALE_SESSION_REFS_TEMPLATE.replace("{DEFAULT_RETENTION_DAYS}", str(DEFAULT_RETENTION_DAYS))

# stale_refs: referenced session ids a resume cannot use;
# :reason narrows to never_indexed, deleted, unopenable or expired (blank: all).
STALE_REFS_QUERY_SQL = """
SELECT * FROM stale_session_refs
WHERE reason = coalesce(nullif(:reason, ''), reason)
ORDER BY reason, session_id
""".strip()

STALE_SESSION_REFS = SignalView(
    "stale_session_refs",
    "Referenced session ids a resume cannot use now or soon.",
    {"reason": "never_indexed (no transcript ever seen), deleted (gone from disk), "
               "unopenable (on disk, but claude --resume opens none of its files: none is "
               "named <session_id>.jsonl, or that one holds no message) or expired (past "
               "retention: the next Claude Code start deletes it)",
     "deleted_at": f"when it was found gone, {TS}",
     "expired_at": f"when it passed its retention, {TS}",
     "path": "its main transcript", "refs": "references to it",
     "sources": "the applications (and execution logs) that reference it",
     "last_cached_at": f"the newest cached_at among them, {TS}",
     "last_execution_id": "records.id of the last execution that tried it",
     "last_execution_class": "that execution's error_class",
     "last_execution_log": "that execution's log file",
     "host": "the host of its main transcript ('' for this machine, and when it was never "
             "indexed)"},
    common=("session_id",), template=STALE_SESSION_REFS_TEMPLATE, view_args={"now": CLOCK},
    facets=("reason",))

STALE = ProblemClass(
    "stale", STALE_SESSION_REFS, NOW,
    "deleted: session-index restore SESSION_ID; expired: resume it before the next Claude "
    "Code start; never_indexed or unopenable: ingest where its transcript is, or drop the "
    "reference",
    listing=Listing(
        "stale",
        "Referenced session ids (refs import, and resume targets of executions) that a "
        "resume cannot use: never_indexed, deleted, unopenable (no file a resume opens: "
        "none named SESSION_ID.jsonl with a message), or expired.",
        "session-index stale --now 2026-12-01T00:00:00Z",
        columns=("session_id", "reason", "refs", "last_execution_class", "path"),
        order_by="reason, session_id", now=True, args={"now": ":now"}),
    query=CannedQuery("stale_refs", "Stale session references",
                      "Session ids applications hold that a resume cannot use.",
                      STALE_REFS_QUERY_SQL),
    health=(HealthRow("Stale session references",
                      at="coalesce(deleted_at, expired_at, last_cached_at)",
                      detail="reason || ' (' || refs || ' refs)'"),))


# --- expiring: transcripts Claude Code's cleanup deletes -----------------------

# expired_transcripts: transcript files Claude Code's cleanup deletes by mtime
# (<project>/*.jsonl: main files and legacy agent-*.jsonl; nested subagent
# files were not deleted as of 2.1.88) that are deleted (kept only in the
# index), expired (past retention, still on disk: the next Claude Code start
# deletes them) or expiring within {window} days. mtime is as of the last
# ingest; retention_days/retention_source as resolved at ingest (retention.py).
EXPIRED_TRANSCRIPTS_TEMPLATE = """
WITH subject AS (
  SELECT f.id AS file_id, f.session_id, f.path, f.kind, f.mtime, f.deleted_at,
         coalesce(f.host, '') AS host,
         coalesce(f.retention_days, {DEFAULT_RETENTION_DAYS}) AS retention_days,
         coalesce(f.retention_source, 'default') AS retention_source,
         strftime('%Y-%m-%dT%H:%M:%fZ', julianday(f.mtime) + coalesce(f.retention_days, {DEFAULT_RETENTION_DAYS}))
           AS expires_at
  FROM files f
  WHERE (f.kind = 'main' OR (f.kind = 'subagent' AND f.path NOT LIKE '%/subagents/%'))
    AND f.agent = 'claude-code'   -- (another agent's files are not Claude Code's to delete)
    -- (only what can be judged below: deleted, or due within the window or already,
    -- give or take a second for expires_at's rounding to the millisecond; a number
    -- compared, not a time written and read back for every file: 16 -> 4 ms at a
    -- million records)
    AND (f.deleted_at IS NOT NULL OR julianday(f.mtime) + coalesce(f.retention_days, {DEFAULT_RETENTION_DAYS})
         - julianday({now}) <= max({window}, 0) + 1 / 86400.0)
),
judged AS (
  SELECT *,
    CASE WHEN deleted_at IS NOT NULL THEN 'deleted'
         WHEN julianday({now}) >= julianday(expires_at) THEN 'expired'
         WHEN julianday(expires_at) - julianday({now}) <= {window} THEN 'expiring'
    END AS status,
    CASE WHEN deleted_at IS NULL
         THEN round(julianday(expires_at) - julianday({now}), 2) END AS days_left
  FROM subject
)
SELECT file_id, session_id, path, kind, status, expires_at, days_left, retention_days,
       retention_source, mtime, deleted_at, host
FROM judged WHERE status IS NOT NULL
""".strip()
EXPIRED_TRANSCRIPTS_TEMPLATE = EXPIRED_TRANSCRIPTS_TEMPLATE.replace("{DEFAULT_RETENTION_DAYS}", str(DEFAULT_RETENTION_DAYS))

# expiring_transcripts: transcripts expired (still on disk, deleted at the next
# Claude Code start) or expiring within :days days, soonest first; deleted
# ones are in the expired_transcripts view.
EXPIRING_QUERY_SQL = (
    "SELECT * FROM ({}) WHERE status IN ('expired', 'expiring') ORDER BY days_left".format(
        EXPIRED_TRANSCRIPTS_TEMPLATE.format(
            now=CLOCK,
            window=f"CAST(coalesce(nullif(:days, ''), {EXPIRING_WINDOW_DAYS}) AS REAL)")))

EXPIRED_TRANSCRIPTS = SignalView(
    "expired_transcripts",
    "Transcripts Claude Code's cleanup deletes by mtime: expiring (within "
    f"{EXPIRING_WINDOW_DAYS} days), expired (past it, still on disk) or deleted (kept only "
    "here).",
    {"path": "the transcript's path",
     "status": "expiring, expired or deleted",
     "expires_at": f"mtime + retention, {TS}",
     "days_left": "days until expires_at (negative: past it); NULL when deleted",
     "retention_days": "cleanupPeriodDays in force, days",
     "retention_source": "the settings file that set it, or default",
     "mtime": f"the file's mtime at the last ingest, {TS}",
     "deleted_at": f"when it was found gone, {TS}"},
    common=("file_id", "session_id", "kind", "host"), template=EXPIRED_TRANSCRIPTS_TEMPLATE,
    view_args={"now": CLOCK, "window": EXPIRING_WINDOW_DAYS},
    units={"days_left": "day", "retention_days": "day"}, facets=("status", "retention_source"))

EXPIRING = ProblemClass(
    "expiring", EXPIRED_TRANSCRIPTS, SOON,
    "resume or copy the session before expires_at, or raise cleanupPeriodDays in "
    "Claude Code's settings.json; a deleted one: session-index restore SESSION_ID",
    listing=Listing(
        "expiring",
        "Transcripts Claude Code's cleanup will delete within --days, has already made "
        "due (expired, still on disk), or deleted (kept in the index).",
        "session-index expiring --days 7 --json",
        columns=("session_id", "status", "days_left", "expires_at", "kind", "path"),
        order_by="days_left IS NULL, days_left, path", now=True,
        args={"now": ":now", "window": ":days"},
        params=(Param("days", float, EXPIRING_WINDOW_DAYS,
                      "Report transcripts expiring within this many days.", "N", minimum=0),)),
    query=CannedQuery("expiring_transcripts", "Transcripts expiring within N days",
                      "Transcripts Claude Code's cleanup deletes soon, soonest first.",
                      EXPIRING_QUERY_SQL),
    health=(
        HealthRow("Transcripts expired, still on disk", at="expires_at", detail="path",
                  where="status = 'expired'", link="status=expired"),
        HealthRow(f"Transcripts expiring within {EXPIRING_WINDOW_DAYS} days",
                  at="expires_at", detail="days_left || ' days left'",
                  where="status = 'expiring'", link="status=expiring"),
    ))


# --- Classes that read views declared elsewhere (chain, files) -----------------

LEAVES_DISAGREE = ProblemClass(
    "leaves_disagree", "leaves", HISTORY,
    "nothing breaks: claude --resume and the Agent SDK start from different leaves; the "
    "session page marks both",
    health=(HealthRow("Leaves that disagree (resume vs SDK)", session="l.session_id",
                      at="r.timestamp", detail="l.branch_count || ' branches'",
                      source="leaves l LEFT JOIN records r ON r.id = l.resume_leaf_id",
                      where="NOT l.leaves_agree", link="leaves_agree=0"),))

_ORPHAN_LINE = dict(at="timestamp", detail="type || ' line ' || line_no")


def _orphans(cause: str, label: str, fix: str) -> ProblemClass:
    """Records --resume drops for one cause (the orphans view's cause)."""
    return ProblemClass(
        f"orphans_{cause}", "orphans", HISTORY, fix,
        health=(HealthRow(label, where=f"cause = '{cause}'", link=f"cause={cause}",
                          **_ORPHAN_LINE),))


ORPHANS = (
    _orphans("parallel_tool_branch", "Parallel tool branches dropped",
             "most are put back by the CLI on load (orphans.restored); read the rest on the "
             "session page"),
    _orphans("late_graft", "Conversation cut off by a late graft",
             "a tool result written long after onto a call answered already (a permission "
             "response drained at start-up, anthropics/claude-code#62301) is the last row: a "
             "resume continues from it, and what came after the first answer is not sent; "
             "read it on the session page"),
    _orphans("concurrent_resume", "Conversation of a concurrent resume dropped",
             "two processes resumed the session at once (anthropics/claude-code#48270): each "
             "appended its own conversation, and a resume continues the one written last; the "
             "other's is not sent. Read it on the session page, or session-index export "
             "SESSION_ID; resume one session in one process at a time"),
    _orphans("abandoned_branch", "Abandoned branches (rewinds, edits)",
             "none: a rewind or an edited prompt left them; they stay readable here"),
    _orphans("dangling_parent", "Records after a missing parent",
             "a resume never reads them; session-index export SESSION_ID keeps them"),
    _orphans("unlinked", "Records under another root",
             "a resume never reads them; session-index export SESSION_ID keeps them"),
    _orphans("other", "Records in parent cycles",
             "the CLI stops at a parentUuid cycle; read the records on the session page"),
)

CHAIN_BREAKS = ProblemClass(
    "chain_breaks", "chain_breaks", HISTORY,
    "the resume walk stops at the break: what is above it is not sent; no line names the "
    "missing parent, so nothing can re-link it",
    health=(HealthRow("Chain breaks (parentUuid not in the file)", **_ORPHAN_LINE),))

DUPLICATE_UUIDS = ProblemClass(
    "duplicate_uuids", "duplicate_uuids", HISTORY,
    "none: both readers use the last line; compare line_nos when the copies differ",
    health=(HealthRow("Duplicate uuids", at="NULL",
                      detail="copies || ' copies of ' || uuid"),))

BAD_LINES = ProblemClass(
    "bad_lines", "bad_lines", HISTORY,
    "the lines around them are kept; a cut-off last line is a write that was interrupted",
    health=(HealthRow("Bad lines (not JSON objects)", session="f.session_id",
                      at="f.mtime", detail="b.error",
                      source="bad_lines b JOIN files f ON f.id = b.file_id"),))

DIVERGED_COPIES = ProblemClass(
    "diverged_copies", "session_main_copies", SOON,
    "claude --resume opens the chosen copy: when the other holds the work, put it in the "
    "chosen one's place (keep a backup)",
    health=(HealthRow("Copies of a session that differ from the transcript --resume opens",
                      at="mtime",
                      detail="why || ': ' || only_here || ' uuids only there, ' || "
                             "only_in_chosen || ' only in the one opened'",
                      where="NOT chosen AND diverged AND on_disk",
                      link="chosen=0&diverged=1&on_disk=1"),))

DELETED_TRANSCRIPTS = ProblemClass(   # the session's verdict says what it breaks
    "deleted_transcripts", "files", HISTORY,
    "session-index restore SESSION_ID writes the transcript back from the index",
    health=(HealthRow("Transcripts deleted from disk", at="deleted_at", detail="path",
                      where="deleted_at IS NOT NULL", link="deleted_at__notblank=1"),))


# --- compactions: sessions compacted more than N times -------------------------

# session_compactions: one row per session and host whose main transcript
# there (session_hosts) holds compact_boundary records: compactions counts
# them, first/last_compaction_at are the first and the last. Each compaction
# replaces the conversation before it with a summary, so a session compacted
# many times has lost detail as many times.
SESSION_COMPACTIONS_SQL = """
SELECT h.session_id, h.main_file_id AS file_id, count(*) AS compactions,
       min(r.timestamp) AS first_compaction_at, max(r.timestamp) AS last_compaction_at,
       h.host
FROM session_hosts h
JOIN records r ON r.file_id = h.main_file_id
WHERE r.type = 'system' AND r.subtype = 'compact_boundary'
GROUP BY h.session_id, h.host
""".strip()
# The compactions listing's, canned query's and health row's N by default.
COMPACTIONS_MORE_THAN = 10

# many_compactions: sessions with more than :more_than compactions (blank:
# COMPACTIONS_MORE_THAN), the most compacted first.
MANY_COMPACTIONS_QUERY_SQL = f"""
SELECT * FROM session_compactions
WHERE compactions > CAST(coalesce(nullif(:more_than, ''), {COMPACTIONS_MORE_THAN}) AS INTEGER)
ORDER BY compactions DESC, session_id
""".strip()

SESSION_COMPACTIONS = SignalView(
    "session_compactions",
    "Sessions whose main transcript was compacted (compact_boundary records), with how many "
    "times: each compaction replaces the conversation before it with a summary.",
    {"compactions": "compact_boundary records in the session's main transcript",
     "first_compaction_at": f"the first of them, {TS}",
     "last_compaction_at": f"the last of them, {TS}"},
    common=("session_id", "file_id", "host"), sql=SESSION_COMPACTIONS_SQL,
    facets=("compactions",))

COMPACTIONS = ProblemClass(
    "compactions", SESSION_COMPACTIONS, HISTORY,
    "a long session loses detail at each compaction: consider starting a fresh session "
    "(or /clear) with a short summary of what still matters",
    listing=Listing(
        "compactions",
        "Sessions whose main transcript was compacted more than --more-than times "
        "(compact_boundary records), the most compacted first: each compaction replaces "
        "the conversation before it with a summary.",
        "session-index compactions --more-than 20 --table",
        columns=("session_id", "compactions", "first_compaction_at", "last_compaction_at"),
        order_by="compactions DESC, session_id", where="compactions > :more_than",
        params=(Param("more_than", int, COMPACTIONS_MORE_THAN,
                      "List sessions compacted more than this many times.", "N"),)),
    query=CannedQuery("many_compactions", "Sessions with more than N compactions",
                      "Sessions compacted more than :more_than times (blank: "
                      f"{COMPACTIONS_MORE_THAN}), the most compacted first.",
                      MANY_COMPACTIONS_QUERY_SQL),
    health=(HealthRow(f"Sessions with more than {COMPACTIONS_MORE_THAN} compactions",
                      at="last_compaction_at", detail="compactions || ' compactions'",
                      where=f"compactions > {COMPACTIONS_MORE_THAN}",
                      link=f"compactions__gt={COMPACTIONS_MORE_THAN}"),))


# --- compaction segments: what a resume reaches after each compaction ----------

# compaction_segments: signals/compaction.py's COMPACTION_SEGMENTS_SQL (the
# verdict reads the same truncation for one file).
COMPACTION_SEGMENTS = SignalView(
    "compaction_segments",
    "One row per compaction of each session's main transcript: the conversation records "
    "after it (up to the next one) a resume reaches and loses, the copies a second /compact "
    "re-appended (anthropics/claude-code#92089: counted once), and whether the "
    "preservedSegment links hold.",
    {"boundary_uuid": "the compact_boundary record's uuid",
     "position": "1 for the first compaction of the transcript",
     "last": "1 for the last compaction: the one a resume starts after",
     "compacted_at": f"the boundary's timestamp, {TS}",
     "records": "user and assistant records whose first line is after this boundary and "
                "before the next one (a copy counts once, where it was first written)",
     "copies": "lines after this boundary (before the next) that copy an earlier line "
               "across a compaction: same uuid, same bytes but for promptId and slug",
     "reached": "of records, those on the resume chain or put back after the walk",
     "lost": "records - reached",
     "lost_causes": "the orphans causes of the lost records, with counts (compacted: a later "
                    "compaction replaced them with its summary)",
     "preserved": "segment (compactMetadata.preservedSegment), list (preservedMessages) or "
                  "empty: how the boundary names what it kept",
     "preserved_finding": "head_missing, tail_missing, anchor_missing, listed_missing, "
                          "segment_does_not_reach_head (Claude Code relinks nothing), "
                          "tail_not_logical_parent; empty when the links hold",
     "truncated": "the last compaction only: unreached_after_compaction or "
                  "segment_not_relinked when a resume loses conversation (the verdict "
                  "truncated)",
     "truncated_records": "how many conversation records that resume loses"},
    common=("session_id", "file_id", "host"), sql=compaction.COMPACTION_SEGMENTS_SQL,
    facets=("truncated", "preserved_finding"))

# A compaction worth a look: a resume loses conversation after it, a link of
# what it kept is broken, or copies were re-appended after it.
_SEGMENT_FINDING = "(truncated IS NOT NULL OR preserved_finding IS NOT NULL OR copies > 0)"

COMPACTION_AUDIT = ProblemClass(
    "compaction_segments", COMPACTION_SEGMENTS, HISTORY,
    "session-index repair SESSION_ID --write relinks what a resume loses when the records "
    "are in the file (session-index check SESSION_ID says truncated); copies re-appended by "
    "a second /compact are dropped by Claude Code 2.1.332 on resume and need no repair",
    listing=Listing(
        "compaction-segments",
        "Compactions of main transcripts where a resume loses conversation (truncated), a "
        "preservedSegment link is broken, or a second /compact re-appended copies "
        "(anthropics/claude-code#92089, #46603); the compaction_segments view holds every "
        "compaction.",
        "session-index compaction-segments --json",
        columns=("session_id", "position", "compacted_at", "lost", "truncated", "preserved_finding"),
        order_by="truncated IS NULL, session_id, position", where=_SEGMENT_FINDING),
    query=CannedQuery("compaction_findings", "Compactions with a finding",
                      "Compactions where a resume loses conversation, a preservedSegment link "
                      "is broken, or copies were re-appended; :session_id narrows to one.",
                      f"SELECT * FROM compaction_segments WHERE {_SEGMENT_FINDING} "
                      "AND (coalesce(:session_id, '') = '' OR session_id = :session_id) "
                      "ORDER BY truncated IS NULL, session_id, position"),
    health=(HealthRow("Compactions with copies re-appended or broken preservedSegment links",
                      at="compacted_at",
                      detail="coalesce(preserved_finding, copies || ' copies')",
                      where="truncated IS NULL AND (preserved_finding IS NOT NULL "
                            "OR copies > 0)",
                      link="_where=truncated+IS+NULL"),))


# --- unwritten: transcripts never written, stopped, or deleted with their folder left ----

# unwritten_transcripts: signals/unwritten.py's definition (the verdict reads
# the same causes for one session), at the clock.

# unwritten: sessions whose transcript was never written, stopped being
# written or was deleted while its folder lived on; :cause narrows to one
# cause (blank: all); the newest evidence first.
UNWRITTEN_QUERY_SQL = """
SELECT * FROM unwritten_transcripts
WHERE cause = coalesce(nullif(:cause, ''), cause)
ORDER BY evidence_at DESC, session_id
""".strip()

UNWRITTEN_TRANSCRIPTS = SignalView(
    "unwritten_transcripts",
    "Sessions that ran while their transcript was not written: never written, stopped "
    "(prompts in history.jsonl or tool results after its newest record), or deleted while "
    "its session folder's tool results survive (anthropics/claude-code #91284, #76829, "
    "#79369, #70219, #53417, #95403).",
    {"cause": "never_written (no transcript ever indexed, yet prompts within the cleanup "
              "period or tool results say the session ran), husk (the transcript deleted, "
              "its folder's tool results left: not the cleanup) or stopped_writing (prompts "
              "or tool results more than "
              f"{unwritten.STOPPED_AFTER_MINUTES} minutes after the transcript's newest record)",
     "project": "the working directory of its last prompt in history.jsonl",
     "path": "its main transcript, when the index holds one",
     "last_message_at": f"that transcript's newest record, {TS}",
     "prompts": "its prompts in history.jsonl (slash commands, ! and # lines left out)",
     "first_prompt_at": f"the first of them, {TS}",
     "last_prompt_at": f"the last of them, {TS}",
     "folder": "its session folder (<project>/<session id>/) on disk",
     "tool_results": "files in the folder's tool-results/",
     "subagent_files": "files in the folder's subagents/",
     "workflow_files": "files in the folder's workflows/",
     "last_sidecar_at": f"the newest file's mtime in tool-results/ and workflows/, {TS}",
     "evidence_at": f"the newest of last_prompt_at and last_sidecar_at, {TS}",
     "reason": "the sentence check prints",
     "host": "'' (this machine: history.jsonl and the folders are read where ingest runs)"},
    common=("session_id",), template=unwritten.UNWRITTEN_TRANSCRIPTS_TEMPLATE,
    view_args={"now": CLOCK}, facets=("cause",))

UNWRITTEN = ProblemClass(
    "unwritten", UNWRITTEN_TRANSCRIPTS, NOW,
    "the transcript holds nothing after the time it names: start a new session (its prompts "
    "are in history.jsonl: the prompts and project columns); a husk: session-index restore "
    "SESSION_ID; to keep the next ones, set CLAUDE_CODE_FORCE_SESSION_PERSISTENCE=1 where "
    "Claude Code runs in tmux or another multiplexer, and watch for its \"Transcript saving "
    "is off\" warning (2.1.217 and newer)",
    listing=Listing(
        "unwritten",
        "Sessions that ran while their transcript was not written: never written (prompts "
        "in history.jsonl within the cleanup period, or tool results, but no transcript), "
        "stopped (prompts or tool results after its newest record), or a husk (deleted "
        "while its folder's tool results survive).",
        "session-index unwritten --json",
        columns=("session_id", "cause", "project", "last_prompt_at", "last_sidecar_at", "reason"),
        order_by="evidence_at DESC, session_id", now=True, args={"now": ":now"}),
    query=CannedQuery("unwritten", "Transcripts never written or stopped",
                      "Sessions that ran while Claude Code wrote no transcript of them.",
                      UNWRITTEN_QUERY_SQL),
    health=(
        HealthRow("Transcripts never written (history.jsonl, session folders)",
                  at="evidence_at", detail="cause || ': ' || coalesce(project, folder, '')",
                  where="cause IN ('never_written', 'husk')", link="cause__in=never_written,husk"),
        HealthRow("Transcripts that stopped while the session went on",
                  at="evidence_at", detail="'stopped at ' || last_message_at",
                  where="cause = 'stopped_writing'", link="cause=stopped_writing"),
    ))


# --- forks: transcripts copied from another session, and empty forks -------------

# session_forks: signals/forks.py's definition.

# forks: forks and empty forks, with their parent; :session_id narrows to the
# forks of that session and the session itself (blank: all).
FORKS_QUERY_SQL = """
SELECT * FROM session_forks
WHERE coalesce(nullif(:session_id, ''), session_id) IN (session_id, parent_session_id)
ORDER BY kind = 'empty' DESC, forked_at DESC, session_id
""".strip()

SESSION_FORKS = SignalView(
    "session_forks",
    "Main transcripts that begin with records copied from another session (a fork: "
    "/branch, --fork-session, a desktop fork), with the session they came from, and empty "
    "forks holding only title rows (anthropics/claude-code #95234, #85875).",
    {"path": "the fork's transcript",
     "kind": "fork (records copied from another session) or empty (only ai-title, "
             "custom-title and agent-name rows: a fork that copied nothing, #85875)",
     "parent_session_id": "the session it was copied from (links to the session page)",
     "link": "what says so: forked_from (the records' forkedFrom.sessionId: /branch), "
             "copied_session_id (the copies keep the parent's sessionId: a desktop fork, "
             "#95234), request_session_id (the copied replies' requestSessionId: "
             "--fork-session), job_state (the background job's state.json: "
             "forkParentSessionId, session_links)",
     "parent_file_id": "the parent's main transcript (sessions.main_file_id), when indexed",
     "copied_records": "its records whose uuid is in a main transcript of the parent",
     "foreign_records": "its records whose sessionId is not the file's: a viewer or export "
                        "filtering by sessionId puts them under the parent (#95234); the "
                        "index keeps them with this session",
     "forked_at": f"its first message not copied from the parent, {TS}",
     "records": "records in the fork's transcript",
     "host": "the host of file_id ('' for this machine)"},
    common=("file_id", "session_id"), sql=forks.SESSION_FORKS_SQL,
    facets=("kind", "link"))

FORKS = ProblemClass(
    "forks", SESSION_FORKS, HISTORY,
    "a fork is read whole here whatever sessionId its records carry (session page, export, "
    "search); an empty fork holds no conversation: resume the parent (parent_session_id, "
    "when known) or fork it again from the CLI (claude --resume PARENT --fork-session)",
    listing=Listing(
        "forks",
        "Main transcripts copied from another session (forks: /branch, --fork-session, "
        "desktop forks whose copies keep the parent's sessionId) with their parent, and empty "
        "forks holding only title rows.",
        "session-index forks --json",
        columns=("session_id", "kind", "parent_session_id", "forked_at", "records"),
        order_by="kind = 'empty' DESC, forked_at DESC, session_id"),
    query=CannedQuery("forks", "Forks and their parents",
                      "Transcripts copied from another session, and empty forks; "
                      ":session_id narrows to one session's forks.",
                      FORKS_QUERY_SQL),
    health=(
        HealthRow("Empty forks: only title rows, no conversation",
                  at="(SELECT f.mtime FROM files f WHERE f.id = session_forks.file_id)",
                  detail="path", where="kind = 'empty'", link="kind=empty", severity=NOW),
        HealthRow("Forks: records copied from another session",
                  at="forked_at",
                  detail="'from ' || parent_session_id || ' (' || link || '), ' || "
                         "foreign_records || ' records under its id'",
                  where="kind = 'fork'", link="kind=fork"),
    ))


# --- Every class, in the health page's order -----------------------------------

CLASSES = (VERDICTS, POISONED, WEDGED, SPLICED, UNWRITTEN, FAILED, STALE, EXPIRING, LEAVES_DISAGREE,
           *ORPHANS, CHAIN_BREAKS, DUPLICATE_UUIDS, BAD_LINES, DIVERGED_COPIES, DELETED_TRANSCRIPTS,
           COMPACTIONS, COMPACTION_AUDIT, FORKS, THINKING_HISTORY)
# Every view declared here, in the order they are created: executions (no
# class's own: the classes read it), then each class's own.
SIGNAL_VIEWS = (EXECUTIONS, *(c.view for c in CLASSES if not isinstance(c.view, str)))
# The classes with a listing command, by command name.
LISTED = {c.listing.command: c for c in CLASSES if c.listing}


def listing_help(cls: ProblemClass) -> str:
    """The listing command's --help: what it lists, the exit code, what to
    do about it, its example."""
    return f"""{cls.listing.summary} Exit 1 when there are any.

    What to do: {cls.fix}.

    Example:

    \b
        {cls.listing.example}
    """


def listing_sql(cls: ProblemClass) -> str:
    """The listing's query: rows of the class's view (or, with the listing's
    args, of its template filled with them), filtered, ordered."""
    listing = cls.listing
    source = cls.view_name
    if listing.args:
        source = "({})".format(cls.view.template.format(**{**cls.view.view_args,
                                                             **listing.args}))
    where = f" WHERE {listing.where}" if listing.where else ""
    return f"SELECT * FROM {source}{where} ORDER BY {listing.order_by}"


def listing_params(cls: ProblemClass, given: dict) -> dict:
    """The listing's bound parameters: each Param's default unless given."""
    params = {p.name: p.default for p in cls.listing.params}
    params.update({k: v for k, v in given.items() if v is not None})
    return params
