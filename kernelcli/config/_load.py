"""Read a YAML run configuration into a validated, frozen :class:`RunConfig`.

The contract is ``docs/config-reference.md``. Every mistake raises
:class:`~kernelcli.errors.ConfigError` with a one-line message that starts with
the config file's name (when there is a file), names the YAML path, echoes the
bad value and says what is accepted. Relative paths (``data.x1``, ``data.x2``,
``output.run_dir``) resolve against the folder that holds the config, so a run
does not depend on the directory it was started from.

Whether the layers fit the data (shapes) and obey the order rules is checked
separately by :func:`kernelcli.config.check_architecture`, once the input shape
is known.

Hostile text is refused before any of that (see :mod:`._yaml`: size, nesting,
aliases, duplicate keys), and every number has a bound: ``data.limit`` and
``data.test_limit`` 1..2**40 rows, ``compute.block`` 1..2**20, ``compute.devices``
1..4096, ``compute.memory`` at most 2**60 bytes, ``zca_reg`` in (0, 10**6]; the
layers' bounds are in :mod:`._parse_layers`. The ``data`` section is read by
:mod:`._load_data`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Union

import yaml

from ..errors import ConfigError
from . import _fields as f
from . import _settings as settings
from ._allowed import (
    EXECUTORS,
    KINDS,
    PARAMETERIZATIONS,
    Architecture,
    ComputeSpec,
    KernelSpec,
    OutputSpec,
    Readouts,
    RunConfig,
)
from ._augment import parse_augment
from ._load_data import data_section
from ._parse_layers import MAX_LAYERS, parse_layers
from ._registry import walk
from ._yaml import MAX_CHARS, read_yaml

SECTIONS = ("name", "data", "architecture", "kernel", "compute", "output")
_KEYS = {
    "data": ("x1", "key", "x2", "x2_key", "layout", "limit", "labels", "labels_key", "test",
             "test_key", "test_labels", "test_labels_key", "test_limit", "preprocess",
             "landmarks"),
    "architecture": ("parameterization", "layers", "readouts"),
    "kernel": ("kinds", "dtype", "test_diagonal", "augment"),
    "compute": ("memory", "devices", "block", "executor", "address", "engine"),
    "output": ("run_dir", "keep_tiles"),
}
_DEFAULT_NAME = "run"  # only when the text has no file to take a name from

MAX_BLOCK = 2 ** 20       # compute.block: a tile edge; a 2**20-square float32 tile is 4 TiB
MAX_DEVICES = 4096        # compute.devices
MAX_NAME = 255            # the default run directory is runs/<name>: one file name


def load_config(path: Union[str, os.PathLike]) -> RunConfig:
    """Read and validate the YAML run configuration at ``path``.

    Raises ConfigError naming the file when it is missing, unreadable or not
    valid YAML, and for every mistake in its content.
    """
    path = Path(path)
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_CHARS + 1)  # never the whole of a huge (or endless) file
        if len(raw) > MAX_CHARS:
            raise ConfigError(f"{path}: is larger than {MAX_CHARS // 1024} KiB; expected a "
                              f"YAML configuration file of at most {MAX_CHARS // 1024} KiB")
        # As read_text() reads it: universal newlines, so `text` is what was stored before.
        text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such configuration file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory; expected a YAML configuration file") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: cannot read the configuration file: not UTF-8 text "
                          f"(byte {e.start})") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the configuration file: "
                          f"{e.strerror or e}") from None
    except ValueError:  # a NUL in the path: no file can have that name
        raise ConfigError(f"{f.show(str(path))}: no such configuration file") from None
    absolute = path.absolute()
    return parse_config(text, base_dir=absolute.parent, source=absolute)


def parse_config(text: str, base_dir: Path, source: Optional[Path] = None) -> RunConfig:
    """Validate the YAML ``text`` of a run configuration.

    ``base_dir`` is the folder relative paths resolve against (the config
    file's folder). ``source`` is the file the text came from, if any: its name
    prefixes every error message and its stem is the default ``name``.
    """
    source = Path(source) if source is not None else None
    label = source.name if source is not None else "configuration"
    try:
        return _build(read_yaml(text), text, Path(base_dir), source)
    except yaml.YAMLError as e:  # only read_yaml raises these
        raise ConfigError(f"{label}: not valid YAML{_yaml_where(e)}") from None
    except ConfigError as e:
        if source is None:
            raise
        raise ConfigError(f"{label}: {e}") from None


def parse_architecture(section: Union[str, dict]) -> Architecture:
    """Validate an architecture given as the ``architecture:`` section of a config: a
    mapping (``{"layers": [...], "parameterization": ...}``), or YAML text of that
    mapping or of a whole config. Errors name the keys as in a config file."""
    if isinstance(section, str):
        if len(section) > MAX_CHARS:
            raise ConfigError(f"architecture: the YAML text is longer than "
                              f"{MAX_CHARS // 1024} KiB")
        try:
            section = read_yaml(section)
        except yaml.YAMLError as e:
            raise ConfigError(f"architecture: not valid YAML{_yaml_where(e)}") from None
        if isinstance(section, dict) and "architecture" in section:
            section = section["architecture"]
    return _architecture(_section({"architecture": section}, "architecture"))


def _yaml_where(error: yaml.YAMLError) -> str:
    """`` (line 3, column 7): mapping values are not allowed here``, on one line."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    context = getattr(error, "context", None)
    first = getattr(error, "context_mark", None)
    if context and problem == "second occurrence" and first is not None:  # duplicate anchor
        problem = f"{context.split(';')[0]}, first on line {first.line + 1}"
    elif context and problem.startswith("but "):  # a half sentence without its context
        problem = f"{context} {problem}"
    problem = " ".join(problem.split())
    if len(problem) > 200:  # a tag or anchor can be as long as the text
        problem = problem[:197] + "..."
    if mark is None:
        return f": {problem}"
    return f" (line {mark.line + 1}, column {mark.column + 1}): {problem}"


def _section(doc: dict, name: str) -> dict:
    value = f.mapping(doc.get(name), name, "a mapping of " + ", ".join(_KEYS[name]))
    f.check_keys(value, name, _KEYS[name])
    return value


def _build(doc: Any, text: str, base_dir: Path, source: Optional[Path]) -> RunConfig:
    if doc is None:
        raise ConfigError(f"the configuration is empty; expected a mapping with the sections "
                          f"{', '.join(SECTIONS)}")
    if not isinstance(doc, dict):
        raise ConfigError(f"{f.show(doc)} is not a configuration; expected a mapping with "
                          f"the sections {', '.join(SECTIONS)}")
    f.check_keys(doc, "", SECTIONS, noun="section")

    name = _run_name(doc.get("name"), source.stem if source is not None else _DEFAULT_NAME)
    data, kernel = data_section(_section(doc, "data"), base_dir), _kernel(_section(doc, "kernel"))
    if data.landmarks is not None and kernel.test_diagonal:
        raise f.fail("kernel.test_diagonal", "true is given together with data.landmarks; "
                                             "expected false: a Nystrom regression run "
                                             "computes no test diagonal (no variance)")
    return RunConfig(
        name=name,
        data=data,
        architecture=_architecture(_section(doc, "architecture")),
        kernel=kernel,
        compute=_compute(_section(doc, "compute")),
        output=_output(_section(doc, "output"), base_dir, name),
        source=source,
        text=text,
    )


def _run_name(raw: Any, default: str) -> str:
    if raw is None:  # `name:` left empty (null) means the default, as for an absent key
        return default
    name = f.string(raw, "name", "a run name", maximum=MAX_NAME)
    if any(ord(c) < 32 or ord(c) == 127 for c in name):  # it heads one-line progress output
        raise f.fail("name", f"{f.show(name)} contains a control character; expected a run "
                             "name on one line")
    # the default run directory is runs/<name>: a name must stay one folder inside runs/
    if "/" in name or "\\" in name or name.strip() in (".", ".."):
        raise f.fail("name", f"{f.show(name)} is not a plain name (it holds a path separator "
                             "or is '.' or '..'); expected one file name, e.g. cifar-relu, "
                             "and output.run_dir to put the run elsewhere")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME:
        raise f.fail("name", f"{f.show(name)} is {len(name.encode('utf-8', 'surrogatepass'))} "
                             f"bytes long; expected at most {MAX_NAME} bytes (it names the "
                             f"run directory runs/<name>)")
    return name


def _architecture(d: dict) -> Architecture:
    if d.get("layers") is None:
        raise f.fail("architecture.layers", "missing; expected a list of at least one layer")
    parameterization = f.choice(d.get("parameterization", "ntk"),
                                "architecture.parameterization", PARAMETERIZATIONS,
                                "a parameterization")
    layers = tuple(parse_layers(d["layers"], "architecture.layers"))
    return Architecture(
        parameterization=parameterization,
        layers=layers,
        readouts=_readouts(d.get("readouts"), layers),
    )


_READOUT_KEYS = ("head", "after")


def _readouts(value, body: tuple) -> Optional[Readouts]:
    """``architecture.readouts``: ``{head: [layers], after: [counts]}``. A count is of
    top-level body layers once ``repeat`` is expanded (a ``residual`` or ``parallel``
    is one); whether the head fits each point is checked with the shapes
    (``check_architecture``)."""
    path = "architecture.readouts"
    if value is None:
        return None
    n_body = len(body)
    value = f.mapping(value, path, "a mapping of head (a list of layers) and after (a list "
                                   "of body layer counts)")
    f.check_keys(value, path, _READOUT_KEYS)
    for key in _READOUT_KEYS:
        if value.get(key) is None:
            raise f.fail(f"{path}.{key}", "missing; expected " + (
                "a list of at least one layer" if key == "head" else
                f"a list of increasing body layer counts in 1..{n_body}"))
    head = tuple(parse_layers(value["head"], f"{path}.head"))
    after = value["after"]
    if not isinstance(after, list) or not after:
        raise f.fail(f"{path}.after", f"{f.show(after)} is not a list of layer counts; "
                                      f"expected a non-empty list of increasing body layer "
                                      f"counts in 1..{n_body}")
    counts: list[int] = []
    for i, k in enumerate(after):
        at = f"{path}.after[{i}]"
        if not f._is_int(k) or not 1 <= k <= n_body:
            raise f.fail(at, f"{f.show(k)} is not a body layer count; expected an integer "
                             f"in 1..{n_body} (the body's layers, repeat expanded)")
        if counts and k <= counts[-1]:
            raise f.fail(at, f"{k} does not follow {counts[-1]}; expected increasing counts")
        counts.append(int(k))
    # one pass evaluates the body to the last readout and a head per readout: the same
    # bound as a network's, so a long `after` list cannot multiply a big head
    n_head = sum(1 for _ in walk(head))
    evaluated = sum(1 for _ in walk(body[:counts[-1]])) + n_head * len(counts)
    if evaluated > MAX_LAYERS:
        raise f.fail(f"{path}.after", f"{len(counts)} readouts of a {n_head}-layer head "
                                      f"evaluate {evaluated} layers in all; expected at most "
                                      f"{MAX_LAYERS} (the body to the last readout and a "
                                      f"head per readout)")
    return Readouts(head=head, after=tuple(counts))


def _kernel(d: dict) -> KernelSpec:
    kinds = d.get("kinds", list(KINDS))
    if not isinstance(kinds, list) or not kinds:
        raise f.fail("kernel.kinds", f"{f.show(kinds)} is not a list of kernel kinds; "
                                     f"expected a non-empty list of {', '.join(KINDS)}")
    seen = []
    for i, kind in enumerate(kinds):
        kind = f.choice(kind, f"kernel.kinds[{i}]", KINDS, "a kernel kind")
        if kind in seen:
            raise f.fail(f"kernel.kinds[{i}]", f"{f.show(kinds[i])} is listed twice; "
                                               "expected each kind at most once")
        seen.append(kind)
    return KernelSpec(
        kinds=tuple(k for k in KINDS if k in seen),  # canonical order, whatever was written
        dtype=settings.dtype(d.get("dtype", "float32"), "kernel.dtype"),
        test_diagonal=f.boolean(d.get("test_diagonal", False), "kernel.test_diagonal"),
        augment=parse_augment(d.get("augment"), "kernel.augment"),
    )


def _compute(d: dict) -> ComputeSpec:
    budget = settings.memory(d.get("memory", "auto"), "compute.memory")
    executor = f.choice(d.get("executor", "local"), "compute.executor", EXECUTORS,
                        "an executor")
    address = f.optional_string(d.get("address"), "compute.address",
                                "a Ray cluster address such as 'ray://head:10001' or "
                                "'10.0.0.1:6379'")
    if address is not None and executor != "ray":
        raise f.fail("compute.address", f"{f.show(address)} is given but compute.executor is "
                                        f"{executor}; expected executor: ray as well, or no "
                                        "address")
    return ComputeSpec(
        memory=budget,
        devices=f.count_or(d.get("devices", "all"), "compute.devices", "all", "a device count",
                           maximum=MAX_DEVICES),
        block=f.count_or(d.get("block", "auto"), "compute.block", "auto", "a block size",
                         maximum=MAX_BLOCK),
        executor=executor,
        address=address,
        engine=settings.engine(d.get("engine", "auto"), "compute.engine"),
    )


def _output(d: dict, base_dir: Path, name: str) -> OutputSpec:
    run_dir = d.get("run_dir")
    keep = d.get("keep_tiles")
    keep = False if keep is None else f.boolean(keep, "output.keep_tiles")
    if run_dir is None:
        return OutputSpec(run_dir=Path(os.path.normpath(base_dir / "runs" / name)),
                          keep_tiles=keep)
    return OutputSpec(run_dir=f.file_path(run_dir, "output.run_dir", base_dir), keep_tiles=keep)
