"""Progress on stderr: a live bar on a terminal, a line per few percent otherwise."""

from __future__ import annotations

import sys
import time


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class ProgressPrinter:
    """Callable taking :class:`kernelcli.run.Progress`; ``stream`` defaults to stderr.

    On a terminal it redraws one line (at most 5 times a second); otherwise it
    prints a line each time another ``step`` percent is done, so logs stay short.
    The first line also says where the run computes (``on 2 cpu devices``), so a log
    shows whether a job got the accelerator it asked for; it is ended with a newline
    on a terminal too, to stay visible above the redrawn line. What the backend says of
    its workers (a Ray cluster: "waiting for 1 actor (cluster has 0 CPUs free); 1 node
    lost, 2 blocks requeued") ends the line, and a line is printed whenever it changes;
    said before the plan exists (nothing counted yet), it is a line of its own.
    """

    def __init__(self, name: str, stream=None, step: float = 5.0):
        self.name = name
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.step = step
        self._last_draw = 0.0
        self._last_pct = -1.0
        self._first = True
        self._note = ""

    def line(self, p) -> str:
        pct = 100.0 * p.pairs_done / max(p.pairs_total, 1)
        rate = p.pairs_this_run / p.elapsed if p.elapsed > 0 else 0.0
        left = p.pairs_total - p.pairs_done
        eta = format_duration(left / rate) if rate > 0 else "--:--"
        width = 24
        filled = int(width * pct / 100)
        bar = "#" * filled + "-" * (width - filled)
        return (f"{self.name} [{bar}] {pct:5.1f}%  pairs {p.pairs_done:,}/{p.pairs_total:,}  "
                f"blocks {p.blocks_done}/{p.blocks_total}  {rate:,.1f} pairs/s  "
                f"elapsed {format_duration(p.elapsed)}  ETA {eta}"
                + (f"  {p.note}" if getattr(p, "note", "") else ""))

    def __call__(self, p) -> None:
        note = getattr(p, "note", "")
        changed, self._note = note != self._note, note
        if not p.blocks_total and note:  # before the plan: the backend's word alone
            if changed:
                self.stream.write(f"{self.name}: {note}\n")
                self.stream.flush()
            return
        pct = 100.0 * p.pairs_done / max(p.pairs_total, 1)
        finished = p.pairs_done >= p.pairs_total
        if self._first:
            self._first = False
            self._last_draw = time.monotonic()
            self._last_pct = pct - pct % self.step
            self.stream.write(self.line(p) + where(p) + "\n")
            self.stream.flush()
        elif self.tty:
            now = time.monotonic()
            if finished or changed or now - self._last_draw >= 0.2:
                self._last_draw = now
                self.stream.write("\r" + self.line(p) + ("\n" if finished else ""))
                self.stream.flush()
        elif finished or changed or pct >= self._last_pct + self.step or self._last_pct < 0:
            self._last_pct = pct - pct % self.step
            self.stream.write(self.line(p) + "\n")
            self.stream.flush()

    def stage(self, text: str) -> None:
        """A step after the pairs that takes time of its own (verifying every tile and
        writing ``kernels.h5``: minutes at N = 50,000): a line of its own, so no wait
        is silent."""
        self.stream.write(f"{self.name}: {text}\n")
        self.stream.flush()


def where(p) -> str:
    """``"  on 2 cpu devices"`` from a Progress that knows its devices, else ``""``."""
    n, platform = getattr(p, "devices", 0), getattr(p, "platform", "")
    if not n:
        return ""
    return f"  on {n} {platform} device{'' if n == 1 else 's'}"
