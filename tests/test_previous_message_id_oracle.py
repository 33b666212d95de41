"""When and what Claude Code sends as previous_message_id (seed 001's 400), asked of the binary.

Claude Code 2.1.332 (read in its JavaScript, held here; docs/how-it-works/resume-rules.md "Older Claude
Code versions" for the others): the request body carries
``diagnostics: {previous_message_id: ID}`` only when the CLI takes the API for
Anthropic's own (provider firstParty and the base URL api.anthropic.com or
unset, or ``_CLAUDE_CODE_ASSUME_FIRST_PARTY_BASE_URL``), experimental betas
are not disabled, whatever the credentials (API key, ANTHROPIC_AUTH_TOKEN,
OAuth token), and on Claude Platform on Google Cloud at its default host. Never
on Bedrock, Vertex, Foundry or Claude Platform on AWS, never behind another
base URL. ID is the ``message.id`` of the last assistant record that is not an API
error and has a ``requestId``, or else has a ``msg_`` id and a model other than
``<synthetic>``; null when there is none. So a ``<synthetic>`` placeholder is
named only when it carries a requestId and is not an API error, and the 400
comes from that or from a provider's reply (an id not starting with msg_ that
came with a requestId) resumed against Anthropic's API.

First party without the network: indexer/repair/first_party.py (an HTTPS proxy
on loopback that answers for api.anthropic.com with the fake API).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from indexer.repair import oracle
from indexer.repair import previous_message_id as pmid
from indexer.repair.first_party import FirstPartyProxy, NoOpenSSL

try:
    CLAUDE = oracle.find_claude()
except oracle.NoClaudeBinary:
    CLAUDE = None

try:
    with FirstPartyProxy(1):
        OPENSSL = True
except NoOpenSSL:
    OPENSSL = False

pytestmark = [pytest.mark.oracle,
              pytest.mark.skipif(CLAUDE is None, reason="no Claude Code binary"),
              pytest.mark.skipif(not OPENSSL, reason="no openssl command")]


def sent(modes, kinds):
    """{(mode, kind): previous_message_id sent, or NOT_SENT}; every resume
    sent its request."""
    rows = list(pmid.probe(CLAUDE, {k: pmid.KINDS[k] for k in kinds}, modes))
    assert all(r.status in ("ok", "400") for r in rows), [r.status for r in rows]
    return {(r.mode, r.kind): r.previous_message_id for r in rows}


def test_as_first_party_with_an_api_key_the_last_real_reply_is_named():
    got = sent(["api_key"], list(pmid.KINDS))
    assert got == {
        ("api_key", "msg_tail"): "msg_01Probe2",
        ("api_key", "msg_tail_no_request_id"): "msg_01Probe2",
        # A synthetic tail is skipped, an API error or not, requestId or not.
        ("api_key", "api_error_tail"): "msg_01Probe1",
        ("api_key", "api_error_tail_request_id"): "msg_01Probe1",
        ("api_key", "no_response_tail"): "msg_01Probe1",
        # ... but a requestId makes any record that is not an API error count.
        ("api_key", "no_response_tail_request_id"): pmid.NO_RESPONSE_ID,
        ("api_key", "only_synthetic"): None,
        # A provider's ids count only with a requestId: then the API refuses it.
        ("api_key", "third_party"): None,
        ("api_key", "third_party_request_ids"): pmid.CHATCMPL_ID,
    }


@pytest.mark.parametrize("mode", ["auth_token", "oauth", "assume_first_party", "google_cloud"])
def test_every_first_party_credential_sends_it_alike(mode):
    # Claude Platform on Google Cloud at its default host counts as first party.
    assert sent([mode], ["api_error_tail", "third_party_request_ids"]) == {
        (mode, "api_error_tail"): "msg_01Probe1",
        (mode, "third_party_request_ids"): pmid.CHATCMPL_ID}


@pytest.mark.parametrize("mode", ["loopback_api_key", "no_experimental_betas", "bedrock",
                                  "vertex", "foundry", "anthropic_aws"])
def test_elsewhere_no_previous_message_id_is_sent(mode):
    assert sent([mode], ["msg_tail"]) == {(mode, "msg_tail"): pmid.NOT_SENT}


def test_the_fake_answers_an_id_not_from_the_api_with_the_400():
    rows = list(pmid.probe(CLAUDE, {"third_party_request_ids":
                                    pmid.KINDS["third_party_request_ids"]}, ["api_key"]))
    assert [(r.status, r.path) for r in rows] == [("400", "/v1/messages")]
    assert pmid.rejected({"previous_message_id": pmid.API_ERROR_ID})
    assert not pmid.rejected({"previous_message_id": None})
    assert not pmid.rejected(pmid.NOT_SENT)


def test_the_first_party_proxy_refuses_every_other_host():
    with oracle.FakeMessagesAPI() as api, FirstPartyProxy(api.port) as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
            s.sendall(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 403")
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as s:
            s.sendall(b"CONNECT api.anthropic.com:443 HTTP/1.1\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 200")
    assert proxy.connects == ["example.com", "api.anthropic.com"]


# --- Older versions (opt-in) ----------------------------------------------------
# SESSION_INDEX_OLD_CLAUDES: a folder of <version>/claude (the binaries the
# claude-agent-sdk wheels bundle). Each is asked with the diagnostics flag of
# 2.1.119-2.1.239 on; the expected answer by version range (records.py).

OLD = Path(os.environ.get("SESSION_INDEX_OLD_CLAUDES", "/nonexistent"))


def _v(version: str) -> tuple:
    return tuple(int(p) for p in version.split("."))


def expected_by_version(version: str):
    """(API-error tail with a requestId, msg_ tail without requestIds), or
    None for a version between two ranges (not tested)."""
    v = _v(version)
    if v <= (2, 1, 116):
        return pmid.NOT_SENT, pmid.NOT_SENT
    if v == (2, 1, 119):
        return pmid.API_ERROR_ID, pmid.NOT_SENT     # no id: the key is left out
    if (2, 1, 121) <= v <= (2, 1, 128):
        return pmid.API_ERROR_ID, None
    if (2, 1, 132) <= v <= (2, 1, 259):
        return "msg_01Probe1", None
    if v >= (2, 1, 273):
        return "msg_01Probe1", "msg_01Probe2"
    return None


@pytest.mark.skipif(not OLD.is_dir(), reason="SESSION_INDEX_OLD_CLAUDES is not set")
@pytest.mark.parametrize("version", sorted((p.parent.name for p in OLD.glob("*/claude")),
                                           key=_v) if OLD.is_dir() else [])
def test_older_versions_send_what_their_range_says(version):
    expected = expected_by_version(version)
    if expected is None:
        pytest.skip(f"{version} lies between two tested ranges")
    kinds = {k: pmid.KINDS[k] for k in ("api_error_tail_request_id", "msg_tail_no_request_id")}
    rows = list(pmid.probe(str(OLD / version / "claude"), kinds, ["api_key_flag"]))
    assert all(r.status in ("ok", "400") for r in rows), [r.status for r in rows]
    assert tuple(r.previous_message_id for r in rows) == expected
