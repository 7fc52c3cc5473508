"""The ``kernelcli`` group and the list of its commands."""

from __future__ import annotations

import click

from .. import __version__
from . import _setup
from ._click_group import Main
from ._commands_analysis import estimate, predict
from ._commands_files import assemble, clean, status, verify
from ._commands_run import compute, extend, resume
from ._options import CONTEXT, group_verbose_option

COMMANDS = (compute, resume, assemble, clean, estimate, predict, status, verify, extend)


@click.group(cls=Main, commands=COMMANDS, context_settings=CONTEXT)
@click.version_option(__version__, "--version", prog_name="kernelcli")
@group_verbose_option
def main():
    """Infinite-width NNGP and NTK kernel matrices of convolutional networks, for whole
    image data sets, computed in tiles that fit memory and survive interruption.

    \b
    Typical session:
      kernelcli estimate configs/demo_digits.yaml --time            # plan, peak memory, time
      kernelcli compute configs/demo_digits.yaml                    # writes runs/.../kernels.h5
      kernelcli status runs/demo_digits                             # progress of a run
      kernelcli resume runs/demo_digits                             # after a kill or Ctrl-C

    \b
    Many machines (docs/scale-out.md):
      kernelcli compute CONFIG --shard I/N      # process I (0-based) of a job array of N
      kernelcli assemble RUN_DIR                # the result, once every tile exists
      kernelcli clean RUN_DIR                   # drop the tiles once kernels.h5 verifies
      kernelcli compute CONFIG --executor ray --address HEAD:6379   # tiles on Ray actors

    The configuration format is described in docs/config-reference.md.
    """
    _setup.configure_process(click.get_current_context().invoked_subcommand)

