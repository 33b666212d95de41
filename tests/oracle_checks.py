"""The oracle's agreement checks, shared by the test files that ask the real
Claude Code (test_oracle.py, test_claude_code_fixtures.py): resume a copy of a
transcript with the real CLI against a fake Messages API on loopback
(indexer/repair/oracle.py) and compare what it sent with what the index keeps
and drops (indexer/repair/verify.py)."""

from __future__ import annotations

import json
import os
import subprocess

from indexer.repair import oracle, verify

try:
    CLAUDE = oracle.find_claude()
except oracle.NoClaudeBinary:
    CLAUDE = None


def agree(index, api, path):
    """Ingest, resume with the real CLI, and compare: returns the counts."""
    index.ingest()
    fid = index.file_id(path)
    sid = index.value("SELECT session_id FROM files WHERE id = ?", [fid]) or path.stem
    data = path.read_bytes()
    sent = oracle.resume_sent(data, path.stem if oracle.UUID_RE.match(path.stem) else sid,
                              api, CLAUDE)
    kept_not_sent, sent_but_dropped, counts = verify.compare(index.db.conn, fid, sent)
    assert kept_not_sent == [] and sent_but_dropped == [], (path.name, counts)
    return counts, sent


def check_folder(index, api, folder, known=frozenset()):
    """Every main transcript under folder: the CLI and the index agree, but
    for the known differences (paths relative to folder)."""
    index.ingest(folder)
    files = index.rows("SELECT id, path, session_id FROM files WHERE kind = 'main' ORDER BY path")
    assert files, f"no main transcripts under {folder}"
    agreed, differed, loaded_nothing = [], [], []
    for f in files:
        data = open(f["path"], "rb").read()
        stem = f["path"].rsplit("/", 1)[-1][:-len(".jsonl")]
        sid = stem if oracle.UUID_RE.match(stem) else f["session_id"] or stem
        try:
            sent = oracle.resume_sent(data, sid, api, CLAUDE)
        except oracle.OracleFailed as e:
            # "No conversation found": the CLI loads nothing; so must the index.
            assert "No conversation found" in str(e), (f["path"], str(e))
            kept = index.value("SELECT count(*) FROM leaf_ancestry WHERE file_id = ? "
                               "AND rule = 'resume' AND record_id IN (SELECT id FROM records "
                               "WHERE type IN ('user', 'assistant'))", [f["id"]])
            assert kept == 0, f["path"]
            loaded_nothing.append(f["path"])
            continue
        a, b, _ = verify.compare(index.db.conn, f["id"], sent)
        rel = f["path"][len(str(folder)) + 1:]
        (agreed if not a and not b else differed).append(rel)
    assert set(differed) == set(known), differed
    print(f"\noracle: {len(files)} transcripts under {folder}, {len(agreed)} agree, "
          f"{len(differed)} known differences, {len(loaded_nothing)} load nothing")
    return files


def resume_in(config, session_id: str, cwd):
    """``claude --resume SESSION -p PING`` with ``config`` (a copy: the CLI
    appends to what it resumes) as CLAUDE_CONFIG_DIR, from ``cwd``, against
    a fake Messages API: (exit code, stdout and stderr, the request bodies
    holding the prompt)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "CLAUDE_", "_CLAUDE_"))}
    with oracle.FakeMessagesAPI() as api:
        env.update({"HOME": str(os.path.dirname(config)), "CLAUDE_CONFIG_DIR": str(config),
                    "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{api.port}",
                    "ANTHROPIC_API_KEY": "sk-ant-oracle-not-a-key",
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
                    "NO_PROXY": "127.0.0.1,localhost"})
        done = subprocess.run([CLAUDE, "--resume", session_id, "-p", oracle.PING,
                               "--output-format", "json"], cwd=cwd, env=env, text=True,
                              capture_output=True, timeout=oracle.RUN_TIMEOUT,
                              stdin=subprocess.DEVNULL)
        sent = [r["body"] for r in api.take() if r["path"].endswith("/v1/messages")
                and oracle.PING in json.dumps(r["body"].get("messages"))]
    return done.returncode, done.stdout + done.stderr, sent
