"""discover.walk: which files under a source ingest looks at, in which order
(os.walk's: a folder's files sorted, then its folders in turn), without
following a link to a folder or going into the folders that hold no
transcripts."""

import os

from indexer.transcripts import discover


def _os_walk(root):
    """The walk as os.walk makes it, for comparison."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in discover.SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith(".jsonl"):
                yield os.path.join(dirpath, name)


def test_the_walk_finds_what_os_walk_finds_in_its_order(tmp_path):
    root = tmp_path / "projects"
    for rel in ["b/2.jsonl", "b/1.jsonl", "a/x.jsonl", "a/sub/agent-1.jsonl",
                "a/sub/subagents/agent-2.jsonl", "a/notes.txt", "top.jsonl", "Z/y.jsonl",
                "a/tool-results/big.jsonl", "a/workflows/w.jsonl", "é/ü.jsonl",
                "a.jsonl/inner.jsonl"]:   # a folder named like a transcript is walked into
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("{}\n")
    (root / "empty").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "o.jsonl").write_text("{}\n")
    os.symlink(outside, root / "linked")                    # a link to a folder: not followed
    os.symlink(outside / "o.jsonl", root / "b" / "0.jsonl")  # a link to a file: listed
    os.symlink(tmp_path / "gone", root / "b" / "3.jsonl")    # a dangling link: listed (stat says)

    found = list(discover.walk(str(root)))
    assert found == list(_os_walk(str(root)))
    rel = [os.path.relpath(p, root) for p in found]
    assert rel == ["top.jsonl", "Z/y.jsonl", "a/x.jsonl", "a/sub/agent-1.jsonl",
                   "a/sub/subagents/agent-2.jsonl", "a.jsonl/inner.jsonl", "b/0.jsonl", "b/1.jsonl", "b/2.jsonl", "b/3.jsonl", "é/ü.jsonl"]


def test_a_folder_that_cannot_be_read_is_passed_over(tmp_path):
    root = tmp_path / "projects"
    (root / "a").mkdir(parents=True)
    (root / "a" / "1.jsonl").write_text("{}\n")
    (root / "b").mkdir()
    (root / "b" / "2.jsonl").write_text("{}\n")
    os.chmod(root / "a", 0)
    try:
        found = [os.path.relpath(p, root) for p in discover.walk(str(root))]
        readable = os.access(root / "a", os.R_OK)   # (root reads it anyway)
    finally:
        os.chmod(root / "a", 0o755)
    assert found == (["a/1.jsonl", "b/2.jsonl"] if readable else ["b/2.jsonl"])
    assert list(discover.walk(str(tmp_path / "missing"))) == []
