"""Where the package carries no library this machine can load: the build at first use,
and what a ``kernelcli`` process says when there is none (``_native_build``).

Each test runs ``python -m kernelcli`` on a copy of the package (its library damaged
or its record removed, as a crash, a disk or an edited checkout leaves them) with a
``PATH`` holding only a stand-in compiler: a real process (a shell script with
children of its own) that logs its calls and fails, hangs, is slow, or links the
package's own real library, so each case takes seconds, not a real build's minute."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

from helpers_cli import wait_until
from kernelcli.kernels import _native_recipe as recipe  # where the library and its record are

pytestmark = pytest.mark.skipif(
    not (recipe.NATIVE / recipe.RECORD).is_file() or not recipe.cpu_variants(),
    reason="the package was installed without its native library")

NET = [{"conv": {"filter": [3, 3], "padding": "SAME"}}, "relu", "global_avg_pool",
       {"dense": {}}]
FAKE = r"""#!/bin/sh
echo "$*" >> "$FAKE_LOG"
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
case "$FAKE_MODE" in
  fail) echo "fake.cc:1:1: error: boom" >&2; exit 1;;
  hang) SLEEP MARK & SLEEP MARK;;
  slow) SLEEP 3;;
esac
case " $* " in *" -shared "*) CP "$FAKE_LIB" "$out";; *) : > "$out";; esac
""".replace("SLEEP", shutil.which("sleep")).replace("CP", shutil.which("cp"))


class Setup:
    """A copied package, a stand-in compiler, a config and the environment to run in."""

    def __init__(self, tmp_path: Path, record: bool = True, mode: str = "ok"):
        self.tmp = tmp_path
        self.pkg = tmp_path / "pkg"
        shutil.copytree(recipe.NATIVE.parent.parent, self.pkg / "kernelcli",
                        ignore=shutil.ignore_patterns("__pycache__"))
        self.native = self.pkg / "kernelcli" / "kernels" / "native"
        if not record:
            (self.native / recipe.RECORD).unlink()
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        # the stand-in compiler's children sleep this long, found by it: a mark of this
        # test's own, so a test beside it (the other xdist worker) never counts as its
        self.mark = f"1000.{uuid.uuid4().int % 10**9:09d}"
        (self.bin / "g++").write_text(FAKE.replace("MARK", self.mark))
        (self.bin / "g++").chmod(0o755)
        self.log = tmp_path / "cc.log"
        np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((6, 5, 5, 2)))
        self.env = {**os.environ, "PYTHONPATH": str(self.pkg), "PATH": str(self.bin),
                    "KERNELCLI_CACHE_DIR": str(tmp_path / "cache"), "FAKE_MODE": mode,
                    "FAKE_LOG": str(self.log), "FAKE_LIB": str(self.library(recipe.NATIVE))}
        self.env.pop("XLA_FLAGS", None)

    def library(self, folder: Path) -> Path:
        return folder / recipe.library_name(recipe.cpu_variants()[0])

    def config(self, name: str, engine: str = "native") -> Path:
        doc = {"name": name, "data": {"x1": "x.npy"}, "architecture": {"layers": NET},
               "kernel": {"dtype": "float64"}, "compute": {"engine": engine, "block": 2},
               "output": {"run_dir": f"run_{name}"}}
        path = self.tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    def args(self, *args) -> list:
        return [sys.executable, "-m", "kernelcli", *map(str, args)]

    def run(self, *args, **env) -> subprocess.CompletedProcess:
        """``kernelcli ARGS`` under umask 002 (Debian's and Ubuntu's default): what it
        keeps must not be group-writable, or every later run would build again."""
        return subprocess.run(self.args(*args), cwd=self.tmp, capture_output=True, text=True,
                              timeout=300, env={**self.env, **env}, umask=0o002)

    def calls(self) -> list:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def kept(self) -> list:
        """What the cache's library folder holds: the lock first, then the kept folder."""
        home = self.tmp / "cache" / "kernelcli-native"
        return sorted((p.relative_to(home).as_posix() for p in home.rglob("*")),
                      key=lambda name: (not name.endswith(".lock"), name)) \
            if home.exists() else []


def _last(proc) -> str:
    return proc.stderr.strip().splitlines()[-1]


def _marked(s: Setup) -> list:
    """Processes of ``s``'s stand-in compiler still alive (its children included)."""
    found = []
    for p in Path("/proc").iterdir():
        try:
            if s.mark.encode() in (p / "cmdline").read_bytes():
                found.append(p.name)
        except OSError:
            pass
    return found


def test_a_damaged_library_without_a_compiler_is_one_line_and_auto_says_why(tmp_path):
    s = Setup(tmp_path)
    s.library(s.native).write_bytes(s.library(s.native).read_bytes()[:100000])  # truncated
    shutil.rmtree(s.bin)  # no compiler at all
    why = (f"{s.library(s.native)} does not match its checksum in native.json (damaged or "
           f"truncated), and no C++ compiler (g++ or c++) is on PATH to build it")
    proc = s.run("compute", s.config("n"))
    assert proc.returncode == 2, proc.stderr
    assert _last(proc) == (f"Error: compute.engine: 'native' cannot run here: {why}; use "
                           f"auto, cpu or accelerator")
    assert not (tmp_path / "run_n").exists()
    proc = s.run("compute", s.config("a", "auto"), "-v")
    assert proc.returncode == 0, proc.stderr
    assert f"  engine: cpu (auto: the native engine cannot run here: {why})" in \
        proc.stderr.splitlines()
    # said without -v too, once (the per-input and pair programs build two kernel fns)
    fallback = (f"kernelcli: computing with the cpu engine (auto: the native engine cannot "
                f"run here: {why})")
    proc = s.run("compute", s.config("b", "auto"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines().count(fallback) == 1, proc.stderr
    engine = json.loads((tmp_path / "run_a" / "manifest.json").read_text())["engine"]
    assert engine["name"] == "cpu" and "native_library" not in engine


def test_a_stale_library_is_built_at_first_use_once_and_kept(tmp_path):
    """An editable checkout whose sources changed since its install: the library is
    built for this CPU's variant, kept (library and record), and loaded from there by
    the next process without a compiler call; estimate says where it came from."""
    s = Setup(tmp_path)
    header = s.native / "map.h"
    header.write_text(header.read_text() + "\n// edited since the install\n")
    ident = recipe.identity(s.native)
    proc = s.run("estimate", s.config("n"))
    assert proc.returncode == 0, proc.stderr
    assert len([c for c in s.calls() if " -shared " in f" {c} "]) == 1
    variant = recipe.cpu_variants()[0]
    lines = proc.stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if "building the native engine" in line)
    assert lines[start].startswith(f"kernelcli: building the native engine for this CPU "
                                   f"({variant}) with {s.bin / 'g++'}; about ")
    assert lines[start].endswith(" s (at most 300 s), once: later processes load what it "
                                 "keeps")
    assert re.fullmatch(r"kernelcli: built the native engine in \d+\.\d s", lines[start + 1])
    key = s.kept()[0][:-len(".lock")]
    assert s.kept() == [f"{key}.lock", key, f"{key}/{recipe.library_name(variant)}",
                        f"{key}/native.json"]
    calls = s.calls()
    proc = s.run("estimate", s.config("n"))
    assert proc.returncode == 0 and s.calls() == calls  # loaded as kept, not built again
    have = json.load(open(s.native / recipe.RECORD))["identity"]
    assert (f"  engine                         native (compute.engine: native; library "
            f"{ident}, built at first use in {tmp_path / 'cache' / 'kernelcli-native' / key} "
            f"({variant}), since the native library shipped with kernelcli ({have}) was "
            f"built from other sources than these ({ident}))") in proc.stdout.splitlines()


@pytest.mark.parametrize("mode", ["fail", "hang"])
def test_a_failing_or_hanging_compiler_is_bounded_remembered_and_said(tmp_path, mode):
    """A compiler's error is kept and said at once by later processes; a build that ran
    out of time is not kept (a busy machine, a low limit): the next process tries again."""
    s = Setup(tmp_path, record=False, mode=mode)
    t = time.monotonic()
    proc = s.run("compute", s.config("n"), KERNELCLI_NATIVE_BUILD_SECONDS="2")
    assert proc.returncode == 2, proc.stderr
    assert time.monotonic() - t < 60
    assert _marked(s) == []  # the compiler's whole group is gone, children included
    cxx = s.bin / "g++"
    failed = (f"{cxx} exited with 1: fake.cc:1:1: error: boom" if mode == "fail"
              else f"{cxx} gave no result in 2 s")
    missing = (f"no native library shipped with kernelcli ({s.native / recipe.RECORD} is "
               f"missing)")
    assert _last(proc) == (f"Error: compute.engine: 'native' cannot run here: {missing}, "
                           f"and its build with {cxx} failed: {failed}; use auto, cpu or "
                           f"accelerator")
    assert not (tmp_path / "run_n").exists()
    assert re.search(r"^kernelcli: the native engine's build failed after \d+\.\d s$",
                     proc.stderr, re.M), proc.stderr
    calls = s.calls()
    if mode == "hang":  # a timeout is the moment's, not the compiler's: tried again
        proc = s.run("compute", s.config("n"), KERNELCLI_NATIVE_BUILD_SECONDS="2")
        assert proc.returncode == 2 and s.calls() > calls
        assert "failed before" not in proc.stderr and _last(proc).endswith(
            f"and its build with {cxx} failed: {failed}; use auto, cpu or accelerator")
        return
    proc = s.run("compute", s.config("n"))  # remembered: the compiler is not run again
    assert proc.returncode == 2 and s.calls() == calls
    key = s.kept()[0][:-len(".lock")]
    kept = tmp_path / "cache" / "kernelcli-native" / key / "failed"
    assert _last(proc) == (f"Error: compute.engine: 'native' cannot run here: {missing}, "
                           f"and its build at first use failed before (its build with {cxx} "
                           f"failed: {failed}; delete {kept} to try again); use auto, cpu "
                           f"or accelerator")
    # auto computes with the cpu engine and says why, once
    proc = s.run("compute", s.config("a", "auto"))
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if line.startswith("kernelcli: ")]
    assert said == [
        f"kernelcli: computing with the cpu engine (auto: the native engine cannot run "
        f"here: {missing}, and its build at first use failed before (its build with {cxx} "
        f"failed: {failed}; delete {kept} to try again))"] and s.calls() == calls


def test_processes_that_need_one_build_at_once_build_it_once(tmp_path):
    """The second process starts once the first is compiling (the race is forced, not
    hoped for): it waits for the lock, says so, and loads what the first kept."""
    s = Setup(tmp_path, record=False, mode="slow")
    logs = [open(tmp_path / f"{i}.err", "w") for i in range(2)]
    first = subprocess.Popen(s.args("compute", s.config("a")), cwd=tmp_path, env=s.env,
                             stdout=subprocess.DEVNULL, stderr=logs[0])
    assert wait_until(lambda: s.calls(), first, timeout=120)
    second = subprocess.Popen(s.args("compute", s.config("b")), cwd=tmp_path, env=s.env,
                              stdout=subprocess.DEVNULL, stderr=logs[1])
    assert (first.wait(timeout=300), second.wait(timeout=300)) == (0, 0)
    for f in logs:
        f.close()
    assert len([c for c in s.calls() if " -shared " in f" {c} "]) == 1
    assert "kernelcli: waiting for another process building the native library" in \
        (tmp_path / "1.err").read_text()
    libs = {json.loads((tmp_path / f"run_{n}" / "manifest.json").read_text())["engine"][
        "native_library"] for n in "ab"}
    assert libs == {recipe.identity()}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_a_build_stops_it_at_once_and_nothing_is_kept(tmp_path, signum):
    s = Setup(tmp_path, record=False, mode="hang")
    proc = subprocess.Popen(s.args("compute", s.config("n")), cwd=tmp_path, env=s.env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert wait_until(lambda: len(_marked(s)) >= 2, proc, timeout=120)
    t = time.monotonic()
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, err
    # the compiler's children sleep 1000 s: a minute only catches a stop that waited
    # for them (or for the build's own time limit), not a loaded machine
    assert time.monotonic() - t < 60
    assert _marked(s) == []
    key = s.kept()[0][:-len(".lock")]
    assert s.kept() == [f"{key}.lock"]  # no build folder, no library, no failure kept


def test_a_run_continues_only_with_its_own_library(tmp_path):
    """A resume (or a shard, or a grown run) whose library is another's is refused,
    naming both, and leaves the run as it was; so is a run from before runs recorded
    their library. Another variant of the same library continues it to the bits of
    the uninterrupted run."""
    s = Setup(tmp_path)
    whole = s.run("compute", s.config("whole"))
    assert whole.returncode == 0, whole.stderr
    cfg = s.config("part")
    assert s.run("compute", cfg, "--shard", "1/2").returncode == 0
    run = tmp_path / "run_part"
    ident = recipe.identity()
    # another library: sources edited since, built at first use
    header = s.native / "map.h"
    text = header.read_text()
    header.write_text(text + "\n// edited\n")
    other = recipe.identity(s.native)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    proc = s.run("resume", run)
    assert proc.returncode == 2, proc.stderr
    assert _last(proc) == (
        f"Error: {run}: its tiles were computed by native library {ident} "
        f"(as its manifest.json records) and this kernelcli's is {other}, whose "
        f"last bits differ; continue it with the kernelcli that started it")
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    header.write_text(text)
    # the least capable variant only, as an older CPU would take
    rec = json.loads((s.native / recipe.RECORD).read_text())
    least = recipe.cpu_variants()[-1]
    rec["libraries"] = {least: rec["libraries"][least]}
    (s.native / recipe.RECORD).write_text(json.dumps(rec))
    proc = s.run("resume", run, "-v")
    assert proc.returncode == 0, proc.stderr
    assert f"shipped with kernelcli ({least}))" in proc.stderr
    with h5py.File(tmp_path / "run_whole" / "kernels.h5") as a, \
            h5py.File(run / "kernels.h5") as b:
        for kind in ("nngp", "ntk"):
            np.testing.assert_array_equal(a[kind][...], b[kind][...])
