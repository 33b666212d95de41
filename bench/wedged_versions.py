"""What each Claude Code version does when the API refuses the thinking of the latest assistant message.

    python bench/wedged_versions.py [CLAUDE ...] [--json]

CLAUDE: Claude Code binaries (default: the oracle's, i.e. claude on PATH or the
one the claude-agent-sdk wheel bundles; older ones: /work/clis/<version>/claude,
unpacked from claude-agent-sdk wheels). Each resumes the wedged fixtures of
tests/fixtures/thinking/ (blanked_latest, unsigned_latest) against a fake
Messages API that refuses, as the real one does, a request whose latest
assistant message carries a thinking block changed from what it returned
(indexer/repair/oracle.refusing_changed_thinking), twice. Prints one row per
resume: version, fixture, requests, refused, thinking blocks in the last
request, exit code, and what that is: stuck (refused, and the CLI gives up),
recovers (refused, then sent again without thinking, accepted) or no_400 (no
request refused). indexer/transcripts/thinking.py holds the
ranges. Nothing leaves 127.0.0.1.
"""
import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from indexer.repair import oracle  # noqa: E402

FIXTURES = HERE.parent / "tests" / "fixtures" / "thinking"
WEDGED = ("blanked_latest", "unsigned_latest")


def thinking_sent(body: dict) -> int:
    return sum(1 for m in body.get("messages") or [] if isinstance(m.get("content"), list)
               for b in m["content"] if isinstance(b, dict) and b.get("type") == "thinking")


def probe(binary: str, name: str) -> dict:
    path = FIXTURES / f"{name}.jsonl"
    session_id = json.loads(path.read_text().splitlines()[0])["sessionId"]
    returned = json.loads((FIXTURES / "returned.json").read_text())
    reply = oracle.refusing_changed_thinking(returned)
    with oracle.FakeMessagesAPI(reply) as api:
        run = oracle.run_resume(path.read_bytes(), session_id, api, binary)
    calls = [r["body"] for r in run.requests if r["path"].endswith("/v1/messages")]
    refused = len(reply.refused)
    what = "no_400" if not refused else "recovers" if run.exit_code == 0 else "stuck"
    return {"version": oracle.claude_version(binary), "fixture": name, "requests": len(calls),
            "refused": refused, "thinking_in_last": thinking_sent(calls[-1]) if calls else None,
            "exit_code": run.exit_code, "what": what}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("claude", nargs="*")
    ap.add_argument("--json", action="store_true", help="one JSON object per row")
    args = ap.parse_args()
    binaries = args.claude or [oracle.find_claude()]
    columns = ("version", "fixture", "requests", "refused", "thinking_in_last", "exit_code",
               "what")
    if not args.json:
        print("\t".join(columns))
    for binary in binaries:
        for name in WEDGED:
            for _ in range(2):
                row = probe(binary, name)
                print(json.dumps(row) if args.json else
                      "\t".join(str(row[c]) for c in columns), flush=True)


if __name__ == "__main__":
    main()
