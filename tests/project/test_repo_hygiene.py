"""The repository as committed: no merge left half done.

A conflict resolved by hand can leave its markers behind in a file no test reads
(docs/config-reference.md once held both sides of a table for a while); this scans every
git-tracked text file for them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the three lines git writes around a conflict: "<<<<<<< ours", "=======", ">>>>>>> theirs"
MARKER = re.compile(r"^(<<<<<<< |=======$|>>>>>>> )")


def tracked_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (no git, or an unpacked sdist)")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                         check=True).stdout
    return [ROOT / name for name in out.decode().split("\0") if name]


def conflict_lines(path: Path) -> list[str]:
    try:
        data = path.read_bytes()
    except OSError:  # tracked but deleted in the work tree
        return []
    if b"\0" in data:  # binary (an .npz, an .h5): not text
        return []
    text = data.decode("utf-8", errors="replace")
    return [f"{path.relative_to(ROOT)}:{n}: {line}"
            for n, line in enumerate(text.splitlines(), 1) if MARKER.match(line)]


def test_the_marker_pattern_finds_what_git_writes():
    sample = "a\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> branch\nb\n===\n"
    hits = [ln for ln in sample.splitlines() if MARKER.match(ln)]
    assert hits == ["<<<<<<< HEAD", "=======", ">>>>>>> branch"]


def test_no_tracked_text_file_holds_merge_conflict_markers():
    files = tracked_files()
    assert any(p.name == "config-reference.md" for p in files)  # the listing is the repository's
    found = [hit for p in files for hit in conflict_lines(p)]
    assert not found, "unresolved merge conflict markers:\n" + "\n".join(found)
