"""What Claude Code sends as ``previous_message_id`` on a resume, asked of the real binary.

Seed 001: a resume gets the API's 400 ``diagnostics.previous_message_id: must be
the id from a prior /v1/messages response (starts with msg_)``. Whether it
does depends on the CLI's version, on whether it takes the API for Anthropic's
own, and on which assistant record's id it picks. ``probe`` resumes generated
transcripts (``KINDS``) under each way of reaching the API (``MODES``) and
reads the request that carries the prompt: the ``diagnostics`` key of its body
(absent, or ``previous_message_id``: an id or null). The fake API answers as
the real one is reported to (``api_answer``): a 400 with that message when the
id is a string that does not start with ``msg_``, else a reply.

First-party modes reach the fake through ``FirstPartyProxy`` (api.anthropic.com
on loopback, a throwaway CA); providers (Bedrock, Vertex, Foundry) are pointed
at the fake by their base-URL variables and skip their auth; nothing leaves
127.0.0.1. ``bench/previous_message_id.py`` prints the table for any binaries.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from indexer.repair import oracle
from indexer.repair.first_party import FirstPartyProxy

SESSION = "22222222-3333-4444-5555-666666666666"
API_ERROR_ID = "4f1c7c1e-2b7e-4c55-9d3c-0a0b0c0d0e0f"   # a <synthetic> record's UUID id
NO_RESPONSE_ID = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f0a0b0c0d"
GLM_ID = "2025120315153872b8a1f3c5d64e2b9a"             # a provider's id (GLM: 32 chars)
CHATCMPL_ID = "chatcmpl-9f8e7d6c5b4a39281706f5e4"        # an OpenAI-style gateway's id
# The API's answer to an id it did not issue (seed 001, word for word).
REJECTION = ("diagnostics.previous_message_id: must be the `id` from a prior "
             "/v1/messages response (starts with `msg_`)")


def _u(n: int) -> str:
    return f"bbbbbbbb-0000-0000-0000-{n:012d}"


def _record(n: int, type_: str, message: dict, **extra) -> dict:
    rec = {"parentUuid": _u(n - 1) if n > 1 else None, "isSidechain": False,
           "userType": "external", "cwd": "/tmp/probe", "sessionId": SESSION,
           "version": "2.1.332", "gitBranch": "", "uuid": _u(n),
           "timestamp": f"2026-09-01T00:00:{n:02d}.000Z", "type": type_, "message": message}
    rec.update(extra)
    return rec


def _prompt(n: int, text: str) -> dict:
    return _record(n, "user", {"role": "user", "content": text})


def _answer(n: int, mid: str, text: str, model: str = "claude-sonnet-4-5",
            request_id: str | None = None, **extra) -> dict:
    rec = _record(n, "assistant", {
        "id": mid, "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
        "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 2}}, **extra)
    if request_id:
        rec["requestId"] = request_id
    return rec


def _synthetic(n: int, mid: str, text: str, api_error: bool,
               request_id: str | None = None) -> dict:
    rec = _record(n, "assistant", {
        "id": mid, "type": "message", "role": "assistant", "model": "<synthetic>",
        "content": [{"type": "text", "text": text}], "stop_reason": "stop_sequence",
        "stop_sequence": "", "usage": {"input_tokens": 0, "output_tokens": 0}},
        isApiErrorMessage=api_error)
    if request_id:
        rec["requestId"] = request_id
    return rec


def _real_then(tail: dict | None, request_ids: bool = True) -> list[dict]:
    recs = [_prompt(1, "say hi"),
            _answer(2, "msg_01Probe1", "hi", request_id="req_01Probe1" if request_ids else None),
            _prompt(3, "say it again")]
    return recs + ([tail] if tail else [])


# The transcripts: name -> (what it is, records).
KINDS: dict[str, tuple[str, list[dict]]] = {
    "msg_tail": ("ends in a real reply (msg_ id, requestId)",
                 _real_then(_answer(4, "msg_01Probe2", "hi again", request_id="req_01Probe2"))),
    "msg_tail_no_request_id": ("ends in a real reply (msg_ id, no requestId)",
                               _real_then(_answer(4, "msg_01Probe2", "hi again"),
                                          request_ids=False)),
    "api_error_tail": ("ends in a <synthetic> API error (UUID id, isApiErrorMessage)",
                       _real_then(_synthetic(4, API_ERROR_ID, "API Error: 500", True))),
    "api_error_tail_request_id": ("the same, with the failed request's requestId",
                                  _real_then(_synthetic(4, API_ERROR_ID, "API Error: 500", True,
                                                        request_id="req_01Failed"))),
    "no_response_tail": ('ends in a <synthetic> "No response requested." (not an API error)',
                         _real_then(_synthetic(4, NO_RESPONSE_ID, "No response requested.",
                                               False))),
    "no_response_tail_request_id": ("the same, with a requestId",
                                    _real_then(_synthetic(4, NO_RESPONSE_ID,
                                                          "No response requested.", False,
                                                          request_id="req_01Placeholder"))),
    "only_synthetic": ("its one assistant record is a <synthetic> API error",
                       [_prompt(1, "say hi"),
                        _synthetic(2, API_ERROR_ID, "API Error: 500", True)]),
    "third_party": ("a provider's replies (glm-5, non-msg_ ids, no requestId)",
                    [_prompt(1, "say hi"), _answer(2, GLM_ID, "hi", model="glm-5"),
                     _prompt(3, "say it again"),
                     _answer(4, CHATCMPL_ID, "hi again", model="glm-5")]),
    "third_party_request_ids": ("the same, each reply with a requestId",
                                [_prompt(1, "say hi"),
                                 _answer(2, GLM_ID, "hi", model="glm-5",
                                         request_id="req_glm_0001"),
                                 _prompt(3, "say it again"),
                                 _answer(4, CHATCMPL_ID, "hi again", model="glm-5",
                                         request_id="req_glm_0002")]),
}


def jsonl(records: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


@dataclass(frozen=True)
class Mode:
    """A way of reaching the API: ``env`` laid over the oracle's default
    (loopback base URL, a dummy API key); ``first_party`` ones go through the
    FirstPartyProxy with no ANTHROPIC_BASE_URL; ``{fake}`` in a value is the
    fake API's URL. ``flags``: feature flags (GrowthBook) the CLI finds
    cached in its global config; it reads that cache only when
    nonessential traffic is allowed (the proxy refuses every host but
    api.anthropic.com, so it stays on loopback)."""
    description: str
    env: tuple = ()
    first_party: bool = False
    flags: tuple = ()

    def settings(self) -> dict | None:
        return {"cachedGrowthBookFeatures": dict(self.flags)} if self.flags else None

    def environ(self, fake: str, proxy: FirstPartyProxy | None) -> dict:
        env = {k: (v.format(fake=fake) if isinstance(v, str) else v) for k, v in self.env}
        if self.first_party:
            env = {"ANTHROPIC_BASE_URL": None, **proxy.env(), **env}
        return env


NO_KEY = ("ANTHROPIC_API_KEY", None)
MODES: dict[str, Mode] = {
    "loopback_api_key": Mode("ANTHROPIC_BASE_URL=http://127.0.0.1:PORT, ANTHROPIC_API_KEY"),
    "assume_first_party": Mode("the same, and _CLAUDE_CODE_ASSUME_FIRST_PARTY_BASE_URL=1",
                               (("_CLAUDE_CODE_ASSUME_FIRST_PARTY_BASE_URL", "1"),)),
    "api_key": Mode("api.anthropic.com (no ANTHROPIC_BASE_URL), ANTHROPIC_API_KEY",
                    first_party=True),
    "auth_token": Mode("api.anthropic.com, ANTHROPIC_AUTH_TOKEN (bearer)",
                       (NO_KEY, ("ANTHROPIC_AUTH_TOKEN", "oracle-bearer-token")),
                       first_party=True),
    "oauth": Mode("api.anthropic.com, CLAUDE_CODE_OAUTH_TOKEN",
                  (NO_KEY, ("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-oracle-not-a-token")),
                  first_party=True),
    # 2.1.119 to 2.1.236 send diagnostics only under this flag (default off).
    "api_key_flag": Mode("api.anthropic.com, API key, the tengu_prompt_cache_diagnostics "
                         "flag on (cached), nonessential traffic allowed",
                         (("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", None),),
                         first_party=True, flags=(("tengu_prompt_cache_diagnostics", True),)),
    "no_experimental_betas": Mode("api.anthropic.com, API key, "
                                  "CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS=1",
                                  (("CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS", "1"),),
                                  first_party=True),
    "bedrock": Mode("CLAUDE_CODE_USE_BEDROCK=1, ANTHROPIC_BEDROCK_BASE_URL on the fake",
                    (NO_KEY, ("ANTHROPIC_BASE_URL", None), ("CLAUDE_CODE_USE_BEDROCK", "1"),
                     ("ANTHROPIC_BEDROCK_BASE_URL", "{fake}"),
                     ("CLAUDE_CODE_SKIP_BEDROCK_AUTH", "1"), ("AWS_REGION", "us-east-1"),
                     ("CLAUDE_CODE_MAX_RETRIES", "0"))),
    "vertex": Mode("CLAUDE_CODE_USE_VERTEX=1, ANTHROPIC_VERTEX_BASE_URL on the fake",
                   (NO_KEY, ("ANTHROPIC_BASE_URL", None), ("CLAUDE_CODE_USE_VERTEX", "1"),
                    ("ANTHROPIC_VERTEX_BASE_URL", "{fake}"),
                    ("CLAUDE_CODE_SKIP_VERTEX_AUTH", "1"),
                    ("ANTHROPIC_VERTEX_PROJECT_ID", "oracle"), ("CLOUD_ML_REGION", "us-east5"),
                    ("CLAUDE_CODE_MAX_RETRIES", "0"))),
    "google_cloud": Mode("CLAUDE_CODE_USE_ANTHROPIC_GOOGLE_CLOUD=1 (claude.googleapis.com "
                         "through the proxy), its auth skipped",
                         (NO_KEY, ("CLAUDE_CODE_USE_ANTHROPIC_GOOGLE_CLOUD", "1"),
                          ("CLAUDE_CODE_SKIP_ANTHROPIC_GOOGLE_CLOUD_AUTH", "1"),
                          ("ANTHROPIC_GOOGLE_CLOUD_PROJECT", "oracle"),
                          ("ANTHROPIC_GOOGLE_CLOUD_LOCATION", "us-east5"),
                          ("ANTHROPIC_GOOGLE_CLOUD_WORKSPACE_ID", "oracle"),
                          ("CLAUDE_CODE_MAX_RETRIES", "0")), first_party=True),
    "anthropic_aws": Mode("CLAUDE_CODE_USE_ANTHROPIC_AWS=1, ANTHROPIC_AWS_BASE_URL on the fake",
                          (NO_KEY, ("ANTHROPIC_BASE_URL", None),
                           ("CLAUDE_CODE_USE_ANTHROPIC_AWS", "1"),
                           ("ANTHROPIC_AWS_BASE_URL", "{fake}"),
                           ("CLAUDE_CODE_SKIP_ANTHROPIC_AWS_AUTH", "1"),
                           ("AWS_REGION", "us-east-1"), ("CLAUDE_CODE_MAX_RETRIES", "0"))),
    "foundry": Mode("CLAUDE_CODE_USE_FOUNDRY=1, ANTHROPIC_FOUNDRY_BASE_URL on the fake",
                    (NO_KEY, ("ANTHROPIC_BASE_URL", None), ("CLAUDE_CODE_USE_FOUNDRY", "1"),
                     ("ANTHROPIC_FOUNDRY_BASE_URL", "{fake}"),
                     ("CLAUDE_CODE_SKIP_FOUNDRY_AUTH", "1"), ("CLAUDE_CODE_MAX_RETRIES", "0"))),
}

NOT_SENT = "(not sent)"


def rejected(diagnostics) -> bool:
    """Whether the API refuses this ``diagnostics`` value (seed 001): a
    previous_message_id that is a string not starting with msg_. null and an
    absent key pass."""
    pmid = diagnostics.get("previous_message_id") if isinstance(diagnostics, dict) else None
    return isinstance(pmid, str) and not pmid.startswith("msg_")


def api_answer(body: dict) -> dict:
    """The fake API's answer, as the real one answers previous_message_id."""
    if rejected(body.get("diagnostics")):
        return {"status": 400, "error": REJECTION}
    return {"id": f"msg_probe_{uuid.uuid4().hex[:12]}",
            "blocks": [{"type": "text", "text": oracle.REPLY}]}


@dataclass
class Row:
    version: str
    mode: str
    kind: str
    diagnostics: object          # the body's diagnostics, or NOT_SENT
    thread: object               # the body's thread (Message Threads), or NOT_SENT
    status: str                  # "400" (rejected), "ok", or why nothing was sent
    path: str = ""

    @property
    def previous_message_id(self):
        if isinstance(self.diagnostics, dict):
            return self.diagnostics.get("previous_message_id", NOT_SENT)
        return NOT_SENT


def read_run(version: str, mode: str, kind: str, run: oracle.Resumed) -> Row:
    pinged = run.pinged()
    if not pinged:
        last = (run.stderr.strip().splitlines() or run.stdout.strip().splitlines()
                or ["no output"])[-1][:160]
        return Row(version, mode, kind, NOT_SENT, NOT_SENT,
                   f"no request (exit {run.exit_code}): {last}")
    req = pinged[0]
    body = req["body"]
    diagnostics = body.get("diagnostics", NOT_SENT)
    return Row(version, mode, kind, diagnostics, body.get("thread", NOT_SENT),
               "400" if rejected(diagnostics) else "ok", req["path"])


def probe(binary: str, kinds: dict | None = None, modes: list[str] | None = None,
          extra: dict[str, bytes] | None = None) -> Iterator[Row]:
    """Resume every transcript (``kinds``: name -> records, default KINDS;
    ``extra``: name -> JSONL bytes, e.g. files written by the CLI) under every
    mode (names of MODES) with ``binary``: one Row each, as each ends."""
    version = oracle.claude_version(binary)
    transcripts = {name: jsonl(recs) for name, (_, recs) in (kinds or KINDS).items()}
    transcripts.update(extra or {})
    with oracle.FakeMessagesAPI(api_answer) as api, FirstPartyProxy(api.port) as proxy:
        fake = f"http://127.0.0.1:{api.port}"
        for mode in modes or list(MODES):
            env, settings = MODES[mode].environ(fake, proxy), MODES[mode].settings()
            for kind, data in transcripts.items():
                sid = _session_of(data)
                yield read_run(version, mode, kind, oracle.run_resume(
                    data, sid, api, binary, env=env, settings=settings))


def _session_of(data: bytes) -> str:
    for line in data.splitlines():
        try:
            sid = json.loads(line).get("sessionId")
        except (ValueError, AttributeError):
            continue
        if sid:
            return sid
    return SESSION
