"""The one exception root of kernelcli.

Every error the library raises on purpose derives from :class:`KernelcliError`.
The CLI turns them into a one-line message and an exit status; nothing below the
CLI imports click.

Exit status (``../docs`` contract): 2 for a user's mistake (bad option, bad
configuration, bad data, a run directory that holds another run), 1 for any
other failure (out of memory, disk full, interrupted).
"""


class KernelcliError(Exception):
    """Base of every kernelcli error. ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class UsageError(KernelcliError):
    """A mistake of the user's: the message names the key, the value and what is accepted."""

    exit_code = 2


class ConfigError(UsageError):
    """The YAML configuration is malformed or asks for something impossible."""


class DataError(UsageError):
    """An input data file is missing, unreadable, of the wrong shape, or not finite."""


class RunDirError(UsageError):
    """A run directory is not a run, or holds a run of another configuration or data."""


class BudgetError(UsageError):
    """The memory budget cannot hold even one pair evaluation."""


class ComputeError(KernelcliError):
    """A failure while computing or storing (out of memory, disk full, interrupted)."""
