"""Opening an existing run: its store, the configuration its manifest records, and
its result when that verifies.

The bottom of the commands: ``compute``, ``resume``, ``assemble``, ``extend``,
``clean``, ``verify`` and ``status`` all open a run this way, and nothing here knows
of them.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Optional

from ..config import RunConfig, parse_config
from ..errors import DamagedFileError, UsageError
from ..store import TEST_DIAG, Manifest, RunStore, check_untrusted
from ._job import config_fingerprint, extended_config

__all__ = ["check_present_files", "check_recorded_config", "load_run_config", "missing_tiles_problem",
           "recorded_config", "verified_result", "with_run_dir"]


def with_run_dir(cfg: RunConfig, run_dir) -> RunConfig:
    """``cfg`` writing to ``run_dir`` (``None``: as configured)."""
    if run_dir is None:
        return cfg
    return dataclasses.replace(cfg, output=dataclasses.replace(cfg.output,
                                                            run_dir=Path(run_dir)))


def load_run_config(run_dir) -> tuple[RunStore, RunConfig]:
    """The store of ``run_dir`` and the configuration its manifest recorded."""
    store = RunStore.open(run_dir)
    Manifest.check(store.manifest, run_dir)
    return store, check_recorded_config(store)


def recorded_config(store: RunStore) -> RunConfig:
    """The configuration the (checked) manifest of ``store`` records, its paths as when
    the run started (or next to the run, when config, data and run moved together)."""
    m, run_dir = store.manifest, store.run_dir
    recorded = Path(m.get("config_dir", "."))
    bases = [recorded]
    moved = m.get("config_dir_from_run")
    if isinstance(moved, str) and (Path(run_dir) / moved).is_dir():
        bases.insert(0, Path(os.path.normpath(Path(run_dir) / moved)))
    try:
        configs = [parse_config(m["config_text"], base_dir=b, source=b / "config.yaml")
                   for b in bases]
    except UsageError as exc:
        raise DamagedFileError(f"{run_dir / 'manifest.json'}: its configuration is not valid "
                               f"({exc})") from None
    # where config, data and run moved together, the data is found next to the run;
    # otherwise where the configuration was when the run started
    cfg = next((c for c in configs if c.data.x1.exists()), configs[-1])
    return with_run_dir(extended_config(cfg, m.get("extend")), Path(run_dir))


def check_recorded_config(store: RunStore) -> RunConfig:
    """The configuration of the manifest, which must have the fingerprint recorded beside
    it (a manifest edited and given a fresh checksum is still refused)."""
    cfg = recorded_config(store)
    extension = store.manifest.get("extend")
    if config_fingerprint(cfg, extension) != store.manifest["config_fingerprint"]:
        raise DamagedFileError(f"{store.run_dir / 'manifest.json'}: the configuration it "
                               f"records does not have the fingerprint it was recorded with; "
                               f"start the run afresh with `kernelcli compute CONFIG "
                               f"--overwrite`")
    return cfg


def verified_result(store: RunStore) -> Optional[str]:
    """The result's path when ``kernels.h5`` verifies; else ``None``, after moving a
    result that fails (another run's, damaged) to ``quarantine/`` so it is rebuilt. The
    result of the run this one grew from (``kernelcli extend``) is deleted instead."""
    store.growth.drop_superseded()
    if not store.finished:
        return None
    if store.result_problem() is None:
        return str(store.result_path)
    store.quarantine(store.result_path)
    return None


def missing_tiles_problem(store: RunStore, plan, done: set) -> Optional[str]:
    """What is wrong with a finished run that keeps its tiles (none removed on purpose)
    but lacks some: an ``extend`` stopped between removing the tiles it does not keep
    and its switch, or tiles deleted by hand. ``None`` when nothing is missing. The
    result may still verify; the run is not what an uninterrupted run leaves, so
    ``status`` and ``verify`` say so (the one wording of both)."""
    if not store.finished or store.tiles_removed is not None:
        return None
    missing = sorted(b.key for b in plan.blocks if b.key not in done)
    if not missing:
        return None
    shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
    return (f"{len(missing):,} of {plan.blocks_total:,} tiles are missing from "
            f"{store.tiles_dir} ({shown}) though kernels.h5 is there: an interrupted "
            f"`kernelcli extend` (run the same extend command again to finish it) or tiles "
            f"deleted by hand (`kernelcli clean {store.run_dir}` keeps kernels.h5 alone)")


def check_present_files(store: RunStore) -> None:
    """A ``kernels.h5`` or ``test_diag.h5`` that is there but is not a regular file of
    the run (a FIFO, a device, a directory, a link out) is named, exit 2, rather than
    taken for "not assembled yet" (``assemble`` still replaces one it wrote over)."""
    for path in (store.result_path, store.run_dir / TEST_DIAG):
        if os.path.lexists(path):
            check_untrusted(path, store.run_dir)
