"""Claude Code against a third-party model provider, with the real binary.

Users run Claude Code on GLM-5 (and DeepSeek, Kimi, ...) through
ANTHROPIC_BASE_URL. Such a provider answers with its own model name and with
``message.id`` values that do not start with ``msg_`` (GLM: 32 characters,
a timestamp and hex digits; OpenAI-style gateways: ``chatcmpl-...``), and
its thinking blocks carry text and no signature. Here the real binary writes
such a session for real, against a fake provider on loopback: a fresh
``claude -p`` turn with a thinking block and a tool call (Read), then a
``--resume`` turn. A resume of it must send every user and assistant message.

What Claude Code 2.1.332 sends besides ``messages`` (read in the binary,
checked here):

- ``diagnostics: {previous_message_id: ...}`` only when it takes the API for
  Anthropic's (no ANTHROPIC_BASE_URL, api.anthropic.com, or
  ``_CLAUDE_CODE_ASSUME_FIRST_PARTY_BASE_URL``), and ``thread`` (Message
  Threads) never for another host. Behind a third-party base URL neither key
  is sent: nothing there can poison a resume.
- The id it would send is that of the last assistant record that is a real
  API reply: not ``isApiErrorMessage``, and either carrying a ``requestId``
  (the ``request-id`` response header) or, without one, an id starting with
  ``msg_`` and a model other than ``<synthetic>``. So a provider id is sent
  when its response had a ``request-id`` header, else ``null``; a synthetic
  API-error record is skipped.

Set SESSION_INDEX_WRITE_THIRD_PARTY_FIXTURES=1 to copy the transcripts the
binary writes (and what the resumes sent) to tests/fixtures/third_party/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from indexer.repair import oracle

try:
    CLAUDE = oracle.find_claude()
except oracle.NoClaudeBinary:
    CLAUDE = None

FIXTURES = Path(__file__).parent / "fixtures" / "third_party"
WRITE_FIXTURES = bool(os.environ.get("SESSION_INDEX_WRITE_THIRD_PARTY_FIXTURES"))

pytestmark = [pytest.mark.oracle,
              pytest.mark.skipif(CLAUDE is None, reason="no Claude Code binary")]

MODEL = "glm-5"
GLM_ID_1 = "20251203151533d1f2a0c4e5b94d7e01"   # GLM style: timestamp + hex, 32 chars
GLM_ID_2 = "2025120315153872b8a1f3c5d64e2b9a"
CHATCMPL_ID = "chatcmpl-9f8e7d6c5b4a39281706f5e4"  # an OpenAI-style gateway's id
GLM_ID_HELLO = "2025120316020511c4d2e8f0a3b5c7d9"
TOOL_ID = "call_7f3a9c2e1b4d4e8f"                  # GLM tool call ids: call_...
PING = oracle.PING
FIRST_PARTY = {"_CLAUDE_CODE_ASSUME_FIRST_PARTY_BASE_URL": "1"}


# --- A fake third-party provider -----------------------------------------

def _last_user_text(body: dict) -> str:
    """The texts and tool_result ids of the request's last user message."""
    for m in reversed(body.get("messages") or []):
        if m.get("role") != "user":
            continue
        content = m.get("content")
        if isinstance(content, str):
            return content
        return "\n".join(str(b.get("text") or b.get("tool_use_id") or "")
                         for b in content or [] if isinstance(b, dict))
    return ""


class Provider(oracle.FakeMessagesAPI):
    """oracle's fake Messages API in the manner of a third-party provider:
    ``reply(body)`` picks each answer; the model is always ``glm-5``, a
    ``request-id`` header is sent only with ``request_ids``. ``take`` keeps
    the Messages requests."""

    def __init__(self, reply, request_ids: bool = False):
        super().__init__(reply, model=MODEL, request_ids=request_ids and "req_glm_")

    def take(self) -> list[dict]:
        return [r for r in super().take() if r["path"].endswith("/v1/messages")]


def glm_reply(work: Path):
    """The GLM session's answers, chosen by the last user message."""
    def reply(body):
        last = _last_user_text(body)
        if PING in last:
            return {"id": "chatcmpl-pong", "blocks": [{"type": "text", "text": "pong"}]}
        if TOOL_ID in last:
            return {"id": GLM_ID_2, "blocks": [
                {"type": "text", "text": "The file says the answer is 42."}]}
        if "Read notes.txt" in last:
            return {"id": GLM_ID_1, "blocks": [
                {"type": "thinking", "thinking": "I should read the file first."},
                {"type": "text", "text": "Let me read it."},
                {"type": "tool_use", "id": TOOL_ID, "name": "Read",
                 "input": {"file_path": str(work / "notes.txt")}}]}
        if "twice" in last:
            return {"id": CHATCMPL_ID, "blocks": [{"type": "text", "text": "Twice 42 is 84."}]}
        return {"id": uuid.uuid4().hex, "blocks": [{"type": "text", "text": "ok"}]}
    return reply


def api_error_reply(body):
    """A first turn answered, the second refused with a 400: the CLI writes
    its own API-error assistant record (model "<synthetic>")."""
    last = _last_user_text(body)
    if PING in last:
        return {"id": "chatcmpl-pong", "blocks": [{"type": "text", "text": "pong"}]}
    if "count to three" in last:
        return {"status": 400, "request_id": "req_glm_error",
                "error": "glm-5: the upstream model returned an error (code 1210)"}
    return {"id": GLM_ID_HELLO, "blocks": [{"type": "text", "text": "Hello! How can I help?"}]}


# --- Running the binary ---------------------------------------------------

@dataclass
class Session:
    """A temporary HOME, CLAUDE_CONFIG_DIR and working directory."""
    root: Path
    session_id: str | None = None
    results: list = field(default_factory=list)

    @property
    def config(self) -> Path:
        return self.root / "config"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def transcript(self) -> Path:
        return (self.config / "projects" / oracle.project_folder(os.path.realpath(self.work))
                / f"{self.session_id}.jsonl")


def new_session(root: Path) -> Session:
    s = Session(root)
    s.work.mkdir(parents=True)
    (s.work / "notes.txt").write_text("the answer is 42\n")
    return s


def run_claude(api: Provider, s: Session, *args: str, env: dict | None = None) -> dict:
    """One ``claude -p`` run in ``s``: its JSON result."""
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("ANTHROPIC_", "CLAUDE_", "_CLAUDE_", "AWS_", "GOOGLE_"))}
    environ.update({
        "HOME": str(s.root),
        "CLAUDE_CONFIG_DIR": str(s.config),
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{api.port}",
        "ANTHROPIC_API_KEY": "sk-third-party-not-a-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        **(env or {}),
    })
    done = subprocess.run([CLAUDE, *args, "--model", MODEL, "--output-format", "json"],
                          cwd=os.path.realpath(s.work), env=environ, capture_output=True,
                          text=True, timeout=oracle.RUN_TIMEOUT, stdin=subprocess.DEVNULL)
    try:
        result = json.loads(done.stdout)
    except ValueError:
        raise AssertionError(f"no JSON result (exit {done.returncode}): "
                             f"{done.stdout[-500:]} {done.stderr[-1000:]}")
    s.session_id = s.session_id or result.get("session_id")
    s.results.append(result)
    return result


def resume_request(api: Provider, s: Session, env: dict | None = None) -> dict:
    """Resume a copy of the session with the ping prompt: the body of the
    request that carries it (the transcript itself is left as it was)."""
    saved = s.transcript.read_bytes()
    api.take()
    try:
        run_claude(api, s, "--resume", s.session_id, "-p", PING, env=env)
        sent = [r["body"] for r in api.take() if PING in json.dumps(r["body"].get("messages"))]
    finally:
        s.transcript.write_bytes(saved)
    assert sent, "the resume sent no request holding the prompt"
    return sent[0]


def make_glm_session(root: Path, request_ids: bool = False) -> Session:
    """A fresh ``claude -p`` turn (thinking, text, a Read call, the answer),
    then a ``--resume`` turn, all answered by the fake GLM-5."""
    s = new_session(root)
    with Provider(glm_reply(s.work), request_ids) as api:
        first = run_claude(api, s, "-p", "Read notes.txt and tell me what it says")
        assert first["subtype"] == "success" and not first["is_error"], first
        second = run_claude(api, s, "--resume", s.session_id, "-p", "What is twice that?")
        assert second["result"] == "Twice 42 is 84.", second
    return s


def make_api_error_session(root: Path) -> Session:
    s = new_session(root)
    with Provider(api_error_reply, request_ids=True) as api:
        assert run_claude(api, s, "-p", "Say hello")["result"] == "Hello! How can I help?"
        failed = run_claude(api, s, "--resume", s.session_id, "-p", "Now count to three")
        assert failed["is_error"] and failed["result"].startswith("API Error: 400"), failed
    return s


# --- Reading transcripts and requests --------------------------------------

def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def chain_messages(recs: list[dict]) -> list[dict]:
    """The user and assistant records in file order (these sessions are one
    straight chain), as API messages: assistant records that share a
    ``message.id`` are one message."""
    out: list[dict] = []
    for r in recs:
        if r.get("type") not in ("user", "assistant") or r.get("isMeta"):
            continue
        m = r["message"]
        if (r["type"] == "assistant" and out and out[-1]["role"] == "assistant"
                and out[-1]["id"] == m["id"]):
            out[-1]["content"] += m["content"]
            continue
        content = m["content"]
        out.append({"role": r["type"], "id": m.get("id"), "model": m.get("model"),
                    "synthetic": m.get("model") == "<synthetic>",
                    "content": list(content) if isinstance(content, list) else content})
    return out


def strip_cache_control(content):
    if isinstance(content, str):
        return content
    return [{k: v for k, v in b.items() if k != "cache_control"} for b in content]


def texts(content) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [b.get("text") for b in content if b.get("type") == "text"]


def tool_result_ids(content) -> list[str]:
    if isinstance(content, str):
        return []
    return [b["tool_use_id"] for b in content if b.get("type") == "tool_result"]


def assert_sends_every_message(body: dict, recs: list[dict]):
    """Every assistant message of the transcript is sent unchanged and in
    order, but for the CLI's own synthetic ones; every user prompt and tool
    result is sent, in order; the ping comes last."""
    sent = [m for m in body["messages"] if m["role"] in ("user", "assistant")]
    expected = chain_messages(recs)
    sent_assistant = [strip_cache_control(m["content"]) for m in sent
                      if m["role"] == "assistant"]
    kept_assistant = [m["content"] for m in expected
                      if m["role"] == "assistant" and not m["synthetic"]]
    assert sent_assistant == kept_assistant
    sent_user_parts = [part for m in sent if m["role"] == "user"
                       for part in texts(m["content"]) + tool_result_ids(m["content"])]
    wanted = []
    for m in expected:
        if m["role"] != "user":
            continue
        if isinstance(m["content"], str):
            wanted.append(m["content"])
        else:
            wanted += [b.get("text") or b.get("tool_use_id") for b in m["content"]]
    it = iter(sent_user_parts)   # in order, as a subsequence (reminders are added)
    missing = [w for w in wanted if not any(w == p or w in str(p) for p in it)]
    assert missing == [], (missing, sent_user_parts)
    assert PING in texts(sent[-1]["content"])[-1]


def save_fixture(s: Session, name: str, resumes: dict):
    if not WRITE_FIXTURES:
        return
    FIXTURES.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(s.transcript, FIXTURES / f"{name}.jsonl")
    version = oracle.claude_version(CLAUDE)
    sent = {"claude_version": version, "session_id": s.session_id, "resumes": {
        label: {"env": env_label, "messages": body["messages"],
                "diagnostics": body.get("diagnostics", "(not sent)"),
                "thread": body.get("thread", "(not sent)")}
        for label, (env_label, body) in resumes.items()}}
    (FIXTURES / f"{name}.resume.json").write_text(json.dumps(sent, indent=1) + "\n")


# --- The GLM-5 session ------------------------------------------------------

@pytest.fixture(scope="module")
def glm(tmp_path_factory):
    return make_glm_session(tmp_path_factory.mktemp("glm"))


@pytest.fixture(scope="module")
def glm_resumes(glm):
    with Provider(glm_reply(glm.work)) as api:
        plain = resume_request(api, glm)
        first_party = resume_request(api, glm, env=FIRST_PARTY)
    save_fixture(glm, "glm5_session", {
        "third_party": ("ANTHROPIC_BASE_URL=http://127.0.0.1:PORT", plain),
        "assumed_first_party": ("the same, and _CLAUDE_CODE_ASSUME_FIRST_PARTY_BASE_URL=1",
                                first_party)})
    return plain, first_party


def test_the_binary_writes_the_providers_ids_and_model(glm):
    recs = records(glm.transcript)
    assistants = [r for r in recs if r.get("type") == "assistant"]
    assert [r["message"]["id"] for r in assistants] == [GLM_ID_1] * 3 + [GLM_ID_2, CHATCMPL_ID]
    assert {r["message"]["model"] for r in assistants} == {MODEL}
    assert not any(r.get("isApiErrorMessage") for r in assistants)
    assert all("requestId" not in r for r in assistants)   # no request-id header was sent
    thinking = assistants[0]["message"]["content"][0]
    assert thinking == {"type": "thinking", "thinking": "I should read the file first.",
                        "signature": ""}
    assert [m["role"] for m in chain_messages(recs)] == [
        "user", "assistant", "user", "assistant", "user", "assistant"]


def test_a_resume_sends_every_user_and_assistant_message(glm, glm_resumes):
    plain, _ = glm_resumes
    assert_sends_every_message(plain, records(glm.transcript))
    assert [m["role"] for m in plain["messages"] if m["role"] != "system"] == [
        "user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert plain["model"] == MODEL


def test_behind_a_third_party_base_url_no_previous_message_id_is_sent(glm_resumes):
    plain, _ = glm_resumes
    assert "diagnostics" not in plain and "thread" not in plain


def test_as_first_party_the_provider_ids_give_a_null_previous_message_id(glm, glm_resumes):
    # Without a requestId, only an id starting with msg_ counts as a reply.
    _, first_party = glm_resumes
    assert first_party["diagnostics"] == {"previous_message_id": None}
    assert "thread" not in first_party
    assert_sends_every_message(first_party, records(glm.transcript))


def test_with_request_ids_the_last_provider_id_is_sent_as_previous_message_id(tmp_path):
    s = make_glm_session(tmp_path, request_ids=True)
    recs = records(s.transcript)
    assert [r["requestId"] for r in recs if r.get("type") == "assistant"] == [
        "req_glm_0001"] * 3 + ["req_glm_0002", "req_glm_0003"]
    with Provider(glm_reply(s.work), request_ids=True) as api:
        plain = resume_request(api, s)
        first_party = resume_request(api, s, env=FIRST_PARTY)
    save_fixture(s, "glm5_session_request_ids", {
        "third_party": ("ANTHROPIC_BASE_URL=http://127.0.0.1:PORT", plain),
        "assumed_first_party": ("the same, and _CLAUDE_CODE_ASSUME_FIRST_PARTY_BASE_URL=1",
                                first_party)})
    assert "diagnostics" not in plain and "thread" not in plain
    assert first_party["diagnostics"] == {"previous_message_id": CHATCMPL_ID}
    assert_sends_every_message(plain, recs)


# --- A synthetic API-error record written by the binary ----------------------

def test_an_api_error_record_is_synthetic_and_skipped_on_resume(tmp_path):
    s = make_api_error_session(tmp_path)
    recs = records(s.transcript)
    error = [r for r in recs if r.get("type") == "assistant"][-1]
    assert error["isApiErrorMessage"] is True
    assert error["message"]["model"] == "<synthetic>"
    assert oracle.UUID_RE.match(error["message"]["id"])
    assert error["message"]["content"] == [{"type": "text", "text": (
        "API Error: 400 glm-5: the upstream model returned an error (code 1210)")}]
    assert error["message"]["usage"]["input_tokens"] == 0
    assert error["message"]["usage"]["output_tokens"] == 0
    assert error["requestId"] == "req_glm_error"   # the failed request's id, yet skipped
    with Provider(api_error_reply, request_ids=True) as api:
        plain = resume_request(api, s)
        first_party = resume_request(api, s, env=FIRST_PARTY)
    save_fixture(s, "glm5_api_error_synthetic", {
        "third_party": ("ANTHROPIC_BASE_URL=http://127.0.0.1:PORT", plain),
        "assumed_first_party": ("the same, and _CLAUDE_CODE_ASSUME_FIRST_PARTY_BASE_URL=1",
                                first_party)})
    for body in (plain, first_party):
        assert_sends_every_message(body, recs)
        sent = [m for m in body["messages"] if m["role"] != "system"]
        # The synthetic answer is not sent: the failed prompt and the new one
        # go as one user message.
        assert [m["role"] for m in sent] == ["user", "assistant", "user"]
        assert texts(sent[-1]["content"])[-2:] == ["Now count to three\n", PING]
    assert "diagnostics" not in plain
    # The synthetic tail is skipped: the last real reply's id is named.
    assert first_party["diagnostics"] == {"previous_message_id": GLM_ID_HELLO}


# --- The saved fixtures, through indexer/repair/oracle.py ---------------------

@pytest.mark.parametrize("name", ["glm5_session", "glm5_session_request_ids",
                                  "glm5_api_error_synthetic"])
def test_the_saved_fixture_resumes_through_the_project_oracle(name):
    path = FIXTURES / f"{name}.jsonl"
    if not path.exists():
        pytest.skip(f"{path} is not written yet")
    recs = records(path)
    sid = next(r["sessionId"] for r in recs if r.get("sessionId"))
    with oracle.FakeMessagesAPI() as api:
        sent = oracle.resume_sent(path.read_bytes(), sid, api, CLAUDE)
    assert not sent.compacted
    kept = [m for m in chain_messages(recs) if not m["synthetic"]]
    assert sent.assistant_texts() == [t for m in kept if m["role"] == "assistant"
                                      for t in texts(m["content"]) if t]
    assert sent.tool_use_ids() == [b["id"] for m in kept if m["role"] == "assistant"
                                   for b in m["content"] if b.get("type") == "tool_use"]
    assert sent.tool_result_ids() == sent.tool_use_ids()
    assert_sends_every_message({"messages": sent.messages}, recs)
