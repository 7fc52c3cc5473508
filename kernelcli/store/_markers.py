"""``shards/<I>of<N>.json``: which process of a job array worked on a run; and
``shards/ray.json``: what the last Ray driver saw of its cluster.

A marker only says who ran (host, pid, start time and what the process reported);
the tiles are the progress record, so an unreadable marker is skipped, never an
error. The Ray record is written by a Ray driver only when there is something to say
(actors awaited or given up, nodes or actors lost, blocks requeued), rewritten at each
change and once more when the driver stops computing (``running: false``).
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from pathlib import Path
from typing import Optional

from .._untrusted import read_untrusted
from ..errors import DamagedFileError
from ._atomic import storage_error, write_bytes_atomic

_MARKER_BYTES = 64 << 10  # a marker is a small JSON record

SHARD_MARKER = re.compile(r"^(\d+)of(\d+)\.json$")
RAY_RECORD = "ray.json"
#: every name kernelcli writes in ``shards/``
PROCESS_RECORD = re.compile(r"^(\d+of\d+|ray)\.json$")


def _write(shards_dir: Path, name: str, record: dict) -> Path:
    path = shards_dir / name
    try:
        shards_dir.mkdir(exist_ok=True)
    except OSError as exc:
        raise storage_error(exc, shards_dir) from None
    write_bytes_atomic(path, (json.dumps(record, sort_keys=True) + "\n").encode())
    return path


def _who() -> dict:
    return dict(host=socket.gethostname(), pid=os.getpid())


def mark_ray(shards_dir: Path, info: dict) -> Path:
    """Write ``<shards_dir>/ray.json`` (atomically): ``info`` (the driver's
    :class:`~kernelcli.pipeline._ray_pool.ClusterState` and ``running``) plus the host,
    pid and time."""
    return _write(shards_dir, RAY_RECORD,
                  dict(info, **_who(), updated=time.strftime("%Y-%m-%dT%H:%M:%S%z")))


def ray_record(shards_dir: Path) -> Optional[dict]:
    """What ``shards/ray.json`` holds, with its ``mtime``; ``None`` when there is none;
    ``{"unreadable": why}`` when it is there but cannot be read as kernelcli writes it
    (too large, a FIFO, a link, not JSON): a diagnostics file never fails a command."""
    path = shards_dir / RAY_RECORD
    try:
        mtime = path.lstat().st_mtime
    except OSError:
        return None
    try:
        record = json.loads(read_untrusted(str(path), shards_dir, _MARKER_BYTES))
    except (OSError, ValueError, DamagedFileError) as exc:
        return {"unreadable": str(exc)}  # a diagnostics file: skipped, and said so
    if not isinstance(record, dict):
        return {"unreadable": f"{path} does not hold a JSON object"}
    return dict(record, mtime=mtime)


def mark_shard(shards_dir: Path, index: int, count: int, info: dict) -> Path:
    """Write ``<shards_dir>/<index>of<count>.json`` (atomically, rewritten on each
    start): ``info`` plus the host, pid and time."""
    record = dict(info, index=int(index), count=int(count), **_who(),
                  started=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    return _write(shards_dir, f"{int(index)}of{int(count)}.json", record)


def shard_markers(shards_dir: Path) -> tuple[list[dict], list[str]]:
    """The markers under ``shards_dir``, newest first, each with at least ``index``,
    ``count`` and ``mtime``; and ``"<path> (why)"`` for each marker that is there but
    cannot be read as kernelcli writes one (too large, a FIFO, a link out, not JSON): a
    diagnostics file, which a command skips and says so, never fails for. One scan."""
    try:
        entries = list(os.scandir(shards_dir))
    except (FileNotFoundError, NotADirectoryError):
        return [], []
    out, skipped = [], []
    for entry in entries:
        match = SHARD_MARKER.match(entry.name)
        if match is None:
            continue
        record = {}
        try:
            mtime = entry.stat(follow_symlinks=False).st_mtime
            record = json.loads(read_untrusted(entry.path, shards_dir, _MARKER_BYTES))
        except (OSError, ValueError, DamagedFileError) as exc:
            skipped.append(f"{entry.path} ({exc})")
            continue
        if not isinstance(record, dict):
            record = {}
        record.update(index=int(match[1]), count=int(match[2]), mtime=mtime)
        out.append(record)
    out.sort(key=lambda r: (-r["mtime"], r["count"], r["index"]))
    return out, sorted(skipped)
