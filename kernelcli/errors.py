"""The one exception root of kernelcli.

Every error the library raises on purpose derives from :class:`KernelcliError`.
The CLI turns them into a one-line message and an exit status; nothing below the
CLI imports click.

An error about an argument of a library call names the argument as the library
spells it (``shard=``); the CLI shows the same error with its own flag (``--shard``):
see :meth:`KernelcliError.naming`.

Exit status: 2 for a user's mistake (bad option, bad
configuration, bad data, a run directory that holds another run), 1 for any
other failure (out of memory, disk full, interrupted).
"""


import re
from typing import Optional

_ARGUMENT = re.compile(r"<<(\w+)>>")


def resume_command(run_dir, shard=None) -> str:
    """The command that continues the run in ``run_dir`` (``shard``: ``(i, n)`` of a
    job array), as every message that points to it spells it."""
    again = "" if shard is None else f" --shard {shard[0]}/{shard[1]}"
    return f"kernelcli resume {run_dir}{again}"


def spelled(template: str, spell=None) -> str:
    """``template`` with each ``<<name>>`` mark spelled by ``spell(name)``; by default as
    the library's argument ``name=``."""
    return _ARGUMENT.sub(lambda m: f"{m[1]}=" if spell is None else spell(m[1]), template)


class KernelcliError(Exception):
    """Base of every kernelcli error. ``exit_code`` is what the CLI exits with."""

    exit_code = 1
    template: Optional[str] = None  # the message with <<argument>> marks, for an error made by naming()

    @classmethod
    def naming(cls, template: str, *args):
        """The error whose message is ``template`` with each ``<<name>>`` mark spelled as
        the library's argument ``name=``; :meth:`render` spells them otherwise (the
        CLI's flags). ``args`` follow the message, as the class takes them."""
        exc = cls(spelled(template), *args)
        exc.template = template
        return exc

    def render(self, spell) -> str:
        """The message with every argument named by ``spell(name)``."""
        if self.template is None:
            return str(self)
        return spelled(self.template, spell)


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


class DiskFullError(ComputeError):
    """No space (or quota, or file-size limit) left while writing ``path``."""

    def __init__(self, message: str, path=None):
        super().__init__(message)
        self.path = path


class DamagedFileError(RunDirError):
    """A file of a run directory is damaged, truncated, foreign, or fails its checksum."""


class QuarantinedError(DamagedFileError):
    """Damaged files of a run that were moved to ``quarantine/``, so computing again
    replaces them; ``blocks`` are the tiles among them (none for the test diagonal)."""

    def __init__(self, message: str, blocks=()):
        super().__init__(message)
        self.blocks = list(blocks)


class DamagedTiles(QuarantinedError):
    """Tiles that failed verification, already moved to ``folder`` (``quarantine/``) by
    the store; ``blocks`` lists them. Carries data only: the moving is the store's."""

    def __init__(self, run_dir, damaged, folder):
        blocks = [b for b, _ in damaged]
        first = str(damaged[0][1])
        more = "" if len(damaged) == 1 else f" (and {len(damaged) - 1} more tiles)"
        super().__init__(f"{first}{more}; moved to {folder}/: "
                         f"`{resume_command(run_dir)}` computes it again", blocks)


class Interrupted(ComputeError):
    """SIGINT or SIGTERM (or Ctrl-C's ``KeyboardInterrupt`` in a program without the
    CLI's handlers) stopped the work at a safe point; completed tiles are kept.

    ``exit_code`` is 128 + the signal's number, as a shell reports a process that a
    signal ended: 130 for SIGINT, 143 for SIGTERM.
    """

    def __init__(self, message: str, signum: int = 2):
        super().__init__(message)
        self.signum = int(signum)
        self.exit_code = 128 + self.signum

    def __reduce__(self):
        return type(self), (str(self), self.signum)


class NotPositiveDefiniteError(KernelcliError):
    """The regularised kernel ``K + reg I`` of a prediction is not positive definite
    (exit status 1): a property of the user's kernel and ridge, raised instead of
    returning NaNs; the message names the kernel, the ridge, the matrix size and a
    larger ridge to try."""

    exit_code = 1


class NotConvergedError(KernelcliError):
    """Conjugate gradients did not reach the tolerance within the iteration limit (exit 1)."""

    exit_code = 1


class FiniteNetworkError(NotImplementedError):
    """``init_fn`` or ``apply_fn`` of a :mod:`kernelcli.stax` network, called as in
    neural-tangents: kernelcli computes infinite-width kernels only, there is no
    finite network."""


class MissingNameError(ConfigError, AttributeError):
    """A neural-tangents name that kernelcli does not have (``stax.GlobalSelfAttention``,
    ``nt.empirical_kernel_fn``): the message says what differs and what kernelcli
    offers instead. An ``AttributeError`` too, so ``hasattr`` still answers False."""
