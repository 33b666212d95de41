"""Finding transcript files under a SOURCE and naming what each one is."""

from __future__ import annotations

import json
import os
import re
from collections import namedtuple

from indexer.transcripts.codex import default_folders as codex_folders, is_rollout_head
from indexer.transcripts.gemini import default_folder as gemini_folder, is_chat_head, \
    is_json_chat
from indexer.transcripts.retention import config_dirs
from indexer.transcripts.safefiles import open_regular

UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)
# Folders under a project that hold no transcripts: large tool outputs and
# subagent workflow journals.
SKIP_DIRS = {"tool-results", "workflows"}
SNIFF_BYTES = 64 * 1024
FIRST_SNIFF_BYTES = 4096   # read first: sniffing 64 KB of each new file was most of its cost


# A file under a SOURCE, as its path describes it: ``path`` absolute;
# ``kind`` main | subagent | execution_log; ``session_id`` from the path,
# None when only the content can say; ``named``: its name alone says it is a
# transcript. (A namedtuple: ingest describes files on every run, and a
# dataclass costs start-up time.) ``agent``: None for Claude Code, else
# agents.CODEX or agents.GEMINI (what the first line says: sniff).
Candidate = namedtuple("Candidate", "path kind session_id agent_id project_dir named agent",
                       defaults=(None,))


class NoProjectsFolder(Exception):
    """No SOURCES given, and the default projects folder does not exist."""


def not_found(source: str) -> str:
    """Why ``source`` names nothing to read: a path that does not exist, or
    '' (an empty path names no file or folder, never the current one)."""
    if not source:
        return "'': an empty path names no file or folder"
    return f"{source}: no such file or folder"


def default_sources(sources, config_dir=None) -> list[str]:
    """The SOURCES given, else the projects folder of ``config_dir``, else
    those of every config dir (retention.config_dirs) and, when neither
    ``config_dir`` nor $CLAUDE_CONFIG_DIR names one and a projects folder
    exists, the Codex CLI's and Gemini CLI's session folders that exist
    ($CODEX_HOME, else ~/.codex: sessions/ and archived_sessions/;
    ~/.gemini/tmp): what ingest reads by default."""
    if sources:
        return [os.fspath(s) for s in sources]
    candidates = [os.path.join(d, "projects") for d in ([config_dir] if config_dir
                                                        else config_dirs())]
    found = [p for p in candidates if os.path.isdir(p)]
    if found and not config_dir and not os.environ.get("CLAUDE_CONFIG_DIR"):
        # and the other agents' folders that exist (agents.py), beside Claude
        # Code's own default ones (a config dir named: its projects/ alone)
        found += [p for p in (*codex_folders(), gemini_folder()) if os.path.isdir(p)]
    if not found:
        raise NoProjectsFolder(f"{' or '.join(candidates)} does not exist: name the transcript "
                               "folders to index")
    return found


def describe(path: str) -> Candidate:
    """What the path (absolute, normalized) says about a .jsonl file (it may
    still not be a transcript). String operations, not pathlib: every run
    describes every file under its sources."""
    parent, name = os.path.split(path)
    stem = os.path.splitext(name)[0]
    folder = os.path.basename(parent)
    if stem.startswith("agent-"):
        agent_id = stem[len("agent-"):]
        if folder == "subagents":
            session_dir = os.path.dirname(parent)
            return Candidate(path, "subagent", os.path.basename(session_dir), agent_id,
                             os.path.basename(os.path.dirname(session_dir)), True)
        return Candidate(path, "subagent", None, agent_id, folder, True)
    if UUID_RE.match(stem):
        return Candidate(path, "main", stem, None, folder, True)
    return Candidate(path, "main", None, None, folder, False)


def walk(root: str):
    """Yield every .jsonl path under ``root`` that may be a transcript, sorted:
    a folder's own files, then each of its folders in turn, as os.walk goes
    (a folder it cannot read is passed over; a link to a folder is not
    followed). One scandir a folder, whose entries say which are folders
    without a stat each: every run walks every source (os.walk, which also
    stats each folder found, was half of a no-op ingest's own time)."""
    in_chats = os.path.basename(root) == "chats"
    try:
        with os.scandir(root) as entries:
            files, folders = [], []
            for entry in entries:
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    is_dir = False
                if is_dir:
                    if entry.name not in SKIP_DIRS:
                        folders.append(entry)
                elif entry.name.endswith(".jsonl") or (
                        in_chats and entry.name.endswith(".json")):   # a Gemini CLI .json chat
                    files.append(entry.path)
    except OSError:
        return
    files.sort()
    yield from files
    folders.sort(key=_name)
    for folder in folders:
        try:
            link = folder.is_symlink()
        except OSError:
            continue
        if not link:
            yield from walk(folder.path)


def may_be_session_file(path: str) -> bool:
    """Whether ``walk`` would yield a file of this name: a ``.jsonl``, or a
    ``.json`` in a ``chats`` folder (a Gemini CLI chat)."""
    return path.endswith(".jsonl") or (
        path.endswith(".json") and os.path.basename(os.path.dirname(path)) == "chats")


def walked(root: str, path: str) -> bool:
    """Whether ``walk(root)`` would reach ``path`` (a file or folder under
    ``root``): no folder on the way, nor ``path``, is skipped (SKIP_DIRS),
    and no folder on the way is a link (``path`` itself may be a link to a
    file). For the watcher, whose notifications and ``isdir`` follow links."""
    parts = os.path.relpath(path, root).split(os.sep)
    if any(name in SKIP_DIRS for name in parts):
        return False
    folder = root
    for name in parts[:-1]:
        folder = os.path.join(folder, name)
        if os.path.islink(folder):
            return False
    return True


# What ingest and ship say of a file whose name is not_utf8 (after the name).
NOT_UTF8 = "a file name that is not UTF-8: skipped"
# watchfiles' error for such a name under a watched folder: its inotify watch
# fails on every wait while one exists, its polling once for each that
# appears; so the watchers poll instead.
UNDECODABLE_PATH = "Unable to decode path"


def not_utf8(path: str) -> str | None:
    """``path`` shown with its undecodable bytes escaped (``\\xff``) when it
    is not valid UTF-8 (os.fsdecode keeps such bytes as surrogates), else
    None. The index stores paths as TEXT: such a file is skipped and said."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    return None


def _name(entry) -> str:
    return entry.name


TRANSCRIPT = "transcript"
EXECUTION_LOG = "execution_log"   # `claude -p --output-format stream-json` output
OTHER = "other"
# Another agent's session file: sniff answers its name (agents.OTHER_AGENTS).
CODEX, GEMINI = "codex", "gemini"
# How a rollout's session_meta line opens (one too long to sniff whole).
CODEX_HEAD = re.compile(rb'^\{"timestamp":"[^"]*",(?:"ordinal":\d+,)?"type":"session_meta"')


def _is_execution_event(value: dict) -> bool:
    # stream-json events name the session `session_id`; transcript records
    # name it `sessionId`.
    return "session_id" in value and "sessionId" not in value


def _other_agent(value: dict) -> str | None:
    """CODEX for a rollout's first line (its session_meta), GEMINI for a
    chat's (its header); else None."""
    if is_rollout_head(value):
        return CODEX
    if is_chat_head(value):
        return GEMINI
    return None


def _told_by_a_line(head: bytes) -> str | None:
    """EXECUTION_LOG or TRANSCRIPT if a complete line of ``head`` says so;
    CODEX or GEMINI if its first line is another agent's (_other_agent)."""
    start, first = 0, True
    while (end := head.find(b"\n", start)) >= 0:
        line, start = head[start:end], end + 1
        if not line.strip():
            continue
        try:
            value = json.loads(line.decode("utf-8").lstrip("\ufeff"))
        except (ValueError, RecursionError, UnicodeDecodeError):
            continue
        if isinstance(value, dict):
            if first and (agent := _other_agent(value)) is not None:
                return agent
            first = False
            if _is_execution_event(value):
                return EXECUTION_LOG
            if "type" in value or "uuid" in value:
                return TRANSCRIPT
    return None


def sniff_lines(head: bytes) -> str | None:
    """What the complete lines of a file's first bytes ``head`` say it is
    (EXECUTION_LOG, TRANSCRIPT, or None), as ``sniff`` reads them: a fleet's
    central has the first lines a host shipped, not the file."""
    return _told_by_a_line(head[:SNIFF_BYTES])


def sniff(path: str) -> str | None:
    """What the first complete lines say the file is: TRANSCRIPT,
    EXECUTION_LOG, CODEX, GEMINI, OTHER, or None (no complete line yet:
    decide later)."""
    try:
        with open_regular(path) as f:
            # (most files tell on their first line: a short read first)
            head = f.read(FIRST_SNIFF_BYTES)
            verdict = _told_by_a_line(head)
            if verdict is None and len(head) == FIRST_SNIFF_BYTES:
                head += f.read(SNIFF_BYTES - FIRST_SNIFF_BYTES)
                verdict = _told_by_a_line(head)
    except OSError:
        return OTHER
    if verdict is not None:
        return verdict
    if not head.strip():
        return None
    if is_json_chat(path, head):
        return GEMINI
    if b"\n" not in head:
        # One long first line: judge by its opening.
        if CODEX_HEAD.search(head[:256]):
            return CODEX
        if head.lstrip(b"\xef\xbb\xbf \t").startswith(b"{"):
            return TRANSCRIPT
        return OTHER
    return OTHER
