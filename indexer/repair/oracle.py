"""The real Claude Code as the test oracle: what a ``--resume`` really loads.

The Claude Code binary (on PATH, or the one the Agent SDK wheel bundles) is
run against a fake Messages API on loopback. It resumes a *copy* of a
transcript in a temporary config dir and sends the conversation it loaded as
the ``messages`` of its first request: that body is the ground truth for what
a resume keeps. Nothing here talks to any other network address, and the
original transcript is never opened for writing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from indexer.ingest.extras import install_hint

PING = "session-index-oracle-ping"
REPLY = "pong"
RUN_TIMEOUT = 120


class NoClaudeBinary(Exception):
    """Neither --claude, nor `claude` on PATH, nor the SDK's bundled binary."""


class OracleFailed(Exception):
    """The CLI ran but sent no request holding the resumed conversation."""


def find_claude(explicit: str | None = None) -> str:
    """The Claude Code binary to ask: --claude, else `claude` on PATH, else
    the one bundled in the claude-agent-sdk wheel."""
    if explicit:
        path = shutil.which(explicit) or explicit
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise NoClaudeBinary(f"not an executable file: {explicit}")
        return path
    on_path = shutil.which("claude")
    if on_path:
        return on_path
    try:
        import importlib.util   # (only when claude is not on PATH)
        spec = importlib.util.find_spec("claude_agent_sdk")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        bundled = Path(spec.origin).parent / "_bundled" / "claude"
        if bundled.is_file() and os.access(bundled, os.X_OK):
            return str(bundled)
    raise NoClaudeBinary(
        "no Claude Code binary: put `claude` on PATH, pass --claude PATH, "
        f"or {install_hint('verify')} (it bundles one)")


def claude_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip().split(" ")[0]


def _sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _block_events(index: int, block: dict) -> list[bytes]:
    """The stream events of one content block: text, thinking (with its
    signature when it has one, as Anthropic's API sends it; with none, as a
    third-party provider does) or tool_use."""
    if block["type"] == "text":
        start, delta = {"type": "text", "text": ""}, {"type": "text_delta",
                                                      "text": block["text"]}
    elif block["type"] == "thinking":
        start, delta = {"type": "thinking", "thinking": ""}, {
            "type": "thinking_delta", "thinking": block["thinking"]}
    else:
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
    signed = ([_sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                            "delta": {"type": "signature_delta",
                                                      "signature": block["signature"]}})]
              if block["type"] == "thinking" and block.get("signature") else [])
    return [_sse("content_block_start", {"type": "content_block_start", "index": index,
                                         "content_block": start}),
            _sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                         "delta": delta}),
            *signed,
            _sse("content_block_stop", {"type": "content_block_stop", "index": index})]


def _reply_events(message: dict) -> bytes:
    """A streamed reply: ``message`` as a non-streamed answer has it."""
    blocks, stop = message["content"], message["stop_reason"]
    head = dict(message, content=[], stop_reason=None)
    return b"".join([
        _sse("message_start", {"type": "message_start", "message": head}),
        *(e for i, b in enumerate(blocks) for e in _block_events(i, b)),
        _sse("message_delta", {"type": "message_delta",
                               "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": message["usage"]["output_tokens"]}}),
        _sse("message_stop", {"type": "message_stop"}),
    ])


def one_word(body: dict) -> dict:
    """FakeMessagesAPI's default answer: a one-word text reply, msg_ id."""
    return {"id": "msg_oracle", "blocks": [{"type": "text", "text": REPLY}]}


# The words of Claude Code's compaction prompt (manual /compact and
# auto-compaction alike, 2.1.332) that ask for a summary.
SUMMARY_ASKED = "Please provide your summary based on the conversation so far"
SUMMARY = "The user asked about notes.txt; it says the answer is 42."


def asks_for_summary(body: dict) -> bool:
    """Whether a request is the CLI's compaction request."""
    for m in reversed(body.get("messages") or []):
        if m.get("role") == "user":
            return SUMMARY_ASKED in json.dumps(m.get("content"))
    return False


def summarising(reply=one_word, summary: str = SUMMARY, message_id: str = "msg_summary"):
    """A reply function that answers a compaction request with ``summary``
    (inside the ``<summary>`` tags the CLI looks for) and every other
    request with ``reply(body)``."""
    def answer(body: dict) -> dict:
        if asks_for_summary(body):
            return {"id": message_id, "blocks": [{"type": "text", "text": (
                f"<analysis>Short conversation.</analysis>\n<summary>{summary}</summary>")}]}
        return reply(body)
    return answer


def scripted(*answers, then=one_word):
    """A reply function that answers the Nth ``POST /v1/messages`` with
    ``answers[N]`` (an answer dict, or a function of the request body giving
    one) and every request after them with ``then(body)``. ``calls`` counts
    the requests answered."""
    lock = threading.Lock()

    def reply(body: dict) -> dict:
        with lock:
            n = reply.calls
            reply.calls += 1
        answer = answers[n] if n < len(answers) else then
        return answer(body) if callable(answer) else answer

    reply.calls = 0
    return reply


# What Anthropic's Messages API answers to thinking sent back changed (issue
# 27; the texts of anthropics/claude-code #63147, #68768, #21726): in the
# latest assistant message a thinking block must be exactly what the API
# returned; one with no signature, or one the API never signed, is refused.
THINKING_MODIFIED = ("messages.{i}.content.{j}: `thinking` or `redacted_thinking` blocks in the "
                     "latest assistant message cannot be modified. These blocks must remain as "
                     "they were in the original response.")
SIGNATURE_REQUIRED = "messages.{i}.content.{j}.thinking.signature: Field required"
SIGNATURE_INVALID = "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"


def thinking_refusal(body: dict, returned: dict) -> str | None:
    """The 400's message the real API gives a request whose latest assistant
    message carries a thinking block changed from what the API returned
    (``returned``: each signature it gave, with the thinking text it gave
    with it), or None when it accepts the request."""
    messages = body.get("messages") or []
    latest = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"),
                 default=None)
    if latest is None or not isinstance(messages[latest].get("content"), list):
        return None
    for j, block in enumerate(messages[latest]["content"]):
        if not isinstance(block, dict) or block.get("type") != "thinking":
            continue
        if not block.get("signature"):
            return (SIGNATURE_REQUIRED if "signature" not in block
                    else SIGNATURE_INVALID).format(i=latest, j=j)
        if block["signature"] not in returned:
            return SIGNATURE_INVALID.format(i=latest, j=j)
        if returned[block["signature"]] != block.get("thinking"):
            return THINKING_MODIFIED.format(i=latest, j=j)
    return None


def refusing_changed_thinking(returned: dict, reply=one_word):
    """A reply function that refuses (400, the real API's text) a request
    whose latest assistant message carries a thinking block changed from
    what the API returned (thinking_refusal), and answers any other with
    ``reply(body)``; the thinking blocks of its own answers are added to
    ``returned``. ``refused`` lists the refusals' messages."""
    def answer(body: dict) -> dict:
        refusal = thinking_refusal(body, answer.returned)
        if refusal:
            answer.refused.append(refusal)
            return {"status": 400, "error": refusal}
        given = reply(body)
        for block in given.get("blocks") or []:
            if block.get("type") == "thinking" and block.get("signature"):
                answer.returned[block["signature"]] = block.get("thinking", "")
        return given

    answer.returned, answer.refused = dict(returned), []
    return answer


class FakeMessagesAPI:
    """A Messages API on 127.0.0.1 that records every request (path,
    headers, body) and answers each ``POST /v1/messages`` with
    ``reply(body)``: a dict of ``id`` and ``blocks`` (text, thinking,
    tool_use), or of ``status`` and ``error`` (and ``type``, the error's
    type) for an error answer; either may carry ``headers`` to send with it
    (``retry-after``, say) and a success ``usage`` (merged into the default
    one token in, one out: a large ``input_tokens`` makes the CLI think its
    context is full). ``model``
    names the model of every answer (default: the one asked for); with
    ``request_ids`` (True, or the ids' prefix) each answer carries a
    ``request-id`` header (the answer's ``request_id``, else the prefix and
    a counter), as the Anthropic API and some providers send."""

    def __init__(self, reply=one_word, model: str | None = None,
                 request_ids: bool | str = False):
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self._count = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                try:
                    request = json.loads(body)
                except ValueError:
                    request = {}
                path = self.path.split("?")[0]
                with api._lock:
                    api.requests.append({"path": path, "headers": dict(self.headers),
                                         "body": request})
                if path.endswith("/count_tokens"):
                    return self._json({"input_tokens": 1})
                if not path.endswith("/v1/messages"):
                    return self._json({"type": "error", "error": {"type": "not_found_error",
                                                                 "message": "not here"}}, 404)
                answer = reply(request)
                with api._lock:
                    api._count += 1
                    prefix = request_ids if isinstance(request_ids, str) else "req_oracle_"
                    rid = (answer.get("request_id") or f"{prefix}{api._count:04d}"
                           if request_ids else None)
                extra = answer.get("headers") or {}
                if answer.get("status", 200) != 200:
                    return self._json({"type": "error", "error": {
                        "type": answer.get("type", "invalid_request_error"),
                        "message": answer["error"]}}, answer["status"], rid, extra)
                blocks = answer["blocks"]
                message = {
                    "id": answer["id"], "type": "message", "role": "assistant",
                    "model": model or request.get("model") or "claude-oracle",
                    "content": blocks, "stop_sequence": None,
                    "stop_reason": "tool_use" if any(b["type"] == "tool_use" for b in blocks)
                    else "end_turn",
                    "usage": {"input_tokens": 1, "output_tokens": 1, **answer.get("usage", {})}}
                if not request.get("stream"):
                    return self._json(message, 200, rid, extra)
                self._send(_reply_events(message), "text/event-stream", 200, rid, extra)

            def do_GET(self):
                self._json({"type": "error", "error": {"type": "not_found_error",
                                                      "message": "not here"}}, 404)

            def _json(self, data, status=200, rid=None, extra=None):
                self._send(json.dumps(data).encode(), "application/json", status, rid, extra)

            def _send(self, payload: bytes, content_type: str, status: int, rid,
                      extra=None):
                self.send_response(status)
                self.send_header("content-type", content_type)
                if rid:
                    self.send_header("request-id", rid)
                for name, value in (extra or {}).items():
                    self.send_header(name, str(value))
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()

    def take(self) -> list[dict]:
        with self._lock:
            taken, self.requests = self.requests, []
        return taken


def project_folder(cwd: str) -> str:
    """Claude Code's folder name for a working directory."""
    return re.sub(r"[^A-Za-z0-9]", "-", cwd)


@dataclass
class Sent:
    """What one resume sent: the loaded conversation's messages."""
    messages: list = field(default_factory=list)
    compacted: bool = False        # the history came from the compaction request
    requests: int = 0
    exit_code: int | None = None
    stderr: str = ""

    def tool_use_ids(self) -> list[str]:
        return [b.get("id") for m in self.messages if m.get("role") == "assistant"
                for b in _blocks(m) if b.get("type") == "tool_use"]

    def tool_result_ids(self) -> list[str]:
        return [b.get("tool_use_id") for m in self.messages if m.get("role") == "user"
                for b in _blocks(m) if b.get("type") == "tool_result"]

    def assistant_texts(self) -> list[str]:
        return [b.get("text") for m in self.messages if m.get("role") == "assistant"
                for b in _blocks(m) if b.get("type") == "text" and b.get("text")]


def _blocks(message: dict) -> list[dict]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _holds_ping(body: dict) -> bool:
    return PING in json.dumps(body.get("messages") or [])


UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)


def resume_id(session_id: str | None) -> str:
    """The id to resume a copy by: the CLI only resumes by a UUID, so a
    transcript whose session id is not one is resumed under a UUID derived
    from it (the file name is what the CLI looks up)."""
    if session_id and UUID_RE.match(session_id):
        return session_id
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"session-index:{session_id}"))


@dataclass
class Resumed:
    """One ``claude --resume`` run: every request the fake API got (path,
    headers, body), the exit code (None: timed out) and stderr's tail."""
    requests: list = field(default_factory=list)
    exit_code: int | None = None
    stderr: str = ""
    stdout: str = ""

    def pinged(self) -> list[dict]:
        """The requests whose messages hold the prompt, in order."""
        return [r for r in self.requests if _holds_ping(r["body"])]


# The environment of every resume: the variables of these prefixes are not
# inherited (a developer's own key or provider must not leak in).
_OWN_ENV_PREFIXES = ("ANTHROPIC_", "CLAUDE_", "_CLAUDE_", "AWS_", "GOOGLE_", "CLOUD_ML_",
                     "VERTEX_", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy",
                     "NODE_EXTRA_CA_CERTS")


def environment(home, config, api: FakeMessagesAPI, env: dict | None = None) -> dict:
    """The environment of a CLI run against ``api``: HOME and the config dir
    given, a dummy API key, no traffic but to the fake API, none of the
    developer's own (_OWN_ENV_PREFIXES); ``env`` laid over it (None removes
    a variable)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(_OWN_ENV_PREFIXES)}
    environ.update({
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(config),
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{api.port}",
        "ANTHROPIC_API_KEY": "sk-ant-oracle-not-a-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "NO_PROXY": "127.0.0.1,localhost",
    })
    for key, value in (env or {}).items():
        if value is None:
            environ.pop(key, None)
        else:
            environ[key] = value
    return environ


def run_resume(transcript: bytes, session_id: str, api: FakeMessagesAPI, binary: str,
               cwd: str | None = None, env: dict | None = None,
               settings: dict | None = None) -> Resumed:
    """Resume a copy of ``transcript`` (bytes) as ``session_id`` with the
    ping prompt, against ``api``. ``env`` is laid over the default
    environment (base URL on ``api``, a dummy API key); a None value removes
    a variable (e.g. ANTHROPIC_BASE_URL, to look first-party through a
    FirstPartyProxy). ``settings``: the CLI's global config (``.claude.json``
    in the config dir and in HOME), e.g. cached feature flags."""
    session_id = resume_id(session_id)
    with tempfile.TemporaryDirectory(prefix="session-index-oracle-") as tmp:
        config = Path(tmp, "config")
        work = Path(cwd) if cwd else Path(tmp, "work")
        work.mkdir(parents=True, exist_ok=True)
        real_work = os.path.realpath(work)
        folder = config / "projects" / project_folder(real_work)
        folder.mkdir(parents=True)
        (folder / f"{session_id}.jsonl").write_bytes(transcript)
        for where in (config, Path(tmp)) if settings is not None else ():
            (where / ".claude.json").write_text(json.dumps(settings))
        environ = environment(tmp, config, api, env)
        api.take()
        try:
            done = subprocess.run(
                [binary, "--resume", session_id, "-p", PING, "--output-format", "json"],
                cwd=real_work, env=environ, capture_output=True, text=True,
                timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL)
            code, stdout, stderr = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired:
            code, stdout, stderr = None, "", "timed out"
        return Resumed(api.take(), code, stderr[-2000:], stdout[-4000:])


def resume_sent(transcript: bytes, session_id: str, api: FakeMessagesAPI, binary: str,
                cwd: str | None = None) -> Sent:
    """Resume a copy of ``transcript`` (bytes) as ``session_id`` and return
    what the CLI sent. ``cwd``: the working directory to run from (a fresh
    temporary one by default; the transcript is placed in its project folder)."""
    run = run_resume(transcript, session_id, api, binary, cwd)
    code, stderr = run.exit_code, run.stderr
    requests = [r for r in run.requests if r["path"].endswith("/v1/messages")]
    sent = Sent(requests=len(requests), exit_code=code, stderr=stderr)
    pinged = [i for i, r in enumerate(requests) if _holds_ping(r["body"])]
    if not pinged:
        raise OracleFailed(
            f"the CLI sent no request holding the prompt (exit {code}): "
            + (stderr.strip().splitlines() or ["no output"])[-1][:300])
    at = pinged[0]
    before = [r["body"] for r in requests[:at]]
    ping_messages = requests[at]["body"].get("messages") or []
    # A long transcript is auto-compacted before the prompt is sent: the
    # compaction request (the one before it with the most messages) holds
    # the loaded history then.
    compaction = max(before, key=lambda b: len(b.get("messages") or []), default=None)
    if compaction is not None and len(compaction.get("messages") or []) >= len(ping_messages):
        sent.messages, sent.compacted = compaction.get("messages") or [], True
    else:
        sent.messages = ping_messages
    return sent
