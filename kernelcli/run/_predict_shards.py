"""``predict --solver cg --executor shards``: CG's products with K served by the
processes of a job array (``kernelcli predict RUN --shard I/N``), through files in
``RUN/predict-work/`` on the file system they share.

The coordinator (the ``predict`` that solves) owns the folder for the whole predict
(:func:`coordinate`): it writes ``coordinator`` (its id and a counter, rewritten every
``heartbeat_s`` by a thread) and, per kind (:class:`ShardBands`), ``session.json``
(a new token, the dataset, ``block_rows`` and the bands of :func:`band_bounds`). Server
``I`` of ``N`` (:func:`serve_shard`) reads only its band through
:class:`~kernelcli.solvers._bands.BandWorker` (the processes' worker: bit-identical
products), writes ``server-<I>`` (the token it serves and a counter) as its heartbeat,
and answers each ``v-<token>-<t>-<f64|f32>.npy`` with ``r-<token>-<t>-<I>.npy``. Every
file is written under a temporary name, fsynced and renamed (a reader never sees half
of one); its name is its identity (token, product number, band), and a reader checks
size, dtype and shape before use (``np.load`` without pickle). A file of another token
(an earlier predict's, another kind's) is never opened.

A heartbeat is judged by the reader's own clock (when it last saw the counter change),
so the nodes' clocks need not agree. The coordinator stops the solve with an error
naming the shard when a server's heartbeat stands still for ``stale_s`` (killed,
cancelled) or a product gets no answer in ``timeout_s``; a server ends when the
coordinator writes ``stop``, or removes the folder, or its heartbeat stands still for
``stale_s``. At the end the coordinator removes the files of these names it wrote or
its servers wrote, and the folder once empty; nothing else.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from .._stop import Stop, check
from ..errors import ComputeError, DataError, UsageError
from ..solvers import DEFAULT_BAND_CACHE_BYTES, BandWorker, band_bounds

WORK_DIR = "predict-work"
HEARTBEAT_S = 2.0
STALE_S = 120.0  # a heartbeat unchanged this long: its writer is gone
START_TIMEOUT_S = 600.0  # servers to appear; a server's wait for its coordinator
DEFAULT_TIMEOUT_S = 3600.0  # one product, at most
MAX_COLUMNS = 1 << 16  # of V: bounds what a server reads
_SESSION_BYTES = 1 << 20
_POLL_S = 0.02
_OURS = re.compile(r"(coordinator|stop|session\.json|server-\d+|[vr]-[0-9a-f]{32}-\d+-\w+\.npy"
                   r"|\.tmp-.*)")


def work_dir(run_dir) -> Path:
    """``RUN/predict-work``; refused (:class:`DataError`) where it is a symbolic link or
    no folder: kernelcli writes nothing through a link out of a run directory."""
    folder = Path(run_dir) / WORK_DIR
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise DataError(f"{folder} is a symbolic link or not a folder; predict --executor "
                        f"shards writes there only into a folder of its own")
    return folder


def _write(path: Path, write: Callable) -> None:
    """``write(file)`` under a temporary name, fsynced, renamed to ``path``."""
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}-{threading.get_ident()}")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _read_text(path: Path, limit: int = 4096) -> Optional[str]:
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        return None
    return None if len(data) > limit else data.decode("utf-8", "replace")


def load_array(path: Path, shape: tuple, dtype) -> np.ndarray:
    """The array in ``path`` if it is a .npy of exactly ``shape`` and ``dtype``;
    :class:`DataError` otherwise (the size checked before anything is read)."""
    dtype = np.dtype(dtype)
    most = int(np.prod(shape)) * dtype.itemsize + 4096
    if path.stat().st_size > most:
        raise DataError(f"{path} holds {path.stat().st_size:,} bytes, more than an array "
                        f"of shape {shape} ({dtype}); it is refused")
    try:
        arr = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise DataError(f"{path} is not a readable .npy array ({exc})") from None
    if arr.shape != tuple(shape) or arr.dtype != dtype:
        raise DataError(f"{path} holds an array of shape {arr.shape} ({arr.dtype}), not "
                        f"{tuple(shape)} ({dtype}); it is refused")
    return arr


class Beat:
    """Rewrites ``path`` with ``text() + counter`` every ``every_s`` from a thread."""

    def __init__(self, path: Path, text: Callable[[], str], every_s: float):
        self.path, self.text, self.every_s = path, text, every_s
        self.ended, self.count = threading.Event(), 0
        self.beat()
        self.thread = threading.Thread(target=self._run, daemon=True, name="kernelcli-beat")
        self.thread.start()

    def beat(self) -> None:
        self.count += 1
        with contextlib.suppress(OSError):  # the folder removed at the end: nothing to say
            _write(self.path, lambda f: f.write(f"{self.text()} {self.count}".encode()))

    def _run(self) -> None:
        while not self.ended.wait(self.every_s):
            self.beat()

    def end(self) -> None:
        self.ended.set()
        self.thread.join()


class Watch:
    """When a heartbeat file last changed, by this process's clock."""

    def __init__(self, path: Path):
        self.path, self.since = path, time.monotonic()
        self.seen: Optional[str] = None

    def idle_s(self) -> float:
        text = _read_text(self.path)
        if text != self.seen:
            self.seen, self.since = text, time.monotonic()
        return time.monotonic() - self.since


class Coordination:
    """The coordinator's side of ``RUN/predict-work/`` for one predict."""

    def __init__(self, run_dir, heartbeat_s: float = HEARTBEAT_S, stale_s: float = STALE_S):
        self.dir, self.id = work_dir(run_dir), uuid.uuid4().hex
        self.heartbeat_s, self.stale_s = heartbeat_s, stale_s
        self.dir.mkdir(exist_ok=True)
        self._clean()  # an earlier predict's, killed before its end
        self.beat = Beat(self.dir / "coordinator", lambda: self.id, heartbeat_s)

    def _clean(self) -> None:
        for name in os.listdir(self.dir):
            if _OURS.fullmatch(name):
                with contextlib.suppress(FileNotFoundError):
                    (self.dir / name).unlink()

    def close(self, servers: int = 0) -> None:
        """``stop``, a short wait for the servers to see it (they remove their heartbeat
        as they end), then the folder's files of our names and the folder if empty."""
        self.beat.end()
        _write(self.dir / "stop", lambda f: f.write(self.id.encode()))
        deadline = time.monotonic() + 4 * self.heartbeat_s
        while time.monotonic() < deadline and any(
                (self.dir / f"server-{i}").exists() for i in range(servers)):
            time.sleep(0.05)
        self._clean()
        with contextlib.suppress(OSError):  # a file kernelcli did not write stays, and so does the folder
            self.dir.rmdir()


class ShardBands:
    """One kind's products served by the ``workers`` shards of a job array."""

    def __init__(self, base, coordination: Coordination, workers: int,
                 timeout_s: float = DEFAULT_TIMEOUT_S, stop: Optional[Stop] = None,
                 start_timeout_s: float = START_TIMEOUT_S):
        self.base, self.co, self.workers = base, coordination, int(workers)
        self.timeout_s, self.stop = timeout_s, stop
        self.bounds = band_bounds(base.shape[0], base.block_rows, self.workers)
        self.token, self.iteration = uuid.uuid4().hex, 0
        self.watches = [Watch(self.co.dir / f"server-{i}") for i in range(self.workers)]
        session = {"id": self.co.id, "token": self.token, "file": Path(base.path).name,
                   "dataset": base.dataset, "block_rows": int(base.block_rows),
                   "servers": self.workers, "bounds": [list(b) for b in self.bounds],
                   "columns": int(base.shape[1]), "heartbeat_s": self.co.heartbeat_s,
                   "stale_s": self.co.stale_s}
        _write(self.co.dir / "session.json", lambda f: f.write(json.dumps(session).encode()))
        self._wait(lambda i: (_read_text(self.co.dir / f"server-{i}") or "").startswith(
            f"{self.token} ready"), range(self.workers), start_timeout_s, starting=True)

    def _wait(self, done: Callable[[int], bool], pending, timeout_s: float,
              starting: bool = False) -> None:
        pending, deadline = set(pending), time.monotonic() + timeout_s
        while pending:
            check(self.stop)
            pending = {i for i in pending if not done(i)}
            if not pending:
                return
            i = min(pending)
            what = (f"shard {i}/{self.workers} (`kernelcli predict {self.co.dir.parent} "
                    f"--shard {i}/{self.workers}`)")
            if time.monotonic() > deadline:
                raise ComputeError(f"{what} {'did not start serving' if starting else 'gave no answer'} "
                                   f"in {timeout_s:g} s; the CG solve stops")
            for j in pending:
                idle = self.watches[j].idle_s()
                if self.watches[j].seen is not None and idle > self.co.stale_s:
                    raise ComputeError(f"shard {j}/{self.workers}'s heartbeat stood still for "
                                       f"{idle:.0f} s (killed or cancelled?); the CG solve "
                                       f"stops, as it cannot go on without its band")
            time.sleep(_POLL_S)

    def product(self, v, exact: bool) -> list:
        self.iteration += 1
        t, tag = self.iteration, "f64" if exact else "f32"
        # saved in its own memory order (.npy keeps a Fortran-ordered array so): the
        # band's BLAS call must see what the local operator's sees, for the same bits
        if v.ndim == 2 and v.shape[1] > MAX_COLUMNS:
            raise DataError(f"a product with {v.shape[1]:,} columns is more than the "
                            f"{MAX_COLUMNS:,} a shard accepts")
        _write(self.co.dir / f"v-{self.token}-{t}-{tag}.npy", lambda f: np.save(f, v))
        old = self.co.dir / f"v-{self.token}-{t - 1}-{'f32' if exact else 'f64'}.npy"
        for stale in (old, old.with_name(f"v-{self.token}-{t - 1}-{tag}.npy")):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        names = [self.co.dir / f"r-{self.token}-{t}-{i}.npy" for i in range(len(self.bounds))]
        self._wait(lambda i: names[i].exists(), range(len(self.bounds)), self.timeout_s)
        out = []
        for (s, e), name in zip(self.bounds, names, strict=True):
            out.append(load_array(name, (e - s,) + v.shape[1:], np.float64))
            name.unlink()
        return out

    def close(self) -> None:
        """The session stays until the next kind's replaces it, or the predict ends."""


@contextlib.contextmanager
def coordinate(run_dir, where: dict, heartbeat_s: float = HEARTBEAT_S,
               stale_s: float = STALE_S):
    """``where`` with a :class:`Coordination` of ``run_dir`` for ``--executor shards``
    (ended, its files removed, when the block ends), else ``where`` itself."""
    if where.get("executor") != "shards":
        yield where
        return
    co = Coordination(run_dir, heartbeat_s, stale_s)
    try:
        yield {**where, "coordination": co}
    finally:
        co.close(where.get("workers") or 0)


def _session(folder: Path, index: int, count: int) -> Optional[dict]:
    text = _read_text(folder / "session.json", _SESSION_BYTES)
    if text is None:
        return None
    try:
        s = json.loads(text)
        ok = (isinstance(s["token"], str) and re.fullmatch(r"[0-9a-f]{32}", s["token"])
              and re.fullmatch(r"[\w.-]+\.h5", s["file"]) and isinstance(s["dataset"], str)
              and all(isinstance(s[k], int) and s[k] >= 1
                      for k in ("block_rows", "servers", "columns"))
              and all(isinstance(s[k], (int, float)) and 0 < s[k] <= 1e6
                      for k in ("heartbeat_s", "stale_s"))
              and isinstance(s["bounds"], list) and len(s["bounds"]) <= s["servers"]
              and all(isinstance(b, list) and len(b) == 2 and all(isinstance(x, int) for x in b)
                      for b in s["bounds"]))
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise DataError(f"{folder / 'session.json'} is not a session kernelcli wrote; "
                        f"this shard stops")
    if s["servers"] != count:
        raise UsageError.naming(f"<<shard>>: {index}/{count}: the predict coordinating "
                                f"{folder.parent} asks for {s['servers']} shards, not {count}")
    return s


def serve_shard(run_dir, shard: tuple, stop: Optional[Stop] = None,
          cache_bytes: int = DEFAULT_BAND_CACHE_BYTES,
          start_timeout_s: float = START_TIMEOUT_S) -> int:
    """Serve band ``shard[0]`` of ``shard[1]`` to the predict coordinating ``run_dir``
    until it ends; the number of products served. Raises :class:`ComputeError` when the
    coordinator does not come in ``start_timeout_s`` or its heartbeat stands still."""
    index, count = shard
    folder = work_dir(run_dir)
    coordinator, served, text = Watch(folder / "coordinator"), 0, "-"
    beat, worker, session = None, None, None
    stale_s, done = start_timeout_s, -1
    try:
        while True:
            check(stop)
            idle = coordinator.idle_s()
            if session is not None and (coordinator.seen is None or
                                        _read_text(folder / "stop") == session["id"]):
                return served  # the coordinator ended (its stop, or its folder removed)
            if idle > stale_s:
                raise ComputeError(
                    f"no predict coordinated {run_dir} with --executor shards for "
                    f"{idle:.0f} s ({folder / 'coordinator'} unchanged); shard "
                    f"{index}/{count} stops" if session is None else
                    f"the predict coordinating {run_dir} gave no heartbeat for {idle:.0f} s "
                    f"(killed?); shard {index}/{count} stops")
            found = _session(folder, index, count) if coordinator.seen else None
            if found is not None and (session is None or found["token"] != session["token"]):
                if (coordinator.seen or "").split(" ")[0] != found["id"]:
                    time.sleep(_POLL_S)  # a session of an earlier predict, not yet replaced
                    continue
                session, worker, done = found, None, 0
                stale_s = session["stale_s"]
                if index < len(session["bounds"]):
                    s, e = session["bounds"][index]
                    worker = BandWorker(Path(run_dir) / session["file"], session["dataset"],
                                        s, e, session["block_rows"], cache_bytes)
                text = f"{session['token']} ready"
                if beat is None:
                    # late binding meant: each beat writes the current session's text
                    beat = Beat(folder / f"server-{index}", lambda: text,  # noqa: B023
                                session["heartbeat_s"])
                beat.beat()
            if worker is not None:
                assert session is not None  # the worker is the session's
                t = _answer(folder, session, worker, index, done)
                served, done = served + (t > done), max(done, t)
            time.sleep(_POLL_S)
    finally:
        if beat is not None:
            beat.end()
            with contextlib.suppress(FileNotFoundError):
                (folder / f"server-{index}").unlink()


def _latest(folder: Path, token: str) -> tuple:
    """``(t, exact)`` of the newest ``v-<token>-<t>-*.npy``, ``(0, None)`` if none."""
    best: tuple[int, Optional[bool]] = (0, None)
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(folder):
            m = re.fullmatch(rf"v-{token}-(\d+)-(f64|f32)\.npy", name)
            if m and int(m[1]) > best[0]:
                best = (int(m[1]), m[2] == "f64")
    return best


def _answer(folder: Path, session: dict, worker: BandWorker, index: int, done: int) -> int:
    """Answer the newest product if it is after ``done``; its number (or ``done``)."""
    t, exact = _latest(folder, session["token"])
    if t <= done:
        return done
    path = folder / f"v-{session['token']}-{t}-{'f64' if exact else 'f32'}.npy"
    try:
        v = np.load(path, allow_pickle=False, mmap_mode="r")
        shape = v.shape
    except FileNotFoundError:
        return done  # replaced by the next product meanwhile
    except (ValueError, OSError, EOFError) as exc:
        raise DataError(f"{path} is not a readable .npy array ({exc})") from None
    if len(shape) not in (1, 2) or (len(shape) == 2 and shape[1] > MAX_COLUMNS):
        raise DataError(f"{path} holds an array of shape {shape}; it is refused")
    v = load_array(path, shape, np.float64 if exact else np.float32)
    if v.shape[0] != session["columns"]:
        raise DataError(f"{path} has {v.shape[0]:,} rows, not {session['columns']:,}")
    result = worker.product(v, exact)
    _write(folder / f"r-{session['token']}-{t}-{index}.npy", lambda f: np.save(f, result))
    return t
