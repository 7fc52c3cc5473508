"""docs/config.md and docs/cli.md against the code: every configuration key, layer
parameter, command, argument and option the code accepts is documented, and
everything documented exists.

The names come from the code's own tables, one small function per source
(``_code_*`` below), so a refactoring that moves a table only has to re-point
that function. The documents are read by their structure: in config.md, one
table per ``### `section``` heading whose rows start with a backticked key, and
the first table under ``## Layers``; in cli.md, one ``## `kernelcli COMMAND
ARGS``` heading per command whose option table rows start with backticked
options.
"""

from __future__ import annotations

import itertools
import re
from typing import Dict, List, Set, Tuple

import click
import pytest

from helpers_docs import DOCS, README, TICKED as _TICKED, documented_commands



# --- the code's names: re-point these when the tables move ------------------------

def _code_sections() -> Dict[str, Set[str]]:
    """``{section: keys}``; a scalar section (``name``) is its own one key, and
    ``data.preprocess`` is a section of its own."""
    # the keys the loaders accept: docs must list exactly those
    from kernelcli.config import _load, _load_data

    out = {s: set(_load._KEYS.get(s, (s,))) for s in _load.SECTIONS}
    out["data.preprocess"] = set(_load_data._PREPROCESS_KEYS)
    out["architecture.readouts"] = set(_load._READOUT_KEYS)
    return out


def _code_layers() -> Dict[str, Set[str]]:
    """``{layer name: its parameters}``, ``repeat`` and ``residual`` included."""
    from kernelcli.config import _parse_layers  # each layer's parameters, as parsed

    return {name: set(params) for name, params in _parse_layers.PARAMETERS.items()}


def _code_commands() -> Dict[str, Tuple[Set[str], Set[str], Dict[str, Set[str]]]]:
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


def _sections(text: str, level: str) -> List[Tuple[str, str]]:
    """``[(heading text, body)]`` for the headings of exactly ``level`` (``"##"``)."""
    pattern = re.compile(rf"^{level} (.+)$", re.M)
    marks = list(pattern.finditer(text))
    out = []
    for i, m in enumerate(marks):
        end = len(text)
        nxt = re.compile(r"^#+ ", re.M).search(text, m.end())
        if nxt:
            end = nxt.start()
        out.append((m.group(1).strip(), text[m.end():end]))
    return out


def _rows(body: str, first_table_only: bool = False) -> List[List[str]]:
    """Cells of the table rows (header and rule rows dropped) in ``body``."""
    rows, started = [], False
    for line in body.splitlines():
        if line.startswith("|"):
            started = True
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if set(line.replace("|", "").strip()) <= {"-", ":", " "}:
                continue
            rows.append(cells)
        elif started and first_table_only:
            break
    return rows[1:] if rows else rows  # the header row


def _doc_sections() -> Dict[str, Set[str]]:
    """``{section: keys}`` from the ``### `x``` / ``#### `x.y``` tables of config.md."""
    text = _read("config.md")
    out = {}
    for level in ("###", "####"):
        for heading, body in _sections(text, level):
            m = re.fullmatch(r"`([a-z_.]+)`", heading)
            if m:
                out[m.group(1)] = {_TICKED.match(r[0]).group(1) for r in _rows(body)
                                   if _TICKED.match(r[0])}
    return out


def _doc_layers() -> Dict[str, Set[str]]:
    """``{layer: parameters}`` from the first table under ``## Layers``."""
    (body,) = [b for h, b in _sections(_read("config.md"), "##") if h == "Layers"]
    out = {}
    for row in _rows(body, first_table_only=True):
        name = _TICKED.fullmatch(row[0]).group(1)
        out[name] = {t for t in _TICKED.findall(row[1]) if re.fullmatch(r"\w+", t)}
    return out


def _doc_commands() -> Dict[str, Tuple[Set[str], Set[str], Dict[str, str]]]:
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

def _assert_same_names(code: dict, doc: dict, what: str) -> None:
    """``doc`` documents exactly the names of ``code``, and under each the same members."""
    assert set(doc) == set(code), (f"{what}: undocumented {sorted(set(code) - set(doc))}, "
                                   f"documented but unknown {sorted(set(doc) - set(code))}")
    for name in code:
        assert doc[name] == code[name], (
            f"{name}: undocumented {sorted(code[name] - doc[name])}, "
            f"documented but unknown {sorted(doc[name] - code[name])}")


def test_every_configuration_key_is_documented_and_every_documented_key_exists():
    _assert_same_names(_code_sections(), _doc_sections(), "sections")


def test_every_layer_and_parameter_is_documented_and_exists():
    _assert_same_names(_code_layers(), _doc_layers(), "layers")


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


@pytest.mark.parametrize("name", ["README.md", *_PAGES])
def test_every_relative_link_resolves(name):
    """Files and ``#anchors`` (GitHub's slugs) of every README and docs link."""
    path = README if name == "README.md" else DOCS / name
    for target in re.findall(r"\]\(([^)\s:]+)\)", path.read_text(encoding="utf-8")):
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        assert dest.exists(), f"{name} links to missing {file}"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest.read_text(encoding="utf-8")), (
                f"{name} links to missing #{anchor} of {dest.name}")


def _anchors(text: str) -> Set[str]:
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", text, re.M)}


def test_readme_fits_a_screen_and_links_every_docs_page():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 250
    for name in ["CONTRIBUTING.md", *(f"docs/{p}" for p in _PAGES if p != "architecture.md")]:
        assert f"]({name})" in text, f"README.md does not link {name}"


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


_PLACEHOLDERS = {"I/N": "0/2", "W": "2", "N": "2"}  # metavars given a value to parse


def test_every_documented_command_line_parses():
    """Each documented ``kernelcli`` line is accepted by the CLI's own parser
    (options, their values and choices, the number of arguments). Running them all
    would cost minutes; tests/test_configs.py computes the demo configuration."""
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
