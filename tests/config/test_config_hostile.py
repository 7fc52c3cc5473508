"""Hostile configurations: every one fails fast with one ConfigError line, naming the key.

Duplicate keys, alias bombs, deep nesting, huge or odd scalars and unsafe tags are
refused by the loader itself, before any data is opened or jax is imported; here too
the same refusals through the CLI. The bound on every number is tested in
test_config_hostile_bounds.py (with this file's helpers ``parse``, ``error_of``,
``layers``, ``section`` and ``data``), the fuzz test feeding random YAML-ish text to
``parse_config`` in test_config_hostile_fuzz.py.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers_cli import CONFIGS_DIR, error_line, invoke, run_cli
from kernelcli.config import check_architecture, load_config, parse_config
from kernelcli.config._fields import show  # how messages show a value: bounded work
from kernelcli.errors import ConfigError

BASE = "data: {x1: a.npy}\narchitecture: {layers: [flatten, dense]}\n"


def parse(text: str):
    return parse_config(text, base_dir=Path("/cfg"), source=Path("/cfg/demo.yaml"))


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text)
    message = str(info.value)
    assert "\n" not in message and len(message) <= 500, message
    return message


def layers(*items: str) -> str:
    return "data: {x1: a.npy}\narchitecture:\n  layers:\n" + "".join(
        f"    - {item}\n" for item in items)


def laughs(levels: int, width: int = 10, key: str = "name") -> str:
    """The billion laughs: ``width ** levels`` values from a few lines of anchors."""
    lines = [f"x0: &a0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    body = ", ".join(f"*a{levels - 1}" for _ in range(width))
    return f"{key}: {{{', '.join(lines)}, top: [{body}]}}\n" + BASE


# --- what the loader refuses ----------------------------------------------------------

def section(key: str, entry: str) -> str:
    return BASE + f"{key}: {{{entry}}}\n"


def data(entry: str) -> str:
    return f"data: {{x1: a.npy, {entry}}}\narchitecture: {{layers: [flatten, dense]}}\n"


SECTIONS = "expected name, data, architecture, kernel, compute, output"
NOT_YAML = "not valid YAML (line 1, column 7): "

# (behaviour, YAML text, exact message after "demo.yaml: ") for what the loader refuses.
LOADER_MISTAKES = [
    ("duplicate_key_names_its_section_and_lines",
     "name: demo\ndata:\n  x1: a.npy\n  limit: 40\n  limit: 30\n"
     "architecture: {layers: [flatten, dense]}\n",
     "duplicate key 'limit' in data (lines 4 and 5); expected each key once"),
    ("second_section_does_not_replace_the_first",
     BASE + "kernel: {dtype: float64}\nkernel: {kinds: [ntk]}\n",
     "duplicate section 'kernel' (lines 3 and 4); expected each section once"),
    ("duplicate_in_a_flow_layer", layers("conv: {filter: 3, filter: 5}", "flatten", "dense"),
     "duplicate key 'filter' in architecture.layers[0].conv (both on line 4); expected each "
     "key once"),
    ("duplicate_deep_in_a_repeat",
     layers("repeat:\n        times: 2\n        layers:\n          - dense:\n"
            "              width: 3\n              width: 4", "flatten", "dense"),
     "duplicate key 'width' in architecture.layers[0].repeat.layers[0].dense (lines 8 and 9); "
     "expected each key once"),
    ("keys_equal_in_value_are_duplicates", BASE + "compute: {1: a, 1.0: b}\n",
     "duplicate key 1.0 in compute (both on line 3); expected each key once"),
    ("duplicate_in_a_mapping_merged_elsewhere",
     BASE + "compute: {a: &x {<<: {block: 2}, block: 4, block: 5}, b: {<<: *x}}\n",
     "duplicate key 'block' in compute.a (both on line 3); expected each key once"),
    ("more_than_100_aliases",
     "name: &n demo\n" + BASE + "kernel: {kinds: [" + ", ".join(["*n"] * 101) + "]}\n",
     "line 4: alias *n is alias use number 101; expected at most 100 alias uses in a "
     "configuration"),
    ("recursive_alias", "name: &a [1, *a]\n" + BASE,
     "line 1: alias *a is inside the value it names; expected no recursive aliases"),
    ("ten_thousand_nested_lists", "name: " + "[" * 10_000 + "]" * 10_000 + "\n" + BASE,
     "line 1: nested more than 64 levels deep; expected at most 64 levels of lists and "
     "mappings"),
    ("too_many_values", "name: [" + "1, " * 60_000 + "]\n" + BASE,
     "line 1: more than 50000 values; expected a configuration of at most 50000 values"),
    ("text_over_the_limit", BASE + "# " + "x" * 300_000 + "\n",
     "the configuration is 300062 characters long; expected at most 262144 (256 KiB)"),
    ("int_key", "1: x\n" + BASE, f"unknown section 1; {SECTIONS}"),
    ("null_key", "null: y\n" + BASE, f"unknown section null; {SECTIONS}"),
    ("list_key", "[a]: b\n" + BASE, "not valid YAML (line 1, column 1): found unhashable key"),
    ("python_object_tag", "name: !!python/object:os.system ls\n" + BASE,
     NOT_YAML + "could not determine a constructor for the tag "
                "'tag:yaml.org,2002:python/object:os.system'"),
    ("python_name_tag", "name: !!python/name:os.system\n" + BASE,
     NOT_YAML + "could not determine a constructor for the tag "
                "'tag:yaml.org,2002:python/name:os.system'"),
    ("binary", "name: !!binary aGVsbG8=\n" + BASE,
     "name: b'hello' is not a string; expected a run name"),
    ("timestamp", "name: 2001-12-14\n" + BASE,
     "name: 2001-12-14 is not a string; expected a run name"),
    ("impossible_date", "name: 2001-02-30\n" + BASE,
     NOT_YAML + "cannot read '2001-02-30' as a date (day is out of range for month)"),
    ("timestamp_tag_on_text", "name: !!timestamp soon\n" + BASE,
     NOT_YAML + "cannot read 'soon' as a date"),
    ("bool_tag_on_text", "name: !!bool maybe\n" + BASE,
     NOT_YAML + "cannot read 'maybe' as a boolean"),
    ("set", "name: !!set {a}\n" + BASE, "name: {'a'} is not a string; expected a run name"),
    ("long_name", "name: " + "a" * 300 + "\n" + BASE,
     "name: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa... is 300 characters "
     "long; expected a run name of at most 255 characters"),
    ("name_on_two_lines", 'name: "a\\nb"\n' + BASE,
     "name: 'a\\nb' contains a control character; expected a run name on one line"),
    ("nul_in_a_path", data('key: x').replace("a.npy", '"a\\0b"'),
     "data.x1: 'a\\x00b' contains a NUL character; expected a file path"),
    ("two_documents", "a: 1\n---\nb: 2\n",
     "not valid YAML (line 2, column 1): expected a single document in the stream but found "
     "another document"),
    ("anchor_defined_twice", "a: &x 1\nb: &x 2\n",
     "not valid YAML (line 2, column 4): found duplicate anchor 'x', first on line 1"),
]


@pytest.mark.parametrize("text, message", [pytest.param(t, m, id=i)
                                           for i, t, m in LOADER_MISTAKES])
def test_loader_refuses_hostile_text_with_one_line(text, message):
    assert error_of(text) == f"demo.yaml: {message}"


def test_a_merge_key_may_still_be_overridden():
    text = BASE + "kernel: {<<: {dtype: float64, kinds: [ntk]}, dtype: float32}\n"
    config = parse(text)
    assert config.kernel.dtype == "float32" and config.kernel.kinds == ("ntk",)
    # merged into another mapping, its keys are still checked as written (PyYAML
    # flattens it in place before its own turn)
    assert error_of(BASE + "compute: {a: &x {<<: {block: 2}, block: 4}, b: {<<: *x}}\n"
                    ).startswith("demo.yaml: compute: unknown key 'a'")


def test_plain_anchors_and_aliases_still_work():
    conv = "&c {filter: 3, W_std: 1.5}"
    config = parse(layers(f"conv: {conv}", "relu", "conv: *c", "relu", "flatten", "dense"))
    assert config.architecture.layers[0] == config.architecture.layers[2]
    assert config.architecture.layers[2].W_std == 1.5


def test_billion_laughs_in_the_name_is_refused_at_once():
    start = time.monotonic()
    message = error_of(laughs(9))
    # expanded, the 10**9 values would take hours and all the memory; a minute only
    # catches that, not a loaded machine
    assert time.monotonic() - start < 60
    assert message == ("demo.yaml: aliases expand the configuration to more than 100000 "
                       "values; expected at most 100000, aliases expanded")


def test_an_integer_too_long_to_convert_is_named_by_line():
    message = error_of(BASE + "compute: {devices: " + "9" * 5000 + "}\n")
    assert message.startswith("demo.yaml: not valid YAML (line 3, column 20): cannot read "
                              "'9999")
    assert "as an integer (Exceeds the limit (4300 digits)" in message


def test_deeply_nested_residuals_give_a_short_message():
    text = "residual: [" * 30 + "relu" + "]" * 30
    arch = parse(layers("dense", text, "flatten", "dense")).architecture
    with pytest.raises(ConfigError) as info:
        check_architecture(arch, (8, 8, 3))
    message = str(info.value)
    assert message.startswith("architecture.layers[1].residual[0].resid...idual[0].")
    assert message.endswith(".residual[0].residual: the branch ends in relu; expected it to "
                            "end in dense, conv, conv_local or conv_transpose, since "
                            "x + f(x) adds two independent Gaussians")
    assert len(message) <= 300  # the path is cut short; the rest is the fixed sentence


def test_load_config_refuses_duplicates_in_a_file(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text(BASE + "name: a\nname: b\n")
    with pytest.raises(ConfigError, match=r"^dup.yaml: duplicate section 'name' "
                                          r"\(lines 3 and 4\); expected each section once$"):
        load_config(path)


def test_a_huge_file_is_refused_without_reading_it_all(tmp_path):
    path = tmp_path / "huge.yaml"
    with path.open("wb") as fh:
        fh.write(BASE.encode())
        fh.truncate(1 << 30)  # sparse: 1 GiB of NULs after the text
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == (f"{path}: is larger than 256 KiB; expected a YAML configuration "
                               "file of at most 256 KiB")


def test_a_file_is_read_as_read_text_reads_it(tmp_path):
    path = tmp_path / "crlf.yaml"
    path.write_bytes(BASE.replace("\n", "\r\n").encode())
    assert load_config(path).text == path.read_text() == BASE


def test_a_path_with_a_nul_is_no_file():
    with pytest.raises(ConfigError, match=r"^'a\\x00b': no such configuration file$"):
        load_config("a\0b")


def test_show_does_bounded_work_on_huge_shared_and_cyclic_values():
    value = ["x" * 10_000] * 10
    for _ in range(15):  # 10**16 leaves if expanded
        value = [value] * 10
    cyclic: list = []
    cyclic.append(cyclic)
    start = time.monotonic()
    shown = [show(value), show(cyclic), show(10 ** 5000), show("a" * 10 ** 7)]
    assert time.monotonic() - start < 60  # expanded: forever (10**16 leaves, a cycle)
    assert all(len(s) <= 60 for s in shown)
    assert shown[2] == "an integer of 5001 digits"
    assert show({"conv": None, "filter": [3, 3]}) == "{'conv': None, 'filter': [3, 3]}"
    assert show(None) == "null" and show(True) == "true" and show("a  b\nc") == "'a b\\nc'"


# --- through the CLI --------------------------------------------------------------------

def demo_config(folder: Path, extra: str = "", edit=lambda t: t) -> Path:
    """configs/demo_digits.yaml, pointed at the shipped digits, with ``extra`` appended."""
    text = (CONFIGS_DIR / "demo_digits.yaml").read_text()
    text = text.replace("data/digits.npz", str(CONFIGS_DIR / "data" / "digits.npz"))
    text = text.replace("../runs/demo_digits", str(folder / "run"))
    path = folder / "hostile.yaml"
    path.write_text(edit(text) + extra)
    return path


@pytest.mark.parametrize("extra, edit, message", [
    ("compute: {block: 1.0e+12}\n", None,
     "compute.block: 1000000000000.0 is not a block size; expected auto or a positive integer"),
    ("compute: {block: 1000000000000}\n", None,
     "compute.block: 1000000000000 is too large; expected auto or a positive integer no "
     "larger than 1048576"),
    ("", lambda t: t.replace("W_std: 1.0,", "W_std: 1.0e+300,"),
     "architecture.layers[5].dense.W_std: 1e+300 is too large; expected a number from 0 to "
     "1000"),
    ("", lambda t: t.replace("filter: [3, 3], padding", "filter: 1000000000000, padding", 1),
     "architecture.layers[0].conv.filter: 1000000000000 is too large; expected a positive "
     "integer or a list of 1 to 3 positive integers, each no larger than 1024"),
    ("", lambda t: t.replace("- dense: {W_std: 1.0, b_std: 0.0}",
                             "- dense: {W_std: 1.0, b_std: 0.0, width: 1.0e+30}"),
     "architecture.layers[5].dense.width: 1e+30 is not a width; expected a positive integer"),
    ("", lambda t: t.replace("limit: 600", "limit: 40\n  limit: 30"),
     "duplicate key 'limit' in data (lines 10 and 11); expected each key once"),
    ("kernel: {dtype: float64}\n", None,
     "duplicate section 'kernel' (lines 21 and 27); expected each section once"),
    ("", lambda t: t.replace("- relu", "- repeat: {times: 100000000, layers: [relu]}", 1),
     "architecture.layers[1].repeat.times: 100000000 is too large; expected a positive "
     "integer no larger than 1000"),
])
def test_estimate_refuses_hostile_configs_with_one_line(tmp_path, extra, edit, message):
    path = demo_config(tmp_path, extra, edit or (lambda t: t))
    result = invoke("estimate", path, "--memory")
    assert result.exit_code == 2
    assert error_line(result) == f"Error: hostile.yaml: {message}"


def test_compute_refuses_an_alias_bomb_in_the_name(tmp_path):
    path = demo_config(tmp_path, edit=lambda t: laughs(9, key="junk") +
                       t.replace("name: demo_digits\n", ""))
    result = invoke("compute", path, "--quiet")
    assert result.exit_code == 2
    assert error_line(result) == ("Error: hostile.yaml: aliases expand the configuration to "
                                  "more than 100000 values; expected at most 100000, aliases "
                                  "expanded")
    assert not (tmp_path / "run").exists()


def test_the_real_cli_exits_2_without_a_traceback_or_jax(tmp_path):
    path = demo_config(tmp_path, "compute: {block: 1e12, block: 5}\n")
    result = run_cli("estimate", path, "--memory", timeout=120)
    assert result.returncode == 2
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.strip() == ("Error: hostile.yaml: duplicate key 'block' in compute "
                                     "(both on line 27); expected each key once")
    code = ("import sys\nfrom kernelcli.errors import ConfigError\n"
            "from kernelcli.config import load_config\n"
            f"try:\n    load_config({str(path)!r})\nexcept ConfigError:\n    pass\n"
            "print(sorted({'jax', 'numpy'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]"
