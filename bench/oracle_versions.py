"""What each Claude Code version sends on resuming the oracle's shapes, side by side.

    python bench/oracle_versions.py CLAUDE [CLAUDE ...] [--shapes a,b] [--json]

CLAUDE: Claude Code binaries, e.g. /work/clis/*/claude (each claude-agent-sdk wheel
bundles the CLI of its day: pip download claude-agent-sdk==X --no-deps, unzip
claude_agent_sdk/_bundled/claude). Every shape of tests/test_oracle.py (SHAPES) and
the ones below (NEW_SHAPES: a compaction with a preservedSegment, a tool_result written
before the tool_use that is the last row, a "No response requested." placeholder after
a prompt) is resumed by each binary against the fake Messages API
(indexer/repair/oracle.py), and what it sent is written as one line: the messages in
order, each as its role and the transcript's own texts and tool ids it carries (the
CLI's reminders left out). Prints a line per shape and version where it differs from
the last binary given (the reference; put the current CLI last), or --json everything.
"""
import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))
from indexer.repair import oracle  # noqa: E402
from test_oracle import SHAPES, SID, text, tool_result, tool_use, u  # noqa: E402
from conftest import Transcript  # noqa: E402


def shape_preserved_segment():
    """Manual /compact since about 2.1.170: the boundary's compactMetadata names the
    preserved tail (headUuid..tailUuid) and the summary it hangs from (anchorUuid)."""
    t = Transcript(SID)
    t.add(u(1), None, "user", message={"role": "user", "content": "first prompt"})
    t.add(u(2), u(1), "assistant", message=text("msg_1", "early answer"))
    t.add(u(3), u(2), "user", message={"role": "user", "content": "second prompt"})
    t.add(u(4), u(3), "assistant", message=text("msg_2", "preserved answer"))
    t.add(u(5), None, "system", subtype="compact_boundary", logicalParentUuid=u(4),
          content="Conversation compacted", compactMetadata={
              "trigger": "manual", "preTokens": 1000,
              "preservedSegment": {"headUuid": u(3), "tailUuid": u(4), "anchorUuid": u(6)}})
    t.add(u(6), u(5), "user", isCompactSummary=True, message={
        "role": "user", "content": "summary of the earlier conversation"})
    t.add(u(7), u(6), "user", message={"role": "user", "content": "third prompt"})
    t.add(u(8), u(7), "assistant", message=text("msg_3", "after compaction"))
    return t.records


def shape_child_before_parent():
    """A tool_result user record written 2 ms before the assistant tool_use it
    answers, that assistant being the file's last row."""
    t = Transcript(SID)
    t.add(u(1), None, "user", message={"role": "user", "content": "first prompt"},
          ts="2026-09-01T00:00:01.000Z")
    t.add(u(2), u(1), "assistant", message=text("msg_1", "first answer"),
          ts="2026-09-01T00:00:02.000Z")
    t.add(u(3), u(2), "user", message={"role": "user", "content": "run it"},
          ts="2026-09-01T00:00:03.000Z")
    t.add(u(5), u(4), "user", message=tool_result("toolu_late"),
          ts="2026-09-01T00:00:04.000Z", sourceToolAssistantUUID=u(4))
    t.add(u(4), u(3), "assistant", message=tool_use("msg_2", "toolu_late"),
          ts="2026-09-01T00:00:04.002Z")
    return t.records


def shape_no_response_requested():
    """A <synthetic> placeholder that is not an API error after a prompt."""
    t = Transcript(SID)
    t.add(u(1), None, "user", message={"role": "user", "content": "first prompt"})
    t.add(u(2), u(1), "assistant", message=text("msg_1", "first answer"))
    t.add(u(3), u(2), "user", message={"role": "user", "content": "second prompt"})
    t.add(u(4), u(3), "assistant", isApiErrorMessage=False, message={
        "id": "5e0c7c1e-2b7e-4c55-9d3c-0a0b0c0d0e0f", "type": "message", "role": "assistant",
        "model": "<synthetic>", "content": [{"type": "text", "text": "No response requested."}],
        "stop_reason": "stop_sequence", "usage": {"input_tokens": 0, "output_tokens": 0}})
    return t.records


NEW_SHAPES = {"preserved_segment": shape_preserved_segment,
              "child_before_parent": shape_child_before_parent,
              "no_response_requested": shape_no_response_requested}


def known_strings(records):
    out = {oracle.PING}
    for r in records:
        m = r.get("message") if isinstance(r, dict) else None
        if not isinstance(m, dict):
            continue
        c = m.get("content")
        for b in ([{"type": "text", "text": c}] if isinstance(c, str) else c or []):
            if isinstance(b, dict):
                out.update(str(b.get(k)) for k in ("text", "id", "tool_use_id") if b.get(k))
    return out


def condensed(messages, known):
    """'U:first prompt | A:first answer,tool_use:toolu_a | ...'"""
    parts = []
    for m in messages:
        items = []
        for b in oracle._blocks(m):
            if b.get("type") == "text":
                items += [s for s in known if s and s in b.get("text", "")
                          and s == b.get("text", "").strip()] or (
                    ["No response requested."] if "No response requested." in b.get("text", "")
                    else [])
            elif b.get("type") == "tool_use":
                items.append("tool_use:" + b.get("id", ""))
            elif b.get("type") == "tool_result":
                items.append("tool_result:" + b.get("tool_use_id", ""))
        if items:
            parts.append(("U:" if m.get("role") == "user" else "A:") + ",".join(items))
    return " | ".join(parts)


def resume(binary, records, api):
    data = "".join(json.dumps(r) + "\n" if isinstance(r, dict) else r + "\n"
                   for r in records).encode()
    try:
        sent = oracle.resume_sent(data, SID, api, binary)
    except oracle.OracleFailed as e:
        return "FAILED: " + str(e)[:120]
    known = known_strings([r if isinstance(r, dict) else json.loads(r) for r in records])
    return ("(compacted) " if sent.compacted else "") + condensed(sent.messages, known)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("claude", nargs="+")
    ap.add_argument("--shapes", default="")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    shapes = {**SHAPES, **NEW_SHAPES}
    names = [s for s in args.shapes.split(",") if s] or sorted(shapes)
    results = {}
    with oracle.FakeMessagesAPI() as api:
        for binary in args.claude:
            version = oracle.claude_version(binary)
            for name in names:
                got = resume(binary, shapes[name](), api)
                results[(name, version)] = got
                if args.json:
                    print(json.dumps({"version": version, "shape": name, "sent": got}),
                          flush=True)
    if args.json:
        return
    ref = oracle.claude_version(args.claude[-1])
    for name in names:
        print(f"{name}\n  {ref}: {results[(name, ref)]}")
        for (n, v), got in results.items():
            if n == name and v != ref and got != results[(name, ref)]:
                print(f"  {v}: {got}")


if __name__ == "__main__":
    main()
