"""The ``kernelcli`` console script's first code.

SIGINT and SIGTERM are recorded from the moment it runs: importing the command line's
modules (click, the commands, the configuration schema) takes a second or more on a
loaded machine, and a signal then would otherwise raise ``KeyboardInterrupt`` inside
an import (a traceback, exit 1) or end the process by its default action. The
recorder is handed to the CLI's own handlers when they are installed
(:func:`kernelcli._interrupt.install` reads its ``first``), so such a signal ends the
command as one at any later moment does: one line, exit 128 + its number.

Only a signal in the interpreter's own start-up, before this module runs, is left to
Python's defaults.
"""

import signal


class EarlySignals:
    """A handler that only remembers the first SIGINT/SIGTERM (``first``)."""

    def __init__(self):
        self.first = None

    def __call__(self, signum, frame):
        if self.first is None:
            self.first = signum


def main():
    early = EarlySignals()
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, early)
    from .cli import main as cli

    return cli()
