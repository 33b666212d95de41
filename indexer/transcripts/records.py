"""What a transcript record is, defined once: the columns a line becomes
(RECORD_FIELDS), which types are links of the chain (CHAIN_TYPES), the
parent the cause walk follows (effective_parent), and the kinds that mean
something to a reader: a synthetic placeholder, an API error, a compaction,
a meta record. Each rule is here in Python (over a parsed entry, a dict as
Claude Code wrote it, or over a record's columns) and, where the views need
it, in SQL (a template over a ``records`` alias ``{r}``), side by side;
tests/test_records.py holds each pair to the same answers.

Every reader imports these: the views (index/views.py), the walks
(chain/), the conversation the SDK rebuilds (conversation.py), check,
repair, show and verify, and the web UI's session page and cells.
Migrations are the exception: a migration keeps its own literal copy, since
it must never change once applied.
"""

from __future__ import annotations

import json

# The columns of a parsed record, in the order the parser (lines.py) gives
# them and ingest inserts them; each with the transcript field it holds.
# records (migrations.m002 and later) has these columns, plus file_id,
# line_no, byte_offset and raw.
RECORD_FIELD_SOURCES = {
    "session_id": "sessionId (session_id in `claude -p` stream-json events)",
    "uuid": "uuid",
    "parent_uuid": "parentUuid",
    "logical_parent_uuid": "logicalParentUuid (a compact_boundary's pre-compaction parent)",
    "type": "type",
    "subtype": "subtype (of system records)",
    "timestamp": "timestamp",
    "is_sidechain": "isSidechain, 0/1",
    "is_meta": "isMeta, 0/1",
    "team_name": "teamName",
    "agent_id": "agentId",
    "message_id": "message.id",
    "model": "message.model",
    "request_id": "requestId",
    "is_api_error": "isApiErrorMessage, 0/1",
    "is_compact_summary": "isCompactSummary, 0/1",
    "is_tool_result": "1 when message.content holds a tool_result block",
    "cwd": "cwd",
    "version": "version",
    "git_branch": "gitBranch",
    "leaf_uuid": "leafUuid (summary and last-prompt records)",
    "is_unreadable": "1 when Claude Code's loader drops the user/assistant record as unreadable",
    "sent_as_uuid": "sentAsUuid (a prompt Claude Code stored anew: the uuid it was sent under)",
    "rows_ahead": ("rowsAheadOfPutBack, a JSON array (a tool_result record naming the rows "
                   "the loader puts back ahead of it: walk.rows_ahead_put_back)"),
    "source_tool_assistant_uuid": (
        "sourceToolAssistantUUID, kept only when it names another uuid than parentUuid (the one "
        "case the loader reads it: it recovers a stray tool_result under the record it names, "
        "walk.recovered_by_tool_use_id)"),
    # message.usage of an assistant record (lines._usage_struct): has_usage
    # 1 when it is an object; each count an integer only when it is a JSON
    # number, speed and service_tier text only when strings, else NULL.
    "has_usage": "1 when an assistant record's message.usage is an object",
    "input_tokens": "usage.input_tokens",
    "output_tokens": "usage.output_tokens",
    "cache_read_tokens": "usage.cache_read_input_tokens",
    "cache_creation_tokens": "usage.cache_creation_input_tokens",
    "cache_5m_tokens": "usage.cache_creation.ephemeral_5m_input_tokens",
    "cache_1h_tokens": "usage.cache_creation.ephemeral_1h_input_tokens",
    "speed": "usage.speed",
    "service_tier": "usage.service_tier",
}
RECORD_FIELDS = tuple(RECORD_FIELD_SOURCES)
# The usage columns, the tail of RECORD_FIELDS (lines.NO_USAGE).
USAGE_FIELDS = RECORD_FIELDS[RECORD_FIELDS.index("has_usage"):]

# --- The chain ------------------------------------------------------------

# The record types that carry uuid/parentUuid links (the Agent SDK's
# _TRANSCRIPT_ENTRY_TYPES). Other record types are metadata.
CHAIN_TYPES = ("user", "assistant", "progress", "system", "attachment")
CHAIN_TYPES_SQL = "(" + ",".join(f"'{t}'" for t in CHAIN_TYPES) + ")"
# The types that are messages of the conversation.
MESSAGE_TYPES = ("user", "assistant")

# The record kinds this index models: (type, subtype, what it means to the
# index), the subtype being a system record's `subtype` or an attachment's
# `attachment.type` ('' for none). Every other kind is kept raw (and, if its
# type is a chain type, linked into the tree like any record of that type,
# its meaning unread). The record_types view marks each kind it counts
# against this list; record_kinds.py counts them.
MODELED_KINDS = (
    ("user", "", "a prompt or tool results: a message of the chain (toolUseResult, "
                 "isCompactSummary)"),
    ("assistant", "", "an API response, or a synthetic placeholder (model <synthetic>, "
                      "isApiErrorMessage): a message of the chain"),
    ("progress", "", "legacy hook/tool progress: a chain record the CLI does not load "
                     "(orphans cause progress; the resume walk bridges it)"),
    ("system", "", "a system record without a subtype: a chain record"),
    ("system", "api_error", "a failed API call; late-flushed ones splice the chain "
                            "(api_error_splices)"),
    ("system", "compact_boundary", "a compaction: a root hanging from its logicalParentUuid; "
                                   "what is before it is compacted"),
    ("system", "file_snapshot", "a snapshot record the CLI's last-row rule passes over"),
    ("summary", "", "a session title of older versions (session-index sessions)"),
    ("custom-title", "", "the user's session title (session-index sessions)"),
    ("ai-title", "", "Claude Code's session title (session-index sessions)"),
    ("last-prompt", "", "the resume checkpoint: leafUuid, explicit (the checkpoint and "
                        "rewound_to_empty rules)"),
)

# --- Compaction -------------------------------------------------------------

# A compaction's boundary: a system record with a null parentUuid whose
# logicalParentUuid names the last record before the compaction; the user
# record after it with isCompactSummary holds the summary.
COMPACT_BOUNDARY = "compact_boundary"
COMPACT_BOUNDARY_RECORD = "{r}.type = 'system' AND {r}.subtype = '" + COMPACT_BOUNDARY + "'"


def is_compact_boundary(type_, subtype) -> bool:
    return type_ == "system" and subtype == COMPACT_BOUNDARY


def is_compact_summary(entry: dict) -> bool:
    """A user record that holds a compaction's summary (isCompactSummary)."""
    return bool(entry.get("isCompactSummary"))


def effective_parent(type_, subtype, parent_uuid, logical_parent_uuid):
    """The parent the cause walk follows (EFFECTIVE_PARENT in SQL): a
    compact_boundary with a null parentUuid hangs from its
    logicalParentUuid. The leaf walks (the CLI's, the SDK's) follow
    parentUuid only."""
    if parent_uuid is None and is_compact_boundary(type_, subtype):
        return logical_parent_uuid
    return parent_uuid


EFFECTIVE_PARENT = (f"CASE WHEN {COMPACT_BOUNDARY_RECORD} AND {{r}}.parent_uuid IS NULL "
                    "THEN {r}.logical_parent_uuid ELSE {r}.parent_uuid END")

# What a compaction kept (manual /compact since about 2.1.170, and 2.1.332's
# compactions that keep recent turns): a boundary's compactMetadata names a
# preservedSegment {headUuid, anchorUuid, tailUuid} (a chain, head to tail)
# and, since about 2.1.300, preservedMessages {anchorUuid, uuids}. The
# loader puts that tail back after the summary (chain/resume.py, relink).
# PRESERVED: a boundary's two fields as JSON {"m": ..., "s": ...}, NULL on
# any other record or when neither is an object.
PRESERVED = (f"CASE WHEN {COMPACT_BOUNDARY_RECORD} AND json_valid({{r}}.raw) AND ("
             "json_type({r}.raw, '$.compactMetadata.preservedMessages') = 'object' OR "
             "json_type({r}.raw, '$.compactMetadata.preservedSegment') = 'object') "
             "THEN json_object("
             "'m', json({r}.raw -> '$.compactMetadata.preservedMessages'), "
             "'s', json({r}.raw -> '$.compactMetadata.preservedSegment')) END")


def preserved_of(preserved: str | None):
    """(anchor uuid, uuids listed | None, segment | None) of a PRESERVED
    value, or None: the preservedMessages list when it is an object (its
    uuids, strings only), else the preservedSegment's {headUuid, tailUuid}."""
    if not preserved:
        return None
    meta = json.loads(preserved)
    listed, segment = meta.get("m"), meta.get("s")
    if isinstance(listed, dict):
        uuids = listed.get("uuids")
        uuids = [u for u in uuids if isinstance(u, str)] if isinstance(uuids, list) else []
        return listed.get("anchorUuid"), uuids, None
    if isinstance(segment, dict):
        return segment.get("anchorUuid"), None, segment
    return None

# --- Fork briefings -----------------------------------------------------------

# A background fork's briefing (Claude Code 2.1.3xx): an attachment record
# of this attachment type. The loader reads it as a node but never as a row
# (never the last row or the newest): a resume does not start from it.
FORK_BRIEFING = "fork_briefing"
FORK_BRIEFING_RECORD = ("(CASE WHEN {r}.type = 'attachment' AND instr({r}.raw, '"
                        + FORK_BRIEFING + "') > 0 AND json_valid({r}.raw) "
                        "THEN coalesce(json_extract({r}.raw, '$.attachment.type') = '"
                        + FORK_BRIEFING + "', 0) ELSE 0 END)")


def is_fork_briefing(entry: dict) -> bool:
    attachment = entry.get("attachment")
    return (entry.get("type") == "attachment" and isinstance(attachment, dict)
            and attachment.get("type") == FORK_BRIEFING)


# --- What rides with a message ---------------------------------------------

# A record Claude Code 2.1.332's loader treats as riding with the message
# before it (its XN()): an attachment, a system record other than a compact
# boundary, or a user record with isMeta that holds no tool_result (a Skill
# body, a command's output). A single line of them hanging from a parallel
# tool call or its result is put back with the result (chain/walk.py,
# put_back_with_results). Over a record's columns; COMPANION_RECORD in SQL.
COMPANION_RECORD = ("({r}.type = 'attachment' OR ({r}.type = 'system' AND {r}.subtype IS NOT '"
                    + COMPACT_BOUNDARY + "') OR ({r}.type = 'user' AND {r}.is_meta "
                    "AND NOT {r}.is_tool_result))")


def is_companion(type_, subtype, is_meta, is_tool_result) -> bool:
    return (type_ == "attachment" or (type_ == "system" and subtype != COMPACT_BOUNDARY)
            or (type_ == "user" and bool(is_meta) and not is_tool_result))


# What the loader's l_r() reads of a row a rowsAheadOfPutBack names, from its
# line: 0, never put back so (an attachment of no type or of a kind the loader
# leaves out, AHEAD_LEFT_OUT; a user record with a taskDelivery); 2, a user
# record with queueTranscriptOnly: true (put back as a queued prompt when it
# holds no tool_result); else 1 (put back when it is a companion record).
AHEAD_LEFT_OUT = ("queued_command", "project_doc_reads", "message_pdf_reads")
AHEAD_ROW = (
    "CASE WHEN {r}.type NOT IN ('attachment', 'user') THEN 1 "
    "WHEN {r}.type = 'user' AND instr({r}.raw, '\"taskDelivery\"') = 0 "
    "AND instr({r}.raw, '\"queueTranscriptOnly\"') = 0 THEN 1 "   # (the JSON is not read)
    "WHEN NOT json_valid({r}.raw) THEN 0 "
    "WHEN {r}.type = 'attachment' THEN CASE "
    "WHEN json_type({r}.raw, '$.attachment.type') IS NULL THEN 0 "
    "WHEN json_type({r}.raw, '$.attachment.type') = 'text' AND "
    "json_extract({r}.raw, '$.attachment.type') IN ("
    + ", ".join(f"'{k}'" for k in AHEAD_LEFT_OUT) + ") THEN 0 ELSE 1 END "
    "WHEN json_type({r}.raw, '$.taskDelivery') IS NOT NULL THEN 0 "
    "WHEN json_type({r}.raw, '$.queueTranscriptOnly') = 'true' THEN 2 ELSE 1 END")


# The text an assistant record holding a tool_use block (HAS_TOOL_USE, below)
# must contain: a reader tests it with instr() first, to spare reading the
# JSON of every other assistant record (walk._HAS_TOOL_USE).
TOOL_USE_MARK = '"tool_use"'


# --- Tool calls -------------------------------------------------------------

# What Claude Code 2.1.332's loader reads of a record's tool calls when it
# asks whether the last row continues a parallel batch past the checkpoint
# (chain/resume.py, kin), read from the line itself (one definition: the
# Python side asks SQLite for it, for the few records that rule looks at).
# {r}'s content blocks: the objects of message.content when it is an array.
_BLOCKS = ("json_each(CASE WHEN json_type(CASE WHEN json_valid({r}.raw) THEN {r}.raw END, "
           "'$.message.content') = 'array' THEN {r}.raw -> '$.message.content' END)")
# TOOL_IDS: a JSON array: an assistant's tool_use block ids, a user's
# tool_result tool_use_ids, an attachment's attachment.toolUseID (strings
# only); '[]' for any other record.
TOOL_IDS = (
    "CASE WHEN {r}.type = 'attachment' THEN coalesce(CASE WHEN json_type(CASE WHEN "
    "json_valid({r}.raw) THEN {r}.raw END, '$.attachment.toolUseID') = 'text' "
    "THEN json_array({r}.raw ->> '$.attachment.toolUseID') END, '[]') "
    "WHEN {r}.type IN ('assistant', 'user') THEN (SELECT json_group_array(b.value ->> k.key) "
    "FROM (SELECT CASE {r}.type WHEN 'assistant' THEN '$.id' ELSE '$.tool_use_id' END AS key, "
    "CASE {r}.type WHEN 'assistant' THEN 'tool_use' ELSE 'tool_result' END AS kind) k, "
    + _BLOCKS + " b WHERE b.type = 'object' AND b.value ->> '$.type' = k.kind "
    "AND json_type(b.value, k.key) = 'text') ELSE '[]' END")
# CALL_BLOCKS: what the loader's a_r() reads of a user or assistant record
# (Krn(): is a call left open?): its tool_use and tool_result blocks, whatever
# the record's type, in content order, each [1 for tool_use / 0 for
# tool_result, the id as JSON text ('undefined' when there is none)];
# '[]' for any other record.
CALL_BLOCKS = (
    "CASE WHEN {r}.type IN ('assistant', 'user') THEN (SELECT json_group_array(json_array("
    "b.value ->> '$.type' = 'tool_use', coalesce(CASE b.value ->> '$.type' WHEN 'tool_use' "
    "THEN b.value -> '$.id' ELSE b.value -> '$.tool_use_id' END, 'undefined'))) FROM "
    + _BLOCKS + " b WHERE b.type = 'object' AND b.value ->> '$.type' IN ('tool_use', "
    "'tool_result')) ELSE '[]' END")
# HAS_TOOL_USE: an assistant record whose content holds a tool_use block
# (the loader's UMe; a block without a string id counts too).
HAS_TOOL_USE = ("({r}.type = 'assistant' AND EXISTS (SELECT 1 FROM " + _BLOCKS
                + " b WHERE b.type = 'object' AND b.value ->> '$.type' = 'tool_use'))")
# VIRTUAL_CALL: a user or assistant record with isVirtual: true holding a
# tool_use (assistant) or tool_result (user) block (the loader's z8).
VIRTUAL_CALL = ("coalesce({r}.type IN ('assistant', 'user') AND json_type(CASE WHEN "
                "json_valid({r}.raw) THEN {r}.raw END, '$.isVirtual') = 'true' AND EXISTS (SELECT 1 FROM "
                + _BLOCKS + " b WHERE b.type = 'object' AND b.value ->> '$.type' = "
                "CASE {r}.type WHEN 'assistant' THEN 'tool_use' ELSE 'tool_result' END), 0)")


# --- Meta -------------------------------------------------------------------


def is_meta(entry: dict) -> bool:
    """A record Claude Code marks isMeta (caveats, command output it adds):
    never a leaf the SDK prefers, never a visible message."""
    return bool(entry.get("isMeta"))


# --- API errors -------------------------------------------------------------

# A failed API call as Claude Code logs it: a system record of this subtype
# (late-flushed ones splice the chain: api_error_splices).
API_ERROR_SUBTYPE = "api_error"
API_ERROR_RECORD = "{r}.type = 'system' AND {r}.subtype = '" + API_ERROR_SUBTYPE + "'"


def is_api_error_record(type_, subtype) -> bool:
    return type_ == "system" and subtype == API_ERROR_SUBTYPE


# What was said aloud on a voice call beside the session, as Claude Code
# 2.1.332 stores it: a system record of this subtype whose ``content`` is a
# string and whose ``origin`` names kind "voice-call" (and no ``fold``). Its
# loader reads such a line as a user message, and a resume sends it to the
# model as a tool call of its own and its result, both with the id
# VOICE_CALL_RECORD_ID + the record's uuid (observed against the real binary:
# tests/test_oracle.py, voice_call_talk). A line with a ``fold`` (a queued
# command said on the call) is read as a queued_command attachment and sent
# as text; a line that fails the test (no origin, say) stays a system row,
# which a resume does not send.
VOICE_CALL_TALK_SUBTYPE = "voice_call_talk"
VOICE_CALL_RECORD_ID = "voicecallrecord_"


def is_voice_call_talk(entry: dict) -> bool:
    """A parsed line that a resume sends as a voice call's record."""
    origin = entry.get("origin")
    return (entry.get("type") == "system" and entry.get("subtype") == VOICE_CALL_TALK_SUBTYPE
            and isinstance(entry.get("content"), str) and isinstance(origin, dict)
            and origin.get("kind") == "voice-call" and "fold" not in entry
            and isinstance(entry.get("uuid"), str))


def is_api_error_message(entry: dict) -> bool:
    """An assistant record that stands for an API error (isApiErrorMessage):
    what the error said, in a synthetic placeholder."""
    return entry.get("type") == "assistant" and bool(entry.get("isApiErrorMessage"))


# --- Synthetic placeholders ---------------------------------------------------

# An assistant record Claude Code wrote itself, not an API response: the
# model is this constant (SYNTHETIC_MODEL in its source).
#
# What Claude Code counts (the bundled binary of claude-agent-sdk 0.2.189,
# Claude Code 2.1.332, read with `strings`): every placeholder is built by
# one constructor that sets message.model to "<synthetic>" and message.id to
# a random UUID, with a fixed text: "No response requested.", an interrupt
# text, or an API error's text ("API Error: ...", then isApiErrorMessage is
# true); the `claude -p` runner's error message likewise. Its readers test
# the model (`message.model === "<synthetic>"`), some together with
# isApiErrorMessage, which only it sets and only on these records (or on a
# remote session's relayed error). None of them reads the id's prefix to
# decide what is a placeholder. The one place the prefix matters is the id
# it sends as previous_message_id: the last assistant record that is not an
# API error and has a requestId, or else a msg_ id and a model other than
# "<synthetic>"; so a third-party provider's reply (a real model name, an id
# like chatcmpl-... or 32 hex digits) is a real message, and its session
# resumes. The rule here is therefore the model alone.
#
# When the id is sent at all (the real binaries, asked through a fake
# api.anthropic.com: indexer/repair/previous_message_id.py, and
# bench/previous_message_id.py for any version): in the request body as
# `diagnostics: {previous_message_id: ID or null}`, and only to Anthropic's
# own API: provider firstParty with the base URL unset or api.anthropic.com
# (or _CLAUDE_CODE_ASSUME_FIRST_PARTY_BASE_URL), API key, ANTHROPIC_AUTH_TOKEN
# and OAuth alike, and Claude Platform on Google Cloud at its default host;
# never on Bedrock, Vertex, Foundry, Claude Platform on AWS, another base URL,
# or with CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS. The API refuses (the 400 of
# seed 001) an ID that does not start with msg_. By version (the ranges are
# between the versions tested):
#   2.1.116 and older  never sent.
#   2.1.119 - 2.1.128  only under the tengu_prompt_cache_diagnostics feature
#                      flag (off unless served): the last assistant record
#                      with a requestId, API errors included. They write no
#                      requestId on their own API-error records; 2.1.132 and
#                      newer do, and such a record resumed here is sent.
#   2.1.132 - 2.1.239  the flag still; API errors skipped.
#   2.1.247 - 2.1.259  always (no flag); a requestId and not an API error.
#   2.1.273 - 2.1.332  always; the rule above (msg_ ids without a requestId
#                      count too).
# So no version names a placeholder without a requestId, and 2.1.132 and
# newer name no API error: a <synthetic> API-error tail does not poison a
# resume by today's CLI.
SYNTHETIC_MODEL = "<synthetic>"
# The same rule in SQL over a records alias {r}. The partial index
# records_synthetic (migrations.m028_records_synthetic_by_model) is created
# with this WHERE clause word for word (with no alias), so that SQLite uses
# it: change both together, in a new migration.
SYNTHETIC_RECORD = "{r}.type = 'assistant' AND {r}.model = '" + SYNTHETIC_MODEL + "'"


# The record Claude Code 2.1.332 names as previous_message_id (its $Vt,
# read back from the end of the loaded conversation): an assistant record
# that is not an API error and has a requestId, or else a msg_ id and a
# model other than "<synthetic>". SQL over a records alias {r}.
PREVIOUS_MESSAGE_ID_RECORD = (
    "{r}.type = 'assistant' AND NOT coalesce({r}.is_api_error, 0) AND ("
    "coalesce({r}.request_id, '') <> '' OR ({r}.message_id LIKE 'msg\\_%' ESCAPE '\\' AND "
    "{r}.model IS NOT '" + SYNTHETIC_MODEL + "'))")
# An id the API refuses as previous_message_id (the 400 of seed 001): one
# that does not start with msg_ (a null id is sent as null and accepted).
REFUSED_MESSAGE_ID = "({r}.message_id IS NOT NULL AND {r}.message_id NOT LIKE 'msg\\_%' ESCAPE '\\')"
# The records such a refused id can come from: a requestId and an id that is
# not msg_. The partial index records_foreign_replies
# (migrations.m030_records_foreign_replies) is created with this WHERE
# clause word for word (with no alias): change both together.
FOREIGN_REPLY_RECORD = ("{r}.type = 'assistant' AND {r}.request_id <> '' "
                        "AND {r}.message_id NOT LIKE 'msg\\_%' ESCAPE '\\'")
# A reply of Anthropic's own API in a file {file}: a msg_ id on a real model.
FIRST_PARTY_REPLY_IN = (
    "EXISTS (SELECT 1 FROM records fp WHERE fp.file_id = {file} AND fp.type = 'assistant' "
    "AND fp.message_id LIKE 'msg\\_%' ESCAPE '\\' AND fp.model IS NOT '" + SYNTHETIC_MODEL + "')")


def is_synthetic(type_, model) -> bool:
    """An assistant record whose message.model is "<synthetic>" (from its
    columns: records.type, records.model)."""
    return type_ == "assistant" and model == SYNTHETIC_MODEL


def is_synthetic_entry(entry: dict) -> bool:
    """is_synthetic over a parsed transcript entry."""
    message = entry.get("message")
    return is_synthetic(entry.get("type"),
                        message.get("model") if isinstance(message, dict) else None)


# What kind of placeholder a synthetic record is, told apart as Claude Code
# tells them (by isApiErrorMessage and the fixed text), and what a resume by
# 2.1.332 does with it (checked with the oracle: tests/test_oracle_cases.py):
# (kind, label, what a resume does).
SYNTHETIC_KINDS = (
    ("api_error", "API error", "not sent on resume"),
    ("no_response_requested", "No response requested.",
     "Claude Code's placeholder for a turn that got no answer (after an interrupt or an "
     "auto-resume prompt); sent on resume as written"),
    ("no_content", "(no content)", "an empty reply; not sent on resume"),
    ("placeholder", "synthetic placeholder", "sent on resume as written"),
)
NO_RESPONSE_REQUESTED = "No response requested."
NO_CONTENT = "(no content)"


def synthetic_text(message) -> str:
    """The text of a placeholder's message (its text blocks joined)."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or []
                   if isinstance(b, dict) and b.get("type") == "text"
                   and isinstance(b.get("text"), str))


def synthetic_kind(entry: dict) -> str | None:
    """The SYNTHETIC_KINDS name of a synthetic record, None for any other."""
    if not is_synthetic_entry(entry):
        return None
    if entry.get("isApiErrorMessage"):
        return "api_error"
    text = synthetic_text(entry.get("message")).strip()
    if text == NO_RESPONSE_REQUESTED:
        return "no_response_requested"
    if text in ("", NO_CONTENT):
        return "no_content"
    return "placeholder"


def synthetic_label(kind: str | None) -> str | None:
    """'LABEL: what a resume does with it' for a SYNTHETIC_KINDS name."""
    for name, label, resume in SYNTHETIC_KINDS:
        if name == kind:
            return f"{label}: {resume}"
    return None
