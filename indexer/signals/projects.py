"""``--project P``: which sessions a project names, defined once for every
command that takes it (sessions, search). P matches a session whose project
folder (as in ~/.claude/projects: ``-home-me-src-app``) or cwd
(``/home/me/src/app``) holds it: the folder's name, the cwd, or any part of
either (``app``, ``src/app``). A P that is a folder here (``.``, ``~/src/app``)
is read as its absolute path."""

from __future__ import annotations

import os

# The match, on a row whose project folder and cwd are {dir} and {cwd}
# (:project blank: every project).
PROJECT_MATCH_TEMPLATE = ("(:project = '' OR instr({dir}, :project) > 0 "
                          "OR instr(coalesce({cwd}, ''), :project) > 0)")

# Does any session of the index match? (To say so when none does.)
ANY_SESSION_MATCHES_SQL = ("SELECT EXISTS (SELECT 1 FROM sessions s WHERE "
                           + PROJECT_MATCH_TEMPLATE.format(dir="s.project_dir", cwd="s.cwd")
                           + ")")


def project_value(project: str | None) -> str:
    """The :project parameter of ``--project``: '' for none; a folder that
    exists here as its absolute path (a session's cwd is absolute)."""
    if not project:
        return ""
    if project in (".", "..") or os.sep in project:
        path = os.path.expanduser(project)
        if os.path.isdir(path):
            return os.path.abspath(path)
    return project


def unmatched(conn, project: str | None) -> str | None:
    """The one-line note when ``project`` matches no session of the index
    (None when it matches one, or none was given)."""
    value = project_value(project)
    if not value or conn.execute(ANY_SESSION_MATCHES_SQL, {"project": value}).fetchone()[0]:
        return None
    return (f"no session's project folder or cwd contains {value!r} "
            "(`session-index sessions` lists them)")
