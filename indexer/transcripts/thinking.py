"""Thinking blocks the Messages API rejects, told apart from the harmless
shapes (issue 27; anthropics/claude-code #63147, #68768, #21726). One rule,
stated here in Python (over parsed entries) and in SQL (over ``records``),
side by side; tests/test_wedged.py holds the two to the same answers.

What the API does with a ``thinking`` block sent back to it: in the latest
assistant message of a request it must be exactly what the API returned
("`thinking` or `redacted_thinking` blocks in the latest assistant message
cannot be modified", 400); a block with no signature is refused
("thinking.signature: Field required"), one whose signature is not whole
too ("Invalid `signature` in `thinking` block"). A fault is judged only on a
reply of Anthropic's models (``message.id`` starting ``msg_``, a model named
``claude...``: the API, Bedrock, Vertex): a third-party provider (GLM,
DeepSeek, ... through ANTHROPIC_BASE_URL: other ids, other models) writes
thinking with text and no signature, and resumes fine there.

The faults, per block:

- ``unsigned``: the signature is missing, null or empty (#68768: an empty
  unsigned block ``{"thinking": "", "signature": ""}`` as the first block;
  #21726: 534 of 537 signatures empty); a ``redacted_thinking`` block with
  no ``data``.
- ``truncated``: a signature that cannot be whole: shorter than
  MIN_SIGNATURE_CHARS, or holding a character outside base64's (a cut
  marked with U+2026, openclaw #108443). Decoded, every signature of the
  corpus (Claude Sonnet 4 to Opus 4.7, text shown or omitted) is a protobuf
  holding a 64-byte signature, two 12-byte nonces and a 48-byte key before
  the encrypted thinking: 136 bytes, at least 184 base64 characters, before
  its framing; #21726's cut ones had 24.
- ``blanked``: empty text with a signature kept (#63147 and its dozen
  duplicates, 2.1.150-2.1.156), where the API was showing this
  conversation's thinking. An empty text with a signature is also exactly
  what the API returns when the request asks ``thinking.display:
  "omitted"`` (Claude Code 2.1.332 asks it for every request; 2.1.72 and
  later wrote such blocks for most models: thousands of them resume fine),
  and the display is a property of the request, not of the block: the
  block alone cannot say which it is. What the transcript can say is
  whether the API showed thinking to the same model under the same Claude
  Code version in this file: a thinking block of that model and version
  with text and a signature. Then an empty one of the same pair was
  blanked after the API returned it. Without such evidence an empty signed
  block is taken for an omitted display (never a false ``blanked``; a file
  blanked throughout goes unseen, as an omitted display would).
"""

from __future__ import annotations

import json

# The fixed fields of a decoded signature (see above): 136 bytes, 184 base64
# characters at least. A shorter signature was cut.
MIN_SIGNATURE_CHARS = 184
BASE64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")

# (fault, what the API answers, what it means)
FAULTS = (
    ("unsigned", "thinking.signature: Field required / Invalid `signature` in `thinking` block",
     "a thinking block with no signature (or a redacted_thinking block with no data)"),
    ("truncated", "Invalid `signature` in `thinking` block",
     "a signature cut short (shorter than a whole one can be, or not base64)"),
    ("blanked", "`thinking` or `redacted_thinking` blocks in the latest assistant message "
                "cannot be modified",
     "thinking text blanked with its signature kept, where the API showed this model's "
     "thinking under this Claude Code version"),
)
THINKING_TYPES = ("thinking", "redacted_thinking")


def first_party(message_id, model) -> bool:
    """A reply of Anthropic's models, whose signatures the API checks."""
    return (isinstance(message_id, str) and message_id.startswith("msg_")
            and isinstance(model, str) and "claude" in model)


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def shown(block) -> bool:
    """A thinking block the API showed: text and a signature."""
    return (isinstance(block, dict) and block.get("type") == "thinking"
            and _text(block.get("thinking")) != "" and _text(block.get("signature")) != "")


def block_fault(block, displayed: bool) -> str | None:
    """The fault of one content block of a first-party reply (None: none, or
    not a thinking block); ``displayed``: the API showed thinking to this
    reply's model and version in its file (a ``shown`` block of the pair)."""
    if not isinstance(block, dict) or block.get("type") not in THINKING_TYPES:
        return None
    if block.get("type") == "redacted_thinking":
        return "unsigned" if _text(block.get("data")) == "" else None
    signature = _text(block.get("signature"))
    if signature == "":
        return "unsigned"
    if len(signature) < MIN_SIGNATURE_CHARS or not set(signature) <= BASE64_CHARS:
        return "truncated"
    if _text(block.get("thinking")) == "" and displayed:
        return "blanked"
    return None


def _content(entry: dict) -> list:
    message = entry.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def _pair(entry: dict):
    message = entry.get("message") if isinstance(entry.get("message"), dict) else {}
    return message.get("model"), entry.get("version")


def faults(entries) -> list[tuple[int, int, str]]:
    """(entry index, block index, fault) of every faulty thinking block in
    the entries of one file (parsed lines, in file order)."""
    assistants = [(i, e) for i, e in enumerate(entries)
                  if isinstance(e, dict) and e.get("type") == "assistant"]
    displayed = {_pair(e) for _, e in assistants if any(shown(b) for b in _content(e))}
    out = []
    for i, e in assistants:
        message = e.get("message") if isinstance(e.get("message"), dict) else {}
        if not first_party(message.get("id"), message.get("model")):
            continue
        for j, block in enumerate(_content(e)):
            fault = block_fault(block, _pair(e) in displayed)
            if fault:
                out.append((i, j, fault))
    return out


# --- The same rule in SQL ------------------------------------------------------

# FIRST_PARTY: over a records alias {r}.
FIRST_PARTY = "(substr({r}.message_id, 1, 4) = 'msg_' AND instr({r}.model, 'claude') > 0)"
# The content blocks of an assistant record {r}: json_each rows (key: the
# block's index, value: the block), for a record whose line mentions
# thinking (the instr() spares reading every other line's JSON).
BLOCKS = ("json_each(CASE WHEN {r}.type = 'assistant' AND instr({r}.raw, 'thinking') > 0 "
          "AND json_valid({r}.raw) AND json_type({r}.raw, '$.message.content') = 'array' "
          "THEN {r}.raw -> '$.message.content' END)")
# A text field {f} of a block {b} ('' when missing or not a string).
_TEXT = "coalesce(CASE WHEN json_type({b}, '$.{f}') = 'text' THEN {b} ->> '$.{f}' END, '')"
# SHOWN over a block {b} (json_each's value).
SHOWN = ("({b} ->> '$.type' = 'thinking' AND " + _TEXT.replace("{f}", "thinking") + " <> '' AND "
         + _TEXT.replace("{f}", "signature") + " <> '')")
# BLOCK_FAULT over a block {b} and {displayed} (a 0/1 expression): NULL or
# the fault, as block_fault.
BLOCK_FAULT = (
    "CASE WHEN {b} ->> '$.type' = 'redacted_thinking' THEN CASE WHEN "
    + _TEXT.replace("{f}", "data") + " = '' THEN 'unsigned' END "
    "WHEN {b} ->> '$.type' IS NOT 'thinking' THEN NULL "
    "WHEN " + _TEXT.replace("{f}", "signature") + " = '' THEN 'unsigned' "
    "WHEN length(" + _TEXT.replace("{f}", "signature") + f") < {MIN_SIGNATURE_CHARS} OR "
    + _TEXT.replace("{f}", "signature") + " GLOB '*[^A-Za-z0-9+/=]*' THEN 'truncated' "
    "WHEN " + _TEXT.replace("{f}", "thinking") + " = '' AND {displayed} THEN 'blanked' END")

# THINKING_FAULTS: one row per faulty thinking block in the records {files}
# picks (a condition on a records alias {a}, filled as r and as d): file_id,
# record_id, line_no, uuid, message_id, model, version, block (its index in
# message.content), fault. displayed: the (model, version) pairs of each
# file that the API showed thinking to ({how}: MATERIALIZED to read them once
# for many records, NOT MATERIALIZED to look only as far as one is found).
THINKING_FAULTS_TEMPLATE = """
WITH displayed AS {how} (
  SELECT d.file_id, d.model, d.version FROM records d, """ + BLOCKS.format(r="d") + """ x
  WHERE {files_d} AND x.type = 'object' AND """ + SHOWN.format(b="x.value") + """
)
SELECT * FROM (
  SELECT r.file_id, r.id AS record_id, r.line_no, r.uuid, r.message_id, r.model, r.version,
    CAST(b.key AS INTEGER) AS block,
    """ + BLOCK_FAULT.replace("{b}", "(CASE WHEN b.type = 'object' THEN b.value END)").replace(
        "{displayed}", """EXISTS (
      SELECT 1 FROM displayed p WHERE p.file_id = r.file_id AND p.model IS r.model
        AND p.version IS r.version)""") + """ AS fault
  FROM records r, """ + BLOCKS.format(r="r") + """ b
  WHERE {files_r} AND """ + FIRST_PARTY.format(r="r") + """
) WHERE fault IS NOT NULL
""".strip()


def thinking_faults_sql(files: str, displayed: str | None = None, once: bool = True) -> str:
    """THINKING_FAULTS_TEMPLATE over the records ``files`` picks (a condition
    on a records alias written {a}), looking for shown thinking among those
    ``displayed`` picks (default: the same); ``once``: read those once."""
    return THINKING_FAULTS_TEMPLATE.format(
        files_r=files.format(a="r"), files_d=(displayed or files).format(a="d"),
        how="MATERIALIZED" if once else "NOT MATERIALIZED")



# --- The same rule kept at ingest (thinking_cache) -------------------------------

# Judging every main transcript's thinking at query time reads the JSON of
# every assistant record that mentions thinking (seconds to tens of seconds
# at a million records), so ingest keeps what each record's blocks are in
# thinking_cache (derive.scan_thinking: the records a derive adds, a
# file's all when it is recomputed), one row per
#   shown block's record: kind 'shown' (block NULL), any assistant record
#     with a block the API showed (SHOWN): the displayed pairs' evidence
#   faulty block of a first-party record: kind unsigned or truncated, or
#     'blanked' for a block that is blanked when its file has shown thinking
#     of the same model and version (BLOCK_FAULT with {displayed} true),
# with the record's model and version. What depends on the rest of the
# file (is it displayed?) is answered when it is read (CACHED_FAULTS_TEMPLATE),
# so adding records never changes an older row.
# THINKING_CACHE_ROWS_TEMPLATE: the rows of the records {files} picks (a
# condition on records r): file_id, record_id, block, kind, model, version.
THINKING_CACHE_ROWS_TEMPLATE = """
SELECT r.file_id, r.id AS record_id, NULL AS block, 'shown' AS kind, r.model, r.version
FROM records r
WHERE {files} AND r.type = 'assistant' AND instr(r.raw, 'thinking') > 0 AND EXISTS (
  SELECT 1 FROM """ + BLOCKS.format(r="r") + """ x
  WHERE x.type = 'object' AND """ + SHOWN.format(b="x.value") + """)
UNION ALL
SELECT * FROM (
  SELECT r.file_id, r.id AS record_id, CAST(b.key AS INTEGER) AS block,
    """ + BLOCK_FAULT.replace("{b}", "(CASE WHEN b.type = 'object' THEN b.value END)").replace(
        "{displayed}", "1") + """ AS kind, r.model, r.version
  FROM records r, """ + BLOCKS.format(r="r") + """ b
  WHERE {files} AND r.type = 'assistant' AND instr(r.raw, 'thinking') > 0
    AND """ + FIRST_PARTY.format(r="r") + """
) WHERE kind IS NOT NULL
""".strip()

# THINKING_CACHE_ROWS_TEMPLATE's condition on the records it reads, and the
# columns cache_rows takes from them (derive.scan_thinking: SQLite's JSON
# functions parse a record's line once per call, several times a record:
# 30 s for the 52,381 such records of a 1M-record index, against a few
# seconds read with this and classified in Python).
CACHE_CANDIDATES_TEMPLATE = """
SELECT r.file_id, r.id, r.message_id, r.model, r.version, r.raw FROM records r
WHERE {files} AND r.type = 'assistant' AND instr(r.raw, 'thinking') > 0
""".strip()


def _first_key(pairs):
    """A JSON object as SQLite's JSON functions read it: a key's first value."""
    out = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out


def _no_constant(name):
    raise ValueError(name)   # NaN, Infinity: not JSON to SQLite


def cache_rows(candidates) -> list[tuple]:
    """THINKING_CACHE_ROWS_TEMPLATE's rows, in Python, from the rows of
    CACHE_CANDIDATES_TEMPLATE (file_id, id, message_id, model, version, raw):
    the same rule (shown, block_fault with displayed true, first_party over
    the record's columns); tests/test_wedged.py holds the two equal. A
    change here that the SQL does not share: bump views.DERIVE_VERSION."""
    out = []
    for file_id, record_id, message_id, model, version, raw in candidates:
        try:
            entry = json.loads(raw, object_pairs_hook=_first_key, parse_constant=_no_constant)
        except (ValueError, TypeError, RecursionError):
            continue
        message = entry.get("message") if isinstance(entry, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        if any(shown(b) for b in content):
            out.append((file_id, record_id, None, "shown", model, version))
        if first_party(message_id, model):
            for i, b in enumerate(content):
                kind = block_fault(b, True)
                if kind:
                    out.append((file_id, record_id, i, kind, model, version))
    return out


# THINKING_FAULTS_TEMPLATE's rows, read from thinking_cache: the faulty blocks
# of the cached files {files} picks (a condition on thinking_cache c), a
# 'blanked' one only where its file shows thinking of its model and version.
CACHED_FAULTS_TEMPLATE = """
SELECT * FROM (
  SELECT c.file_id, c.record_id, r.line_no, r.uuid, r.message_id, r.model, r.version, c.block,
    CASE WHEN c.kind <> 'blanked' OR EXISTS (
      SELECT 1 FROM thinking_cache p WHERE p.file_id = c.file_id AND p.kind = 'shown'
        AND p.model IS c.model AND p.version IS c.version) THEN c.kind END AS fault
  FROM thinking_cache c JOIN records r ON r.id = c.record_id
  WHERE c.kind <> 'shown' AND {files}
) WHERE fault IS NOT NULL
""".strip()

# --- Which Claude Code stays stuck ----------------------------------------------

# What a Claude Code version does when the API refuses the latest assistant
# message's thinking (the 400s above), asked with the oracle: the real
# binaries resuming transcripts whose latest message holds a blanked,
# unsigned or cut block, against a fake API that refuses it as the real one
# does (tests/test_wedged_oracle.py; bench/wedged_versions.py for any
# binaries). Before the version below for its answer, a resume sends the
# block, gets the 400 and exits, and every resume does the same, for good
# (tested: 2.1.1, 2.1.44, 2.1.59, 2.1.71, 2.1.97, 2.1.112, 2.1.150, 2.1.161,
# 2.1.165, 2.1.167, 2.1.169, 2.1.170; the reports, #63147 and its duplicates,
# are of 2.1.150 - 2.1.156, which no SDK wheel bundles). From it on, the CLI
# answers the 400 by sending the request again with every thinking block
# stripped: the resume works and the conversation's thinking is lost
# (tested: up to 2.1.332). The change lies between the last version of one
# range and the first of the next:
#   "cannot be modified" (blanked)             2.1.150 stuck, 2.1.161 recovers
#   "Invalid `signature`" (truncated; an empty
#    signature on Anthropic's API)             2.1.167 stuck, 2.1.169 recovers
#   "thinking.signature: Field required" (no
#    signature; an empty one on Bedrock)       2.1.170 stuck, 2.1.183 recovers
RECOVERS_FROM = {"blanked": "2.1.161", "truncated": "2.1.169", "unsigned": "2.1.183"}


def version_key(version) -> int | None:
    """A Claude Code version ('2.1.154') as one comparable integer
    (major * 10**6 + minor * 10**3 + patch); None when it is not one."""
    if not isinstance(version, str):
        return None
    parts = version.split(".")
    if len(parts) < 3:
        return None
    digits = []
    for part in parts[:3]:
        lead = ""
        for c in part:
            if not c.isdigit():
                break
            lead += c
        if not lead:
            return None
        digits.append(int(lead))
    return digits[0] * 10**6 + digits[1] * 10**3 + digits[2]


class NotAVersion(ValueError):
    """A Claude Code version asked for (check --claude-version) that is not
    one: version_key cannot read it, and the verdict would take it for
    today's Claude Code."""


def claude_version(text: str) -> str:
    """``text`` as a Claude Code version to answer for, the one definition
    every surface that takes one checks it with (check --claude-version,
    check.check); NotAVersion when version_key cannot read it ('', 'bogus',
    '2.1')."""
    if version_key(text) is None:
        raise NotAVersion(f"{text!r} is not a Claude Code version (MAJOR.MINOR.PATCH, "
                          "e.g. 2.1.154)")
    return text


def stays_stuck(version, fault: str) -> bool:
    """Does this Claude Code version resend a refused thinking block of this
    fault on every resume? A version that is not one (None: none recorded)
    is taken for today's, which recovers."""
    key = version_key(version)
    return key is not None and fault in RECOVERS_FROM and key < version_key(RECOVERS_FROM[fault])


# VERSION_KEY over a text expression {v}: version_key in SQL (NULL when {v}
# is not MAJOR.MINOR.PATCH with digits leading each part).
_REST = "substr({v}, instr({v}, '.') + 1)"
_PATCH = "substr(" + _REST + ", instr(" + _REST + ", '.') + 1)"
VERSION_KEY = (
    "CASE WHEN typeof({v}) = 'text' AND instr({v}, '.') > 1 AND instr(" + _REST + ", '.') > 1 "
    "AND substr(" + _PATCH + ", 1, 1) GLOB '[0-9]' AND substr({v}, 1, 1) GLOB '[0-9]' "
    "AND substr(" + _REST + ", 1, 1) GLOB '[0-9]' "
    "THEN CAST(substr({v}, 1, instr({v}, '.') - 1) AS INTEGER) * 1000000 "
    "+ CAST(substr(" + _REST + ", 1, instr(" + _REST + ", '.') - 1) AS INTEGER) * 1000 "
    "+ CAST(" + _PATCH + " AS INTEGER) END")
# RECOVERS_FROM_KEY over a fault {fault}: the version_key of RECOVERS_FROM.
RECOVERS_FROM_KEY = ("CASE {fault} " + " ".join(
    f"WHEN '{fault}' THEN {version_key(version)}" for fault, version in RECOVERS_FROM.items())
    + " END")
# STAYS_STUCK over a version {v} and a fault {fault}: stays_stuck in SQL, 0 or 1.
STAYS_STUCK = "coalesce((" + VERSION_KEY + ") < (" + RECOVERS_FROM_KEY + "), 0)"
# RECOVERS_FROM_VERSION over a fault {fault}: RECOVERS_FROM's version, text.
RECOVERS_FROM_VERSION = ("CASE {fault} " + " ".join(
    f"WHEN '{fault}' THEN '{version}'" for fault, version in RECOVERS_FROM.items()) + " END")
