"""discover.sniff: what a new file is, from its first complete lines, also
when the first line is longer than its first, short read."""

import json

from indexer.transcripts import discover


def _file(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def test_a_first_line_longer_than_the_first_read(tmp_path):
    long = "x" * (discover.FIRST_SNIFF_BYTES * 3)
    event = json.dumps({"type": "system", "session_id": "s", "text": long}).encode() + b"\n"
    record = json.dumps({"type": "user", "sessionId": "s", "text": long}).encode() + b"\n"
    assert discover.sniff(_file(tmp_path, "event.jsonl", event)) == discover.EXECUTION_LOG
    assert discover.sniff(_file(tmp_path, "record.jsonl", record)) == discover.TRANSCRIPT
    # a partial first line past the whole sniff: judged by its opening
    partial = b'{"type": "user", "text": "' + b"y" * (discover.SNIFF_BYTES * 2)
    assert discover.sniff(_file(tmp_path, "partial.jsonl", partial)) == discover.TRANSCRIPT


def test_short_files(tmp_path):
    assert discover.sniff(_file(tmp_path, "a.jsonl", b'{"uuid": "u"}\n')) == discover.TRANSCRIPT
    assert discover.sniff(_file(tmp_path, "b.jsonl", b"  \n\n")) is None
    assert discover.sniff(_file(tmp_path, "c.jsonl", b"not json\n[1]\n")) == discover.OTHER
    assert discover.sniff(_file(tmp_path, "d.jsonl", b"plain text")) == discover.OTHER
