"""The disk-full message names what the free-space check really asks for."""

from __future__ import annotations

from types import SimpleNamespace

from kernelcli.config import format_size
from kernelcli.errors import DiskFullError
from kernelcli.run._finish import _disk_full  # the message, without filling a disk
from kernelcli.store import result_space_bytes


def test_the_disk_full_message_counts_the_metadata_margin_the_check_wants(tmp_path):
    block = SimpleNamespace(key="r0c0", r0=0, r1=16, c0=0, c1=16)
    plan = SimpleNamespace(itemsize=4, kinds=("nngp", "ntk"), blocks=[block], n1=16,
                           n_test=0, n2=16)
    store = SimpleNamespace(done_keys=lambda: set(), finished=False, run_dir=tmp_path)
    exc = _disk_full(store, plan, DiskFullError("disk full", tmp_path / "x.h5"), None)
    data = 16 * 16 * 4 * 2
    tiles = data + 4096
    # freeing what the message names is enough for the assembly's own check
    assert f"needs about {format_size(tiles + result_space_bytes(data))} more" in str(exc)
    assert result_space_bytes(data) >= data + 2**20 + data // 100
