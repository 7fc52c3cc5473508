"""Every ``kernelcli`` command line and Python block of the README and docs/, run
as written.

tests/project/test_docs.py proves that each line parses; here each one runs, in-process
(click's runner: the CLI's own code from its parser down), in a sandbox copy of
``configs/`` with the shipped data, and must succeed. Three things are not as a
user has them, each said once in the tables below:

* the page's placeholders (``CONFIG``, ``RUN_DIR``, ``I/N``, a job array's
  variables) are given real values, and ``/shared/runs/`` (a cluster's shared
  file system) is the sandbox's ``runs/``;
* CIFAR-10 is not shipped (``configs/data/cifar10_to_npy.py`` downloads it): the
  sandbox holds random 32x32x3 images under its file names, and every
  configuration's ``limit`` (and ``test_limit``) is cut to ``_LIMIT`` (half that for
  the Myrtle networks, whose pairs cost most) so that they run as written in seconds;
* the pages' "run of your own" (``runs/mine``: labels, no fitted preprocessing)
  is Myrtle-5 on those images with their labels and without ``data.preprocess``;
* a line that needs a Ray cluster is run by tests/run/test_ray.py (where Ray is
  installed), named in ``_ELSEWHERE``.

A synopsis that cannot run alone (``kernelcli extend RUN_DIR`` needs ``--test`` or
``--append``) must fail as its page says, with the message in ``_REFUSED``.

A line runs in the state it documents: ``compute`` and ``estimate`` in a sandbox
where nothing was computed, every other command beside the finished runs of
``_RUNS``.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import built_once
from helpers_cli import invoke
from helpers_docs import documented_commands

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
_LIMIT = 16
_PLACEHOLDERS = {"CONFIG": "configs/demo_digits.yaml", "RUN_DIR": "runs/demo_digits",
                 "I/N": "0/2", "W": "2"}
_RUN_DIR = {"predict": "runs/demo_digits_predict"}  # RUN_DIR of a command, if not the above
_BLOCK = 8  # a block edge that splits _LIMIT examples into the shards the pages ask for
# (the Myrtle configurations: half of each)
_RUNS = ("configs/demo_digits.yaml", "configs/demo_digits_predict.yaml",
         "configs/myrtle5.yaml", "configs/mine.yaml")
_REFUSED = {"kernelcli extend RUN_DIR":
            "Error: give --test FILE (a test set), --append FILE (more training rows), or both"}
# Commands that need other processes to answer them (a cluster, a job array's tasks),
# and the test that runs them that way.
_ELSEWHERE = {"--executor ray": "tests/run/test_ray.py",
              "--executor shards": "tests/run/test_predict_jobs.py",
              "predict RUN_DIR --shard": "tests/run/test_predict_jobs.py"}
_FRESH = ("compute", "estimate")


def _argv(line: str) -> list:
    import shlex

    line = re.sub(r"\$\(\([^)]*\)\)", "0", line)      # SLURM_ARRAY_TASK_ID - ..._MIN
    line = re.sub(r"\$\{?\w+\}?", "2", line)          # SLURM_ARRAY_TASK_COUNT
    line = line.replace("/shared/runs/", "runs/")
    argv = shlex.split(line)[1:]
    command = next(w for w in argv if not w.startswith("-"))
    values = {**_PLACEHOLDERS, "RUN_DIR": _RUN_DIR.get(command, _PLACEHOLDERS["RUN_DIR"])}
    return [values.get(w, w) for w in argv]


def _lines() -> list:
    seen, out = set(), []
    for page, line in documented_commands():
        if line not in seen and not any(k in line for k in _ELSEWHERE):
            seen.add(line)
            out.append(pytest.param(line, id=f"{page}: {line}"))
    return out


@pytest.fixture(scope="module")
def sandboxes(tmp_path_factory):
    """``(fresh, computed)``: two copies of the sandbox, the second with ``_RUNS``
    computed; made once for all test workers."""
    root = built_once(tmp_path_factory, "docs_sandboxes", _build_sandboxes)
    return root / "fresh", root / "computed"


def _build_sandboxes(root: Path) -> None:
    fresh = root / "fresh"
    shutil.copytree(ROOT / "configs", fresh / "configs")
    for config in (fresh / "configs").glob("*.yaml"):
        doc = yaml.safe_load(config.read_text(encoding="utf-8"))
        small = config.name.startswith("myrtle")  # a pair costs 100x the digits' here
        doc["data"]["limit"] = _LIMIT // 2 if small else _LIMIT
        if "test_limit" in doc["data"]:  # the stand-in test files hold 2 * _LIMIT rows
            doc["data"]["test_limit"] = doc["data"]["limit"]
        doc.setdefault("compute", {})["block"] = _BLOCK // 2 if small else _BLOCK
        config.write_text(yaml.safe_dump(doc), encoding="utf-8")
    mine = yaml.safe_load((fresh / "configs" / "myrtle5.yaml").read_text(encoding="utf-8"))
    del mine["data"]["preprocess"]
    mine["data"]["labels"] = "data/cifar10_train_labels.npy"
    mine["name"], mine["output"]["run_dir"] = "mine", "../runs/mine"
    (fresh / "configs" / "mine.yaml").write_text(yaml.safe_dump(mine), encoding="utf-8")
    rng = np.random.default_rng(0)
    for name in ("cifar10_train", "cifar10_test"):
        np.save(fresh / "configs" / "data" / f"{name}.npy",
                rng.integers(0, 256, (2 * _LIMIT, 32, 32, 3), dtype=np.uint8))
        np.save(fresh / "configs" / "data" / f"{name}_labels.npy",
                rng.integers(0, 10, 2 * _LIMIT, dtype=np.int64))
    (fresh / "data").mkdir()  # docs/extend.md's files: rows shaped as myrtle5's
    for name in ("more", "test2"):
        np.savez(fresh / "data" / f"{name}.npz",
                 x=rng.integers(0, 256, (4, 32, 32, 3), dtype=np.uint8),
                 y=rng.integers(0, 10, 4, dtype=np.int64))
    computed = root / "computed"
    shutil.copytree(fresh, computed)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(computed)
        for config in _RUNS:
            result = invoke("compute", config)
            assert result.exit_code == 0, result.stderr


def test_the_pages_document_commands():
    assert len(_lines()) > 20


@pytest.mark.parametrize("line", _lines())
def test_documented_command_runs(line, sandboxes, tmp_path, monkeypatch):
    fresh, computed = sandboxes
    argv = _argv(line)
    command = next(w for w in argv if not w.startswith("-"))
    shutil.copytree(fresh if command in _FRESH else computed, tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    result = invoke(*argv)
    if line in _REFUSED:
        assert (result.exit_code, result.stderr.strip()) == (2, _REFUSED[line])
    else:
        assert result.exit_code == 0, f"`{line}` exited {result.exit_code}: {result.stderr}"


def test_lines_run_elsewhere_are_run_there():
    for marker, test_file in _ELSEWHERE.items():
        assert marker in (ROOT / test_file).read_text(encoding="utf-8").replace(
            '"--executor", "ray"', "--executor ray")


# Names a page's Python block leaves to the reader, given values here.
_GIVEN = {"neural-tangents.md": "import numpy as np\n"
          "x1 = np.random.default_rng(0).standard_normal((6, 8, 8, 3)).astype(np.float32)\n"
          "x2 = x1[:4]\n"
          "x_train, x_test, y_train = x1, x2, np.eye(10)[[3, 1, 4, 1, 5, 9]]\n"}


def _python_blocks() -> list:
    out = []
    for path in sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]:
        text = path.read_text(encoding="utf-8")
        for i, block in enumerate(re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)):
            out.append(pytest.param(path.name, block, id=f"{path.name} #{i + 1}"))
    return out


def test_the_pages_show_python():
    assert len(_python_blocks()) >= 4


@pytest.mark.parametrize("page, block", _python_blocks())
def test_documented_python_runs(page, block, sandboxes, tmp_path, monkeypatch):
    shutil.copytree(sandboxes[1], tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    exec(compile(_GIVEN.get(page, "") + block, page, "exec"), {"__name__": "__doc__"})
