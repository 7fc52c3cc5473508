"""The README's and docs/'s own words, read for the tests that hold them true
(tests/project/test_docs.py parses every documented command line, tests/project/test_docs_run.py
runs them, tests/config/test_config_reference.py reads docs/config-reference.md's tables). Nothing
here is a test."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"
README = DOCS.parent / "README.md"
TICKED = re.compile(r"`([^`]+)`")


def documented_commands() -> list[tuple[str, str]]:
    """``[(page, command line)]``: every ``kernelcli ...`` line of a README or docs
    code block (continuation lines joined, comments and ``.venv/bin/`` dropped), and
    every inline ```kernelcli COMMAND ARG ...``` span (one that only names an
    option, ```kernelcli compute --run-dir```, is not a command line)."""
    out = []
    for path in [README, *sorted(DOCS.glob("*.md"))]:
        text = path.read_text(encoding="utf-8").replace("\\\n", " ")
        for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S):
            for line in block.splitlines():
                for part in re.split(r"&&|;|\|", line.split(" #")[0]):
                    part = " ".join(part.replace(".venv/bin/kernelcli", "kernelcli").split())
                    if part.startswith("kernelcli ") or part == "kernelcli":
                        out.append((path.name, part))
        for span in TICKED.findall(re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)):
            span = " ".join(re.sub(r"\s*\[[^\]]*\]", "", span).split())  # optional parts dropped
            span = span.split(" | ")[0]
            words = span.split()
            if (len(words) > 2 and not words[2].startswith("-") and span.startswith("kernelcli ")
                    and not re.search(r"COMMAND|\.\.\.|\\\|", span)):
                out.append((path.name, span))
    return out


def sections(text: str, level: str) -> list[tuple[str, str]]:
    """``[(heading text, body)]`` for the headings of exactly ``level`` (``"##"``); a
    body ends at the next heading of any level."""
    pattern = re.compile(rf"^{level} (.+)$", re.M)
    out = []
    for m in pattern.finditer(text):
        nxt = re.compile(r"^#+ ", re.M).search(text, m.end())
        out.append((m.group(1).strip(), text[m.end():nxt.start() if nxt else len(text)]))
    return out


def table_rows(body: str, first_table_only: bool = False) -> list[list[str]]:
    """Cells of the table rows in ``body``, each table's header and rule rows dropped."""
    rows, started = [], False
    for line in body.splitlines():
        if line.startswith("|"):
            if set(line.replace("|", "").strip()) <= {"-", ":", " "}:
                rows.pop()  # the header row above the rule
                continue
            started = True
            rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
        elif started and first_table_only:
            break
    return rows
