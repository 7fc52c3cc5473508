"""docs/cli.md against the code: every command, argument and option the code accepts
is documented, and everything documented exists; every link of the README and docs/
resolves, every documented command line parses, and the README points at every page.
(docs/config-reference.md, the configuration reference, is held to the code by
tests/config/test_config_reference.py.)

The names come from the click group itself (``_code_commands`` below). cli.md is read
by its structure: one ``## `kernelcli COMMAND ARGS``` heading per command whose option
table rows start with backticked options.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import click
import pytest

from helpers_docs import DOCS, README, documented_commands
from helpers_docs import TICKED as _TICKED
from helpers_docs import sections as _sections
from helpers_docs import table_rows as _rows

# --- the code's names: re-point this when the commands move -------------------------

def _code_commands() -> dict[str, tuple[set[str], set[str], dict[str, set[str]]]]:
    """``{command: (ARGUMENTS, options, {option: choices})}`` from the click group;
    the group itself is ``""`` (its options: --version, -h/--help). The help option
    of a subcommand is documented once, with the group's."""
    from kernelcli.cli import main

    out = {}
    group_ctx = click.Context(main, info_name="kernelcli", **main.context_settings)
    commands = {"": main, **main.commands}
    for name, cmd in commands.items():
        ctx = group_ctx if not name else click.Context(cmd, info_name=name,
                                                        parent=group_ctx)
        help_opt = cmd.get_help_option(ctx)
        args, opts, choices = set(), set(), {}
        for param in cmd.get_params(ctx):
            if isinstance(param, click.Argument):
                args.add(param.human_readable_name)
                continue
            if name and param is help_opt:
                continue
            names = set(param.opts) | set(param.secondary_opts)
            opts |= names
            if isinstance(param.type, click.Choice):
                for n in names:
                    choices[n] = set(param.type.choices)
        out[name] = (args, opts, choices)
    return out


# --- reading the documents ---------------------------------------------------------

def _read(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def _doc_commands() -> dict[str, tuple[set[str], set[str], dict[str, str]]]:
    """``{command: (ARGUMENTS, options, {option: its table row})}`` from cli.md;
    the group's options are those of ``## Global options``."""
    out = {}
    for heading, body in _sections(_read("cli.md"), "##"):
        m = re.fullmatch(r"`kernelcli (\w+)(.*)`", heading)
        if m:
            name, args = m.group(1), set(re.findall(r"\b[A-Z][A-Z_]*\b", m.group(2)))
        elif heading == "Global options":
            name, args = "", set()
        else:
            continue
        opts, rows = set(), {}
        for row in _rows(body):
            for token in _TICKED.findall(row[0]):
                opt = token.split()[0]
                if opt.startswith("-"):
                    opts.add(opt)
                    rows[opt] = " | ".join(row)
        out[name] = (args, opts, rows)
    return out


# --- the checks ----------------------------------------------------------------------

def test_every_command_and_option_is_documented_and_exists():
    code, doc = _code_commands(), _doc_commands()
    assert set(doc) == set(code), (f"commands: undocumented {sorted(set(code) - set(doc))}, "
                                   f"documented but unknown {sorted(set(doc) - set(code))}")
    for name, (args, opts, choices) in code.items():
        doc_args, doc_opts, rows = doc[name]
        label = name or "kernelcli"
        assert doc_args == args, f"{label}: arguments {sorted(args)}, documented {sorted(doc_args)}"
        assert doc_opts == opts, (f"{label}: undocumented {sorted(opts - doc_opts)}, "
                                  f"documented but unknown {sorted(doc_opts - opts)}")
        for opt, values in choices.items():
            missing = [v for v in values if v not in rows[opt]]
            assert not missing, f"{label} {opt}: choices {missing} not in docs/cli.md"


_PAGES = sorted(p.name for p in DOCS.glob("*.md"))


_TOP = ("README.md", "BENCHMARKS.md", "CONTRIBUTING.md", "CHANGELOG.md")  # beside docs/


@pytest.mark.parametrize("name", [*_TOP, *_PAGES])
def test_every_relative_link_resolves(name):
    """Files and ``#anchors`` (GitHub's slugs) of every link of the top-level pages and
    docs/."""
    path = DOCS.parent / name if name in _TOP else DOCS / name
    for target in re.findall(r"\]\(([^)\s:]+)\)", path.read_text(encoding="utf-8")):
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        assert dest.exists(), f"{name} links to missing {file}"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest.read_text(encoding="utf-8")), (
                f"{name} links to missing #{anchor} of {dest.name}")


def _anchors(text: str) -> set[str]:
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", text, re.M)}


def test_readme_fits_a_screen_and_links_every_docs_page():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 250
    for name in ["CONTRIBUTING.md", *(f"docs/{p}" for p in _PAGES if p != "architecture.md")]:
        assert f"]({name})" in text, f"README.md does not link {name}"


def test_the_readme_installs_and_tests_as_ci_does():
    """A newcomer who follows the README runs what CI runs: CI's install line (its
    extras, so no test skips for a missing one) and its test command are the README's."""
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    install = re.search(r"pip install [^\n]*?(-e '\.\[[\w,]+\]')", ci).group(1)
    assert f".venv/bin/pip install {install}" in readme
    test = re.search(r"^\.venv/bin/python -m pytest [^\n]*$", ci, re.M).group(0)
    assert f"\n{test}  # " in readme


def test_the_stax_list_is_kernelcli_stax_exports():
    from kernelcli import stax

    text = _read("python-api.md")
    listed = text[text.index("Its exports:"):].split(".\n")[0]
    assert set(_TICKED.findall(listed)) == set(stax.__all__)


def test_no_reference_points_at_a_missing_docs_file():
    root = DOCS.parent
    for path in [*root.glob("kernelcli/**/*.py"), *root.glob("tests/*.py"), README]:
        for ref in re.findall(r"\bdocs/([\w.-]+\.md)", path.read_text(encoding="utf-8")):
            assert (DOCS / ref).is_file(), f"{path.relative_to(root)} cites missing docs/{ref}"


# ``docs/gpus.md, "Installing on a GPU machine"``, ``README: "Section"``: a page and one
# of its headings, named in a comment, a docstring or a page
_POINTER = re.compile(r'\b((?:[\w.-]+/)*[\w.-]+\.md|README|BENCHMARKS)\)?[,:]? \(?"([^"]+)"')


def _pointer_sources() -> list:
    root = DOCS.parent
    return [*root.glob("kernelcli/**/*.py"), *root.glob("tests/*.py"), *DOCS.glob("*.md"),
            README, root / "CONTRIBUTING.md", root / "BENCHMARKS.md", root / "pyproject.toml",
            *root.glob("configs/*.yaml"), *root.glob("bench/*.py"), *root.glob("bench/*.sh"),
            root / "bench" / "README.md"]


def test_every_section_a_pointer_names_is_a_heading_of_its_page():
    """A pointer that names a page and a section (``README, "Python API"``) names a
    heading that page has (the heading containing the words, case aside): sections
    move, and a pointer to one that moved sends the reader nowhere."""
    root = DOCS.parent
    found, missing = 0, []
    for path in _pointer_sources():
        if path.resolve() == Path(__file__).resolve():  # its own examples
            continue
        text = re.sub(r"\n[ \t#/*]*", " ", path.read_text(encoding="utf-8"))
        for name, section in _POINTER.findall(text):
            name = {"README": "README.md", "BENCHMARKS": "BENCHMARKS.md"}.get(name, name)
            page = next((p for p in (root / name, DOCS / name, path.parent / name)
                         if p.is_file()), None)
            found += 1
            headings = [] if page is None else [
                h.replace("`", "").lower() for h in re.findall(
                    r"^#+ (.+)$", re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"),
                                         flags=re.M | re.S), re.M)]
            if not any(section.lower() in h for h in headings):
                missing.append(f"{path.relative_to(root)}: {name}, \"{section}\"")
    assert found > 3 and not missing, "\n".join(missing)


_PLACEHOLDERS = {"I/N": "0/2", "W": "2", "N": "2"}  # metavars given a value to parse


def test_every_documented_command_line_parses():
    """Each documented ``kernelcli`` line is accepted by the CLI's own parser
    (options, their values and choices, the number of arguments). Running them all
    would cost minutes; tests/config/test_configs.py computes the demo configuration."""
    import shlex

    from kernelcli.cli import main

    lines = documented_commands()
    assert len(lines) > 40
    failures = []
    for page, line in lines:
        line = re.sub(r"\$\(\([^)]*\)\)", "0", line)  # shell arithmetic and variables
        line = re.sub(r"\$\{?\w+\}?", "2", line)
        argv = [_PLACEHOLDERS.get(w, w) for w in shlex.split(line)[1:]]
        group_opts = {o for prm in main.params for o in prm.opts} | {"-vv", "-vvv"}
        lead = list(itertools.takewhile(lambda w: w.startswith("-"), argv))
        rest = argv[len(lead):]
        unknown = set(lead) - group_opts
        if unknown or (rest and rest[0] not in main.commands):
            failures.append(f"{page}: `{line}`: unknown {sorted(unknown) or rest[0]}")
            continue
        if not rest or {"-h", "--help"} & set(rest):
            continue
        # with the group's context as parent, as the CLI parses it: click caches each
        # command's help option from the first context it sees (-h comes from the group)
        parent = click.Context(main, info_name="kernelcli", **main.context_settings)
        try:
            main.commands[rest[0]].make_context(rest[0], rest[1:], parent=parent)
        except click.UsageError as err:
            failures.append(f"{page}: `{line}`: {err.format_message()}")
    assert not failures, "\n".join(failures)
