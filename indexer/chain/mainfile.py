"""Which of a session's main transcripts ``claude --resume <id>`` opens.

A session id can be on several main transcripts: a copy in another project
folder, a fork that kept the id in a file named otherwise, a stub, a deleted
file, a session-store copy. Claude Code 2.1.332 opens, for ``--resume <id>``
run from a working directory CWD (found by running the bundled binary
against a fake Messages API; docs/how-it-works/problem-classes.md has the experiment and the code):

1. ``projects/<folder of CWD>/<id>.jsonl``, when it holds a user or assistant
   message;
2. else the same name in the project folders of CWD's other git worktrees;
3. else every ``projects/*/<id>.jsonl`` with a line holding the compact
   ``"type":"user"``/``"type":"assistant"`` text: exactly one is loaded, two
   or more are "No conversation found".

A file not named ``<id>.jsonl`` is never opened for that id. The index does
not know the operator's cwd: ``session_hosts.main_file_id`` is the file a
resume from the session's own working directory opens on that host
(``main_file_rule`` says why; the rule is SQL, definitions.MAIN_FILE_RULE_TEMPLATE,
applied by derive.py), and ``for_cwd`` answers for a given cwd
(``session-index check --cwd DIR``). Each host's files are its own: a resume
on one host never opens another's copy, so the choice is per (host,
session); host '' is this machine (its files and store copies).
"""

from __future__ import annotations

import os

from indexer.chain import definitions
from indexer.sql import dict_rows

# The session's main transcripts with the facts the choice rests on, and
# whether each is in the project folder of the cwd :cwd (for a folder name
# over 200 characters: the same first 200 characters, and its records' cwd
# is :cwd, as the CLI's own fallback for hashed names checks).
CWD_FACTS_SQL = f"""
SELECT facts.*, {definitions.IN_CWD_PROJECT_TEMPLATE.format(project_dir="facts.project_dir", cwd=":cwd")}
    AND (length({definitions.PROJECT_FOLDER_TEMPLATE.format(cwd=":cwd")}) <= 200
         OR facts.cwd IS :cwd) AS in_given_cwd_project
FROM ({definitions.MAIN_FILE_FACTS_TEMPLATE.format(
    where="f.session_id = :session_id AND coalesce(f.host, '') = :host")}) facts
ORDER BY facts.mtime DESC, facts.file_id DESC
""".strip()
CHOSEN_SQL = """
SELECT s.main_file_id, s.main_file_rule, f.path FROM session_hosts s
LEFT JOIN files f ON f.id = s.main_file_id WHERE s.session_id = ? AND s.host = ?
""".strip()
COPIES_SQL = """
SELECT * FROM session_main_copies WHERE session_id = ? AND host = ? ORDER BY NOT chosen, file_id
""".strip()
# Is any file of the session in the index?
KNOWN_SESSION_SQL = "SELECT 1 FROM files WHERE session_id = ? LIMIT 1"
# Each of these sessions' main transcript (sessions.main_file_id), by id.
MAIN_FILES_OF_SQL = """
SELECT session_id, main_file_id FROM sessions
WHERE session_id IN (SELECT value FROM json_each(:session_ids))
""".strip()
# The hosts holding a main transcript of the session ('' first: this machine).
HOSTS_SQL = """
SELECT DISTINCT coalesce(host, '') AS host FROM files WHERE session_id = ? AND kind = 'main'
ORDER BY host
""".strip()
# The folder Claude Code names for a cwd, by the same SQL as the views.
PROJECT_FOLDER_SQL = f"SELECT {definitions.PROJECT_FOLDER_TEMPLATE.format(cwd=':cwd')}"

# Rules for_cwd can answer besides definitions.MAIN_FILE_RULES.
NAMED_IN_WORKTREE_PROJECT = "named_in_worktree_project"
AMBIGUOUS = "ambiguous"      # several named copies, none in the cwd's folders
NONE_NAMED = "none_named"    # no named file with messages on disk


class Choice:
    """The main transcript a resume opens (``file_id`` None: none) and why:
    ``cwd`` is the cwd it was chosen for, if any; ``candidates`` the named
    copies in play, for ambiguous; ``facts`` every main file's facts, when
    asked for a cwd."""

    __slots__ = ("file_id", "rule", "path", "cwd", "candidates", "facts")

    def __init__(self, file_id: int | None, rule: str | None, path: str | None = None,
                 cwd: str | None = None, candidates: list | None = None,
                 facts: list | None = None):
        self.file_id, self.rule, self.path, self.cwd = file_id, rule, path, cwd
        self.candidates = [] if candidates is None else candidates
        self.facts = [] if facts is None else facts

    def __repr__(self) -> str:
        return f"Choice({self.file_id!r}, {self.rule!r}, {self.path!r}, {self.cwd!r})"

    @property
    def opened(self) -> bool:
        """Does a bare `claude --resume` open this file (from that cwd)?"""
        return self.file_id is not None and self.rule in (
            *definitions.OPENED_BY_RESUME, NAMED_IN_WORKTREE_PROJECT)


class AmbiguousHost(Exception):
    """The session is on several hosts, none of them this machine: which
    one is the question about? (check --host)"""


def hosts(db, session_id: str) -> list[str]:
    return [r[0] for r in db.conn.execute(HOSTS_SQL, [session_id])]


def default_host(db, session_id: str) -> str:
    """The host a question about the session is about when none is named:
    this machine ('') when it holds a main transcript of it (or none does),
    else the one host that does; AmbiguousHost when several do."""
    found = hosts(db, session_id)
    if not found or "" in found:
        return ""
    if len(found) == 1:
        return found[0]
    raise AmbiguousHost(f"session {session_id} is on {len(found)} hosts "
                        f"({', '.join(found)}) and not on this machine: give --host")


def chosen(db, session_id: str, host: str = "") -> Choice:
    """session_hosts.main_file_id and main_file_rule of the session on
    ``host`` (the session's own cwd)."""
    row = db.conn.execute(CHOSEN_SQL, [session_id, host]).fetchone()
    if row is None or row[0] is None:
        return Choice(None, None)
    return Choice(row[0], row[1], row[2])


def copies(db, session_id: str, main_files: int | None = None, host: str = "") -> list[dict]:
    """The session_main_copies rows of the session on ``host`` (none when it
    has one main file there: a caller that counted them, ``main_files``,
    skips the view, whose preparing is a good part of a fresh check
    process)."""
    if main_files is not None and main_files < 2:
        return []
    return dict_rows(db.conn, COPIES_SQL, [session_id, host])


def project_folder(db, cwd: str) -> str:
    return db.conn.execute(PROJECT_FOLDER_SQL, {"cwd": cwd}).fetchone()[0]


def git_worktrees(cwd: str) -> list[str]:
    """The other worktrees of the git repository at ``cwd`` (`git worktree list`),
    in git's order; none when git or the repository is not there."""
    import subprocess  # only for check --cwd: its import costs every other check

    try:
        out = subprocess.run(["git", "-C", cwd, "worktree", "list", "--porcelain"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    paths = [line[len("worktree "):] for line in out.stdout.splitlines()
             if line.startswith("worktree ")]
    return [p for p in paths if os.path.realpath(p) != cwd]


def for_cwd(db, session_id: str, cwd: str, host: str = "") -> Choice:
    """The main transcript `claude --resume <session_id>` run from ``cwd``
    (on ``host``) opens, by the CLI's three steps (the module docstring)."""
    cwd = os.path.realpath(cwd) if not host else cwd   # another host's paths: as given

    def loadable_in(folder_cwd):
        rows = dict_rows(db.conn, CWD_FACTS_SQL, {"session_id": session_id, "cwd": folder_cwd,
                                                  "host": host})
        return rows, [r for r in rows if r["named"] and r["on_disk"] and r["has_messages"]
                      and r["in_given_cwd_project"]]

    rows, here = loadable_in(cwd)
    if here:
        return Choice(here[0]["file_id"], "named_in_cwd_project", here[0]["path"], cwd, facts=rows)
    if any(r["named"] and r["on_disk"] and r["has_messages"] for r in rows):
        for tree in (git_worktrees(cwd) if not host else []):
            _, there = loadable_in(tree)
            if there:
                return Choice(there[0]["file_id"], NAMED_IN_WORKTREE_PROJECT, there[0]["path"],
                              cwd, facts=rows)
    visible = [r for r in rows if r["named"] and r["on_disk"] and r["scan_visible"]]
    if len(visible) == 1 and visible[0]["has_messages"]:
        return Choice(visible[0]["file_id"], "only_named", visible[0]["path"], cwd, facts=rows)
    if len(visible) > 1:
        return Choice(None, AMBIGUOUS, None, cwd, candidates=[r["path"] for r in visible],
                      facts=rows)
    store = [r for r in rows if r["origin"] == "store"]
    if store:
        return Choice(store[0]["file_id"], "store_copy", store[0]["path"], cwd, facts=rows)
    return Choice(None, NONE_NAMED, None, cwd, facts=rows)
