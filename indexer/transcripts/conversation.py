"""The conversation a reader loads from a transcript: a port of the Claude
Agent SDK's reader (claude_agent_sdk/_internal/sessions.py, MIT licence,
Copyright Anthropic), so that ``session-index show`` and ``repair`` work
without the SDK installed. tests/test_show.py holds it equal to the SDK's
own ``get_session_messages`` on the corpus and random trees.

``build_conversation_chain(entries)``: walk parentUuid from the SDK's leaf and
put back the parallel tool calls and results the walk skipped.
``visible_messages(chain)``: the user/assistant messages the SDK returns.
"""

from __future__ import annotations

import json
from typing import Any

from indexer.transcripts import records
from indexer.transcripts.records import CHAIN_TYPES

Entry = dict[str, Any]
TRANSCRIPT_ENTRY_TYPES = frozenset(CHAIN_TYPES)  # the SDK's set is the chain types


def parse_entries(lines) -> list[Entry]:
    """Transcript entries from raw line texts, as the SDK parses a file:
    JSON objects of the chain types with a string uuid; the rest skipped.
    Where the SDK's reader raises (a ``type`` that is a list or an object:
    TypeError; a ``parentUuid`` that is one, in the walk), an entry of such
    a type is skipped and such a parent is no parent, so ``show`` and
    ``repair`` still read the file."""
    entries: list[Entry] = []
    for text in lines:
        line = text.strip()
        if not line:
            continue
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if (isinstance(entry, dict) and isinstance(entry.get("type"), str)
                and entry["type"] in TRANSCRIPT_ENTRY_TYPES
                and isinstance(entry.get("uuid"), str)):
            if not isinstance(entry.get("parentUuid"), (str, type(None))):
                entry["parentUuid"] = None
            entries.append(entry)
    return entries


def visible_messages(chain: list[Entry]) -> list[Entry]:
    return [e for e in chain if _is_visible_message(e)]


def build_conversation_chain(
    entries: list[Entry],
) -> list[Entry]:
    """Builds the conversation chain by finding the leaf and walking parentUuid.

    Returns messages in chronological order (root -> leaf). Tool calls and
    tool results that the walk skipped because the turn ran its tools in
    parallel are put back by ``_recover_orphaned_parallel_tool_results``.

    Note: logicalParentUuid (set on compact_boundary entries) is intentionally
    NOT followed. This matches VS Code IDE behavior — post-compaction, the
    isCompactSummary message replaces earlier messages, so following logical
    parents would duplicate content.
    """
    if not entries:
        return []

    # Index by uuid for O(1) parent lookup
    by_uuid: dict[str, Entry] = {}
    for entry in entries:
        by_uuid[entry["uuid"]] = entry

    # Build index of entry positions (file order) for tie-breaking
    entry_index: dict[str, int] = {}
    for i, entry in enumerate(entries):
        entry_index[entry["uuid"]] = i

    # Find terminal messages (no children point to them via parentUuid)
    parent_uuids: set[str] = set()
    for entry in entries:
        parent = entry.get("parentUuid")
        if parent:
            parent_uuids.add(parent)

    terminals = [e for e in entries if e["uuid"] not in parent_uuids]

    # From each terminal, walk back to find the nearest user/assistant leaf
    leaves: list[Entry] = []
    for terminal in terminals:
        walk_cur: Entry | None = terminal
        walk_seen: set[str] = set()
        while walk_cur is not None:
            uid = walk_cur["uuid"]
            if uid in walk_seen:
                break
            walk_seen.add(uid)
            if walk_cur.get("type") in ("user", "assistant"):
                leaves.append(walk_cur)
                break
            parent = walk_cur.get("parentUuid")
            walk_cur = by_uuid.get(parent) if parent else None

    if not leaves:
        return []

    # Pick the leaf from the main chain (not sidechain/team/meta), preferring
    # the highest position in the entries array (most recent in file)
    main_leaves = [
        leaf
        for leaf in leaves
        if not leaf.get("isSidechain")
        and not leaf.get("teamName")
        and not records.is_meta(leaf)
    ]

    def _pick_best(candidates: list[Entry]) -> Entry:
        best = candidates[0]
        best_idx = entry_index.get(best["uuid"], -1)
        for cur in candidates[1:]:
            cur_idx = entry_index.get(cur["uuid"], -1)
            if cur_idx > best_idx:
                best = cur
                best_idx = cur_idx
        return best

    leaf = _pick_best(main_leaves) if main_leaves else _pick_best(leaves)

    # Walk from leaf to root via parentUuid
    chain: list[Entry] = []
    chain_seen: set[str] = set()
    chain_cur: Entry | None = leaf
    while chain_cur is not None:
        uid = chain_cur["uuid"]
        if uid in chain_seen:
            break
        chain_seen.add(uid)
        chain.append(chain_cur)
        parent = chain_cur.get("parentUuid")
        chain_cur = by_uuid.get(parent) if parent else None

    chain.reverse()
    return _recover_orphaned_parallel_tool_results(by_uuid, chain, chain_seen)


def _assistant_message_id(entry: Entry) -> str | None:
    """Returns the API ``message.id`` of an assistant entry, if it has one."""
    if entry.get("type") != "assistant":
        return None
    message = entry.get("message")
    if not isinstance(message, dict):
        return None
    message_id = message.get("id")
    return message_id if isinstance(message_id, str) and message_id else None


def _content_block_ids(
    entry: Entry, block_type: str, id_field: str
) -> list[str]:
    """Returns ``id_field`` of each ``block_type`` content block in an entry."""
    message = entry.get("message")
    if not isinstance(message, dict):
        return []
    content = message.get("content")
    if not isinstance(content, list):
        return []
    ids: list[str] = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == block_type:
            block_id = block.get(id_field)
            if isinstance(block_id, str):
                ids.append(block_id)
    return ids


def _is_tool_result_entry(entry: Entry) -> bool:
    """Returns True for a user entry with a parent that carries a tool_result."""
    if entry.get("type") != "user":
        return False
    parent = entry.get("parentUuid")
    if not isinstance(parent, str) or not parent:
        return False
    message = entry.get("message")
    if not isinstance(message, dict):
        return False
    content = message.get("content")
    if not isinstance(content, list):
        return False
    return any(
        isinstance(block, dict) and block.get("type") == "tool_result"
        for block in content
    )


def _same_writer(a: Entry, b: Entry) -> bool:
    """Returns True if two entries were written by the same (sub)agent."""
    return bool(a.get("isSidechain")) == bool(b.get("isSidechain")) and a.get(
        "agentId"
    ) == b.get("agentId")


def _timestamp_sort_key(entry: Entry) -> str:
    timestamp = entry.get("timestamp")
    return timestamp if isinstance(timestamp, str) else ""


def _recover_orphaned_parallel_tool_results(
    by_uuid: dict[str, Entry],
    chain: list[Entry],
    seen: set[str],
) -> list[Entry]:
    """Puts back the tool calls and results a parallel turn left off the chain.

    The CLI writes one assistant entry per content block, so a response with
    N parallel tool calls is N assistant entries that share ``message.id``
    and are chained one after another. Each tool_result entry's
    ``parentUuid`` is its own call's assistant entry, so the results fan out
    from different parents and the transcript forks. The ``parentUuid`` walk
    follows only the branch the next turn continued from: it keeps one
    result, and drops every call written after the one that result answers.

    For each response on the chain, this collects its assistant entries and
    their tool results that the walk did not reach, and inserts them right
    after the response's last entry on the chain, so the response stays in
    one piece and every result follows its call. Mirrors the TypeScript
    SDK's ``getSessionMessages``.

    ``seen`` is the set of uuids on ``chain``; recovered uuids are added to it.
    """
    chain_assistants = [e for e in chain if e.get("type") == "assistant"]
    if not chain_assistants:
        return chain

    # Anchor = the last on-chain entry of each response. chain_assistants is
    # in chain order, so later entries overwrite earlier ones.
    anchor_by_message_id: dict[str, Entry] = {}
    for entry in chain_assistants:
        message_id = _assistant_message_id(entry)
        if message_id:
            anchor_by_message_id[message_id] = entry
    if not anchor_by_message_id:
        return chain

    # Group every assistant entry by response, and record which entry made
    # each tool call. A tool_use id claimed by two different responses is
    # ambiguous (None) and is never used to place a result.
    siblings_by_message_id: dict[str, list[Entry]] = {}
    call_owner: dict[str, Entry | None] = {}
    tool_result_entries: list[Entry] = []
    for entry in by_uuid.values():
        message_id = _assistant_message_id(entry)
        if message_id:
            siblings_by_message_id.setdefault(message_id, []).append(entry)
            for call_id in _content_block_ids(entry, "tool_use", "id"):
                if call_id not in call_owner:
                    call_owner[call_id] = entry
                    continue
                owner = call_owner[call_id]
                same_response = (
                    owner is not None and _assistant_message_id(owner) == message_id
                )
                call_owner[call_id] = entry if same_response else None
        elif _is_tool_result_entry(entry):
            tool_result_entries.append(entry)

    # Index each tool result under the assistant entries it may belong to:
    # its parent, its sourceToolAssistantUUID, and the owner of each call it
    # answers. The last two only count when written by the same agent.
    results_by_assistant: dict[str, list[Entry]] = {}
    for result in tool_result_entries:
        results_by_assistant.setdefault(result["parentUuid"], []).append(result)
        source = result.get("sourceToolAssistantUUID")
        if isinstance(source, str):
            source_entry = by_uuid.get(source)
            if source_entry is not None and _same_writer(result, source_entry):
                results_by_assistant.setdefault(source, []).append(result)
        for call_id in _content_block_ids(result, "tool_result", "tool_use_id"):
            owner = call_owner.get(call_id)
            if owner is not None and _same_writer(result, owner):
                results_by_assistant.setdefault(owner["uuid"], []).append(result)

    # Only needed to place strays, which are rare: built on first use.
    answered_on_chain: set[str] | None = None
    file_position: dict[str, int] | None = None

    processed: set[str] = set()
    inserts: dict[str, list[Entry]] = {}
    for assistant in chain_assistants:
        message_id = _assistant_message_id(assistant)
        if not message_id or message_id in processed:
            continue
        processed.add(message_id)

        group = siblings_by_message_id.get(message_id, [assistant])
        member_uuids = {member["uuid"] for member in group}
        orphaned_siblings = [m for m in group if m["uuid"] not in seen]
        orphaned_results: list[Entry] = []
        # Results indexed under this response whose parent is not one of its
        # entries: recovered only if they answer a still-unanswered call.
        strays: list[Entry] = []
        collected: set[str] = set()
        for member in group:
            for result in results_by_assistant.get(member["uuid"], ()):
                if result["uuid"] in seen or result["uuid"] in collected:
                    continue
                collected.add(result["uuid"])
                if result["parentUuid"] in member_uuids:
                    orphaned_results.append(result)
                else:
                    strays.append(result)

        if strays:
            if answered_on_chain is None or file_position is None:
                answered_on_chain = {
                    call_id
                    for entry in chain
                    for call_id in _content_block_ids(
                        entry, "tool_result", "tool_use_id"
                    )
                }
                file_position = {uid: i for i, uid in enumerate(by_uuid)}
            answered = set(answered_on_chain)
            for result in orphaned_results:
                answered.update(
                    _content_block_ids(result, "tool_result", "tool_use_id")
                )
            positions = file_position
            strays.sort(key=lambda e: positions[e["uuid"]])
            for result in strays:
                call_ids = _content_block_ids(result, "tool_result", "tool_use_id")
                answers_open_call = False
                for call_id in call_ids:
                    owner = call_owner.get(call_id)
                    if (
                        call_id not in answered
                        and owner is not None
                        and owner["uuid"] in member_uuids
                    ):
                        answers_open_call = True
                        break
                if not answers_open_call:
                    continue
                answered.update(call_ids)
                orphaned_results.append(result)

        if not orphaned_siblings and not orphaned_results:
            continue

        # Timestamp order keeps content-block and completion order. The sort
        # is stable, so on a tie siblings keep file order and results keep
        # the order of the calls they answer.
        orphaned_siblings.sort(key=_timestamp_sort_key)
        orphaned_results.sort(key=_timestamp_sort_key)
        recovered = orphaned_siblings + orphaned_results
        for entry in recovered:
            seen.add(entry["uuid"])
        inserts[anchor_by_message_id[message_id]["uuid"]] = recovered

    if not inserts:
        return chain

    result_chain: list[Entry] = []
    for entry in chain:
        result_chain.append(entry)
        result_chain.extend(inserts.get(entry["uuid"], ()))
    return result_chain


def _is_visible_message(entry: Entry) -> bool:
    """Returns True if the entry should be included in the returned messages."""
    entry_type = entry.get("type")
    if entry_type != "user" and entry_type != "assistant":
        return False
    if records.is_meta(entry):
        return False
    if entry.get("isSidechain"):
        return False
    # Note: isCompactSummary messages are intentionally included. They contain
    # the summarized content from compacted conversations and are the only
    # representation of that content post-compaction. This matches VS Code IDE
    # behavior (transcriptToSessionMessage does not filter them).
    return not entry.get("teamName")

