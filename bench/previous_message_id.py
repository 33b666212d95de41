"""What Claude Code sends as previous_message_id on a resume, per version, auth mode and transcript.

    python bench/previous_message_id.py [CLAUDE ...] [--modes api_key,oauth] [--kinds msg_tail]
                                        [--fixtures] [--json]

CLAUDE: Claude Code binaries (default: the oracle's, i.e. claude on PATH or the
one the claude-agent-sdk wheel bundles; older ones: /work/clis/<version>/claude,
unpacked from claude-agent-sdk wheels). Each resumes the generated transcripts of
indexer/repair/previous_message_id.py (KINDS; --fixtures adds the transcripts the
binary itself wrote in tests/fixtures/third_party/) under each mode (MODES:
loopback base URL, api.anthropic.com through a loopback MITM with an API key, an
auth token, an OAuth token, Bedrock, Vertex, Foundry ...) against a fake Messages
API that answers a previous_message_id not starting with msg_ with the API's 400.
Prints one row per resume: version, mode, kind, previous_message_id (or "(not
sent)": no diagnostics key), and the answer (400 or ok). Nothing leaves 127.0.0.1.
"""
import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from indexer.repair import oracle  # noqa: E402
from indexer.repair.previous_message_id import KINDS, MODES, probe  # noqa: E402

FIXTURES = HERE.parent / "tests" / "fixtures" / "third_party"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("claude", nargs="*")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated MODES names")
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated KINDS names")
    ap.add_argument("--fixtures", action="store_true",
                    help="also resume tests/fixtures/third_party/*.jsonl")
    ap.add_argument("--json", action="store_true", help="one JSON object per row")
    args = ap.parse_args()
    binaries = args.claude or [oracle.find_claude()]
    kinds = {k: KINDS[k] for k in args.kinds.split(",") if k}
    extra = ({p.stem: p.read_bytes() for p in sorted(FIXTURES.glob("*.jsonl"))}
             if args.fixtures else {})
    modes = [m for m in args.modes.split(",") if m]
    if not args.json:
        print("version\tmode\tkind\tprevious_message_id\tanswer")
    for binary in binaries:
        for row in probe(binary, kinds, modes, extra):
            if args.json:
                print(json.dumps(asdict(row)), flush=True)
            else:
                pmid = row.previous_message_id
                print(f"{row.version}\t{row.mode}\t{row.kind}\t"
                      f"{json.dumps(pmid) if pmid is None else pmid}\t{row.status}", flush=True)


if __name__ == "__main__":
    main()
