"""The ``kernelcli`` command: a thin layer over :mod:`kernelcli.run`.

- :mod:`._main`: the group and the list of its commands;
- :mod:`._click_group`: the one edge where errors and signals become exit codes;
- :mod:`._output`: stdout whose failed writes (a full device, a closed descriptor or
  pipe) are one error, so a result that was not written never exits 0;
- :mod:`._options`: the options several commands share;
- :mod:`._setup`: what the command line changes for the whole process (signal
  handlers, host devices, compilation cache, JAX's warnings, the GPU warning);
- :mod:`._commands_run`, :mod:`._commands_files`, :mod:`._commands_analysis`: the
  commands, each parsing its options, calling one library function and printing
  its typed result with a printer of :mod:`._print_run`, :mod:`._print_estimate` or
  :mod:`._print_predict`.

Nothing below :mod:`kernelcli.cli` imports it.
"""

from ._main import main

__all__ = ["main"]
