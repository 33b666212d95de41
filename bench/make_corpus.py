"""Write a synthetic Claude Code ``projects/`` tree for benchmarks (stdlib only).

    python bench/make_corpus.py OUT_DIR [--size-mb 200] [--records N] [--seed 1] [--tool-result-kb 2]

Layout: ``OUT_DIR/-home-user-proj-K/<sessionId>.jsonl`` (K in 0..9, cwd ``/home/user/proj-K``),
plus for some sessions ``<sessionId>/subagents/agent-<16 hex>.jsonl`` (+ ``.meta.json``).
Generation stops after the turn in which the byte target or the line target is reached.
Output is deterministic for a given seed and arguments (uuids come from a seeded Random).

Shapes (one JSON object per line, compact separators, raw UTF-8):
- Chain records carry parentUuid, isSidechain, userType, cwd, sessionId, version, gitBranch,
  type, uuid, timestamp (ISO-8601, milliseconds, Z; increasing in file order except late api_error).
- A turn: user prompt (parent = previous leaf); then tool rounds: assistant records with ONE
  content block each (thinking / text / tool_use) chained, sharing message.id + requestId + usage.
  A round has 1 tool_use, sometimes 2-4 parallel ones chained one after another; each is answered
  by a user tool_result record parented on ITS OWN tool_use (so the file is a tree); the next
  assistant record continues from the LAST result. Tool results are lognormal in size (median
  --tool-result-kb, tail to ~200 KB), text from a seeded pool of prose and code-like lines,
  repeated in toolUseResult as the CLI does.
- progress records (hook_progress / bash_progress / agent_progress) hang off tool_use records as
  side branches (parent = the tool_use, sometimes chained); in long sessions most lines are these.
- After the turn's last assistant record: system stop_hook_summary, sometimes turn_duration.
- ~1/200 turns start with a compaction: system compact_boundary (parentUuid null,
  logicalParentUuid = previous leaf), then a user record with isCompactSummary true.
- ~1/300 turns: late-flushed api_error episode (seed 000): after the turn's output, 1-3 system
  api_error records with OLDER timestamps, the first parented on the prompt (the leaf before the
  output), chained; stop_hook_summary chains on the last error, and so does the next prompt.
- ~1/400 turns end with a synthetic assistant ("<synthetic>" model, uuid id, isApiErrorMessage).
- Metadata lines without uuid: file-history-snapshot before most prompts, occasional summary
  (leafUuid), custom-title, last-prompt.
- Subagent files (from a Task tool_use): isSidechain, agentId, parent's sessionId, linear chain.
"""
import argparse
import json
import math
import os
import random
import time

WORDS = ("the a of to in and is for with on file test index session record parent leaf chain "
         "query table row column value error result output input build cache write read load "
         "parse token model user agent tool call return config path branch commit merge diff "
         "patch line offset limit count size batch schema field key node tree graph walk sort "
         "filter match scan fetch update insert delete select where join group order view "
         "server client request response status retry timeout queue worker thread lock async "
         "module import class function method object string number list dict array type check "
         "assert expected actual failed passed skipped warning debug info trace stack frame "
         "memory disk byte buffer stream flush sync open close start stop run step done").split()
B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
B64 = B62 + "+/"
TOOLS = ("Bash", "Bash", "Read", "Read", "Grep", "Edit", "Glob", "Task")
MODELS = ("claude-opus-4-5-20251101", "claude-sonnet-4-5-20250929", "claude-opus-4-7")
VERSIONS = ("2.0.76", "2.1.14", "2.1.42", "2.1.114", "2.1.224")
BRANCHES = ("main", "main", "master", "feature/index", "fix/resume", "HEAD")
DUMPS = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False).encode
BASE_MS = 1767225600000  # 2026-01-01T00:00:00Z


def iso(ms):
    s, r = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s)) + ".%03dZ" % r


class Gen:
    def __init__(self, out, seed, size_bytes, max_lines, result_kb):
        self.out, self.rng = out, random.Random(seed)
        self.size_bytes, self.max_lines, self.result_kb = size_bytes, max_lines, result_kb
        self.files = self.lines = self.bytes = 0
        self.pool = self._make_pool(4 << 20)
        self.sigpool = "".join(self.rng.choices(B64, k=1 << 16))

    # ---- random material ------------------------------------------------------------------
    def _make_pool(self, size):
        rng, w, out, n = self.rng, WORDS, [], 0
        while n < size:
            k = rng.random()
            a, b, c, d = rng.choice(w), rng.choice(w), rng.choice(w), rng.choice(w)
            num, ind = rng.randint(1, 999), "    " * rng.randint(0, 3)
            if k < 0.35:
                s = " ".join(rng.choices(w, k=rng.randint(5, 16))).capitalize() + "."
            elif k < 0.5:
                s = f"{ind}{a}_{b} = {c}({d}, {num})"
            elif k < 0.6:
                s = f"{ind}if {a} is not None and {b}_{c} > {num}:"
            elif k < 0.68:
                s = f"def {a}_{b}(self, {c}, {d}={num}):"
            elif k < 0.76:
                s = f'  File "/home/user/proj/src/{a}/{b}.py", line {num}, in {c}_{d}'
            elif k < 0.86:
                s = f"src/{a}/{b}_{c}.py:{num}: {d} " + " ".join(rng.choices(w, k=6))
            elif k < 0.93:
                s = f"{num:>6}\u2192{ind}return self.{a}.{b}({c!r}, {d}={num})"
            else:
                s = f"-rw-r--r-- 1 user user {num * 37:>7} Jan {num % 28 + 1:>2} 10:{num % 60:02d} {a}_{b}.py"
            out.append(s)
            n += len(s) + 1
        return "\n".join(out)

    def text(self, n):
        n = max(1, min(int(n), len(self.pool) - 1))
        i = self.rng.randrange(len(self.pool) - n)
        return self.pool[i:i + n]

    def result_size(self):  # lognormal, median --tool-result-kb, tail capped at ~200 KB
        return min(200_000, max(40, self.result_kb * 1024 * math.exp(1.5 * self.rng.gauss(0, 1))))

    def uid(self):
        h = "%032x" % self.rng.getrandbits(128)
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}"

    def ident(self, prefix, k):
        return prefix + "".join(self.rng.choices(B62, k=k))

    def tick(self, lo, hi):  # advance the session clock (ms)
        self.t += self.rng.randint(lo, hi)

    def usage(self, zero=False):
        r = self.rng
        i, cc, cr, o = (0, 0, 0, 0) if zero else (
            r.randint(1, 12), r.randint(0, 30000), r.randint(0, 150000), r.randint(5, 4000))
        return {"input_tokens": i, "cache_creation_input_tokens": cc, "cache_read_input_tokens": cr,
                "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": cc},
                "output_tokens": o, "service_tier": None if zero else "standard"}

    # ---- record emission ------------------------------------------------------------------
    def emit(self, d, out):
        b = DUMPS(d).encode()  # raw UTF-8 like the CLI (Read output has "\u2192")
        out.append(b)
        self.lines += 1
        self.bytes += len(b) + 1

    def rec(self, typ, parent, body, out=None, uuid=None, ts=None, agent=None):
        uuid = uuid or self.uid()
        d = {"parentUuid": parent, "isSidechain": agent is not None, "userType": "external",
             "cwd": self.cwd, "sessionId": self.sid, "version": self.ver, "gitBranch": self.branch}
        if agent:
            d["agentId"] = agent
        d["type"] = typ
        d.update(body)
        d["uuid"], d["timestamp"] = uuid, iso(ts or self.t)
        self.emit(d, self.main if out is None else out)
        return uuid

    def assistant(self, parent, block, mid, rid, usage, stop, out=None, agent=None):
        self.tick(300, 4000)
        msg = {"id": mid, "type": "message", "role": "assistant", "model": self.model,
               "content": [block], "stop_reason": stop, "stop_sequence": None, "usage": usage}
        return self.rec("assistant", parent, {"message": msg, "requestId": rid}, out, agent=agent)

    def system(self, parent, subtype, body, **kw):
        return self.rec("system", parent, dict(subtype=subtype, **body), **kw)

    # ---- tools ----------------------------------------------------------------------------
    def tool_input(self, name):
        r, w = self.rng, WORDS
        path = f"{self.cwd}/src/{r.choice(w)}/{r.choice(w)}_{r.choice(w)}.py"
        if name == "Bash":
            return {"command": f"{r.choice(('pytest -q', 'rg -n', 'ls -la', 'git diff', 'python -m'))} "
                               f"{path}", "description": " ".join(r.choices(w, k=5))}
        if name == "Read":
            return {"file_path": path}
        if name == "Grep":
            return {"pattern": r.choice(w) + "_" + r.choice(w), "path": self.cwd, "output_mode": "content"}
        if name == "Edit":
            return {"file_path": path, "old_string": self.text(r.randint(40, 400)),
                    "new_string": self.text(r.randint(40, 400)), "replace_all": False}
        if name == "Glob":
            return {"pattern": f"**/*{r.choice(w)}*.py"}
        return {"description": " ".join(r.choices(w, k=4)), "prompt": self.text(r.randint(200, 1500)),
                "subagent_type": "general-purpose"}

    def tool_result(self, name, inp, tool_id, tu_uuid):
        r, text = self.rng, self.text(self.result_size())
        if name == "Bash":
            tur = {"stdout": text, "stderr": "", "interrupted": False, "isImage": False}
        elif name == "Read":
            n = text.count("\n") + 1
            tur = {"type": "text", "file": {"filePath": inp["file_path"], "content": text,
                                            "numLines": n, "startLine": 1, "totalLines": n}}
        elif name == "Grep":
            tur = {"mode": "content", "numFiles": r.randint(1, 40), "filenames": [],
                   "content": text, "numLines": text.count("\n") + 1}
        elif name == "Edit":
            tur = {"filePath": inp["file_path"], "oldString": inp["old_string"],
                   "newString": inp["new_string"], "originalFile": text, "structuredPatch": [],
                   "userModified": False, "replaceAll": False}
            text = f"The file {inp['file_path']} has been updated. Here's the result:\n" + text[:600]
        elif name == "Glob":
            names = [f"{self.cwd}/src/{r.choice(WORDS)}_{r.choice(WORDS)}.py" for _ in range(r.randint(1, 60))]
            text = "\n".join(names)
            tur = {"filenames": names, "durationMs": r.randint(2, 90), "numFiles": len(names), "truncated": False}
        else:
            agent = self.subagent(inp["prompt"])
            tur = {"status": "completed", "prompt": inp["prompt"], "agentId": agent,
                   "content": [{"type": "text", "text": text}], "totalDurationMs": r.randint(5000, 900000),
                   "totalTokens": r.randint(2000, 90000), "totalToolUseCount": r.randint(1, 30)}
        self.tick(50, 20000)
        body = {"message": {"role": "user", "content": [
            {"tool_use_id": tool_id, "type": "tool_result", "content": text}]},
            "toolUseResult": tur, "sourceToolAssistantUUID": tu_uuid}
        return self.rec("user", tu_uuid, body)

    def progress(self, name, tool_id, tu_uuid):
        r = self.rng
        n = int(r.expovariate(1 / 6)) if self.long else (r.random() < 0.4) * r.randint(1, 2)
        parent = tu_uuid
        for i in range(n):
            self.tick(5, 3000)
            if name == "Bash" and i % 3:
                out = self.text(r.randint(40, 1200))
                data = {"type": "bash_progress", "output": out[-300:], "fullOutput": out,
                        "elapsedTimeSeconds": i + 1, "totalLines": out.count("\n") + 1}
            elif name == "Task" and i % 2:
                data = {"type": "agent_progress", "prompt": "", "agentId": self.ident("", 7).lower(),
                        "message": {"type": "assistant", "message": {"role": "assistant", "content": [
                            {"type": "text", "text": self.text(r.randint(50, 800))}]}}}
            else:
                ev = r.choice(("PreToolUse", "PostToolUse"))
                data = {"type": "hook_progress", "hookEvent": ev, "hookName": f"{ev}:{name}",
                        "command": "${CLAUDE_PLUGIN_ROOT}/scripts/hook.sh " + r.choice(WORDS)}
            body = {"data": data, "toolUseID": f"{name.lower()}-progress-{i}", "parentToolUseID": tool_id}
            pid = self.rec("progress", parent, body)
            parent = pid if r.random() < 0.6 else tu_uuid

    def subagent(self, prompt):
        r, agent, out = self.rng, "%016x" % self.rng.getrandbits(64), []
        leaf = self.rec("user", None, {"message": {"role": "user", "content": prompt}}, out, agent=agent)
        for _ in range(r.randint(1, 10)):
            mid, rid, name = self.ident("msg_01", 22), self.ident("req_011C", 18), r.choice(TOOLS[:-1])
            tool_id, inp = self.ident("toolu_01", 22), self.tool_input(name)
            block = {"type": "tool_use", "id": tool_id, "name": name, "input": inp}
            leaf = self.assistant(leaf, block, mid, rid, self.usage(), "tool_use", out, agent)
            self.tick(50, 8000)
            body = {"message": {"role": "user", "content": [{"tool_use_id": tool_id, "type": "tool_result",
                                                             "content": self.text(self.result_size() / 2)}]},
                    "toolUseResult": {"stdout": "", "stderr": "", "interrupted": False, "isImage": False},
                    "sourceToolAssistantUUID": leaf}
            leaf = self.rec("user", leaf, body, out, agent=agent)
        block = {"type": "text", "text": self.text(r.randint(200, 2500))}
        self.assistant(leaf, block, self.ident("msg_01", 22), self.ident("req_011C", 18),
                       self.usage(), "end_turn", out, agent)
        self.sub_files.append((agent, out, {"agentType": "general-purpose",
                                            "description": " ".join(r.choices(WORDS, k=4))}))
        return agent

    # ---- turns and sessions ---------------------------------------------------------------
    def tool_round(self, leaf):
        """One API response: [thinking] [text] tool_use x1 (or x2-4 parallel), then the results."""
        r, mid, rid, usage = self.rng, self.ident("msg_01", 22), self.ident("req_011C", 18), self.usage()
        if r.random() < 0.5:
            block = {"type": "thinking", "thinking": self.text(r.randint(100, 3000)),
                     "signature": self.sigpool[:r.randint(200, 2000)]}
            leaf = self.assistant(leaf, block, mid, rid, usage, "tool_use")
        if r.random() < 0.4:
            block = {"type": "text", "text": self.text(r.randint(40, 600))}
            leaf = self.assistant(leaf, block, mid, rid, usage, "tool_use")
        calls = []
        for _ in range(1 if r.random() < 0.8 else r.randint(2, 4)):
            name = r.choice(TOOLS if self.agents else TOOLS[:-1])
            tool_id, inp = self.ident("toolu_01", 22), self.tool_input(name)
            block = {"type": "tool_use", "id": tool_id, "name": name, "input": inp}
            leaf = self.assistant(leaf, block, mid, rid, usage, "tool_use")
            calls.append((name, inp, tool_id, leaf))
        for name, inp, tool_id, tu in calls:  # each result hangs off its own tool_use
            self.progress(name, tool_id, tu)
            leaf = self.tool_result(name, inp, tool_id, tu)
        return leaf  # the next record continues from the LAST result

    def turn(self):
        r = self.rng
        if self.leaf and r.random() < 1 / 200:  # compaction
            self.tick(1000, 60000)
            b = self.system(None, "compact_boundary", {
                "logicalParentUuid": self.leaf, "content": "Conversation compacted", "isMeta": False,
                "level": "info", "compactMetadata": {"trigger": "auto", "preTokens": r.randint(150000, 170000)}})
            summary = ("This session is being continued from a previous conversation that ran out "
                       "of context. The conversation is summarized below:\n" + self.text(r.randint(3000, 12000)))
            self.leaf = self.rec("user", b, {"message": {"role": "user", "content": summary},
                                             "isVisibleInTranscriptOnly": True, "isCompactSummary": True})
        self.tick(5000, 600000)
        start, prompt = self.t, self.uid()
        if r.random() < 0.8:
            self.emit({"type": "file-history-snapshot", "messageId": prompt, "snapshot": {
                "messageId": prompt, "trackedFileBackups": {}, "timestamp": iso(self.t)},
                "isSnapshotUpdate": False}, self.main)
        self.last_prompt = " ".join(r.choices(WORDS, k=r.randint(4, 60)))
        leaf = self.rec("user", self.leaf, {"message": {"role": "user", "content": self.last_prompt}}, uuid=prompt)
        api_errors = r.randint(1, 3) if r.random() < 1 / 300 else 0
        self.tick(1000 * (api_errors * 3 + 1), 1000 * (api_errors * 3 + 5))  # retries happen here
        n0 = self.lines
        for _ in range(min(40, int(r.expovariate(1 / (4 if self.long else 2))))):
            leaf = self.tool_round(leaf)
        mid, rid = self.ident("msg_01", 22), self.ident("req_011C", 18)
        leaf = self.assistant(leaf, {"type": "text", "text": self.text(r.randint(40, 2500))},
                              mid, rid, self.usage(), "end_turn")
        self.last_asst = leaf
        if r.random() < 1 / 400:  # synthetic placeholder
            self.tick(100, 2000)
            msg = {"id": self.uid(), "container": None, "model": "<synthetic>", "role": "assistant",
                   "stop_reason": "stop_sequence", "stop_sequence": "", "type": "message",
                   "usage": self.usage(zero=True), "content": [{"type": "text", "text": r.choice((
                       "No response requested.",
                       'API Error: 500 {"type":"error","error":{"type":"api_error","message":"Internal server error"}}'))}]}
            leaf = self.rec("assistant", leaf, {"message": msg, "isApiErrorMessage": True})
        for i in range(api_errors):  # late flush: parented on the prompt, older timestamps
            status = r.choice((429, 429, 529, 500))
            leaf = self.system(prompt if i == 0 else leaf, "api_error", {
                "level": "error", "error": {"status": status, "message": f"{status} rate_limit_error"},
                "retryInMs": 2000 * (i + 1), "retryAttempt": i + 1, "maxRetries": 10,
                "source": "request_retry"}, ts=start + 1000 + 3000 * i)
        self.tick(100, 900)
        leaf = self.system(leaf, "stop_hook_summary", {
            "hookCount": 0, "hookInfos": [], "hookErrors": [], "preventedContinuation": False,
            "stopReason": "", "hasOutput": False, "level": "suggestion", "toolUseID": self.uid()})
        if r.random() < 0.3:
            leaf = self.system(leaf, "turn_duration", {"durationMs": self.t - start,
                                                       "messageCount": self.lines - n0, "isMeta": False})
        self.leaf = leaf

    def done(self):
        return self.bytes >= self.size_bytes or (self.max_lines and self.lines >= self.max_lines)

    def session(self, k):
        r = self.rng
        self.sid, self.ver, self.branch = self.uid(), r.choice(VERSIONS), r.choice(BRANCHES)
        self.model, self.cwd, self.t = r.choice(MODELS), f"/home/user/proj-{k}", BASE_MS + r.randint(0, 90 * 86400000)
        turns = min(500, 1 + int(r.lognormvariate(1.0, 1.3)))
        self.long, self.agents = turns >= 40, r.random() < 0.15
        self.main, self.sub_files, self.leaf = [], [], None
        for _ in range(turns):
            self.turn()
            if self.done():
                break
        if r.random() < 0.1:
            self.emit({"type": "custom-title", "customTitle": " ".join(r.choices(WORDS, k=3)),
                       "sessionId": self.sid}, self.main)
        if r.random() < 0.08:
            self.emit({"type": "summary", "summary": " ".join(r.choices(WORDS, k=6)).capitalize(),
                       "leafUuid": self.last_asst}, self.main)
        self.emit({"type": "last-prompt", "lastPrompt": self.last_prompt[:200], "sessionId": self.sid}, self.main)
        proj = os.path.join(self.out, f"-home-user-proj-{k}")
        self.write(os.path.join(proj, self.sid + ".jsonl"), self.main)
        for agent, lines, meta in self.sub_files:
            sub = os.path.join(proj, self.sid, "subagents", f"agent-{agent}")
            self.write(sub + ".jsonl", lines)
            with open(sub + ".meta.json", "w") as f:
                f.write(DUMPS(meta))

    def write(self, path, lines):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(b"\n".join(lines) + b"\n")
        self.files += 1

    def run(self):
        while not self.done():
            self.session(min(9, int(self.rng.expovariate(1 / 3))))  # skewed over ~10 projects


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--size-mb", type=float, default=200)
    ap.add_argument("--records", type=int, default=0, help="stop after this many lines too")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tool-result-kb", type=float, default=2, help="median tool result size")
    a = ap.parse_args()
    t0 = time.perf_counter()
    g = Gen(a.out_dir, a.seed, int(a.size_mb * 1024 * 1024), a.records, a.tool_result_kb)
    g.run()
    print(f"files={g.files} lines={g.lines} bytes={g.bytes} seconds={time.perf_counter() - t0:.2f}")


if __name__ == "__main__":
    main()
