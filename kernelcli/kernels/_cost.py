"""A cost model of the accelerator engine, until a GPU is at hand to measure it.

Per pair, each layer streams its input covariances from device memory and writes its
output ones (NNGP, and NTK when wanted); a pointwise layer (a nonlinearity,
``layer_norm``) also reads the two inputs' variances. A pair batch costs the program's
kernel launches once. So a kernel entry takes about

    bytes_per_pair / bandwidth + launches_per_batch * launch_latency / pair_batch

seconds: the bandwidth floor of a memory-bound elementwise program plus the launch
overhead shared by the batch's pairs. With ``kernel.augment`` a pair is |G| network
evaluations (the pair program evaluates ``(x, g y)`` for every flip ``g``): the bytes
are one evaluation's, and the bandwidth term counts them |G| times. Defaults: an H200
(4.8 TB/s, ~5 us a launch).
The sizes come from the architecture's shapes (``spec.layer_shapes``) and which layers
hold the full ``(H*W)^2`` covariance (``full_needed``), the launches from the compiled
program's text (:func:`count_launches`) or, without one, from its structure.
"""

from __future__ import annotations

import dataclasses
import re
from math import prod
from typing import Optional, Sequence

from ..config import branches, layer_shapes, layer_type
from ._compose import full_needed
from ._maps import kernel_map

H200_BANDWIDTH = 4.8e12      # bytes per second (HBM3e)
H200_LAUNCH_LATENCY = 5e-6   # seconds per kernel launch, launch and tail together


@dataclasses.dataclass(frozen=True)
class LayerCost:
    """Bytes one layer reads and writes per pair (``name``: ``<index>:<layer>``, the
    input's and output's layouts as ``input``/``output``)."""

    name: str
    read_bytes: int
    write_bytes: int

    @property
    def bytes(self) -> int:
        return self.read_bytes + self.write_bytes


@dataclasses.dataclass(frozen=True)
class CostModel:
    """The predicted cost of the accelerator engine at ``pair_batch`` pairs per call.

    ``launches_source``: where the launch count comes from, ``"hlo <platform>"`` (the
    compiled program; on CPU an estimate of what XLA:GPU launches, since its fusion
    decisions differ) or ``"structural"`` (a fused pass per layer, plus the input and
    the output). ``evaluations``: network evaluations per pair (the flip group's size
    under ``kernel.augment``, else 1); ``layers`` and ``bytes_per_pair`` are one
    evaluation's."""

    layers: tuple
    launches_per_batch: int
    launches_source: str
    pair_batch: int
    bandwidth: float = H200_BANDWIDTH
    launch_latency: float = H200_LAUNCH_LATENCY
    evaluations: int = 1

    @property
    def bytes_per_pair(self) -> int:
        return sum(c.bytes for c in self.layers)

    @property
    def bandwidth_seconds_per_entry(self) -> float:
        return self.evaluations * self.bytes_per_pair / self.bandwidth

    @property
    def launch_seconds_per_entry(self) -> float:
        return self.launches_per_batch * self.launch_latency / max(1, self.pair_batch)

    @property
    def seconds_per_entry(self) -> float:
        return self.bandwidth_seconds_per_entry + self.launch_seconds_per_entry

    def top(self, n: int = 3) -> list:
        """The ``n`` layers that move the most bytes, most first."""
        return sorted(self.layers, key=lambda c: -c.bytes)[:n]

    def to_dict(self) -> dict:
        return {"cost_launches_per_batch": self.launches_per_batch,
                "cost_launches_source": self.launches_source,
                "cost_bytes_per_pair": self.bytes_per_pair,
                "cost_layers": [dataclasses.asdict(c) for c in self.layers],
                "cost_evaluations_per_pair": self.evaluations,
                "cost_bandwidth": self.bandwidth, "cost_launch_latency": self.launch_latency,
                "cost_seconds_per_entry": self.seconds_per_entry}


def layer_costs(kfn) -> tuple:
    """:class:`LayerCost` of every layer ``kfn`` evaluates per pair, branches included,
    with the input (building the pair's covariance) first and the output last."""
    arch, item = kfn.arch, kfn.dtype.itemsize
    arrays = 2 if "ntk" in kfn.base_kinds else 1
    ro = arch.readouts
    layers = tuple(arch.layers if ro is None
                   else tuple(arch.layers[:ro.after[-1]]) + tuple(ro.head))
    spatial = len(kfn.input_shape) >= 2

    def entries(shape, full: bool) -> int:
        n = prod(shape[:-1]) if spatial and len(shape) >= 2 else 1
        return n * n if full else n

    out: list = []

    def first_layer(prefix: str, k: int) -> bool:
        return not prefix and k == 0

    def walk(layers, in_shape, out_full: bool, prefix: str):
        need = full_needed(layers, out_full)
        rows = layer_shapes(dataclasses.replace(arch, layers=tuple(layers), readouts=None),
                            in_shape)
        for k, (layer, before, after) in enumerate(rows):
            t = layer_type(layer)
            name = f"{prefix}{k}:{t.name}"
            # the raw input's NTK is a scalar zero: the first layer reads the NNGP alone
            reads = kernel_map(layer).reads  # a layer that reads a part of its input
            taken = reads(layer, before) if reads else entries(before, need[k])
            read = (1 if first_layer(prefix, k) else arrays) * taken * item
            if t.reads_variances:  # the two inputs' own variances, on the diagonal
                read += 2 * entries(before, False) * item
            write = arrays * entries(after, need[k + 1]) * item
            held = branches(layer)
            for b, branch in enumerate(held):
                if branch:
                    walk(branch, before, need[k + 1], f"{name}.{b}.")
            if held:  # the merge reads each branch's output (or the input itself)
                read = len(held) * arrays * entries(after, need[k + 1]) * item
            if (t.reads_variances and k and kernel_map(layers[k - 1]).fuses
                    and out[-1].name == f"{prefix}{k - 1}:{layer_type(layers[k - 1]).name}"):
                # a convolution and the nonlinearity after it are one pass (the
                # engines' blocks): it reads the convolution's input, writes this output
                conv = out.pop()
                name = f"{conv.name}+{t.name}"
                read = conv.read_bytes + read - conv.write_bytes
            out.append(LayerCost(name, read, write))

    first = entries(kfn.input_shape, full_needed(layers)[0]) if not kfn.flat_input else 1
    # two examples read (a flat-input net reads one Gram entry); the NNGP written
    x_read = item if kfn.flat_input else 2 * prod(kfn.input_shape) * item
    out.append(LayerCost("input", x_read, first * item))
    walk(layers, kfn.input_shape, False, "")
    out.append(LayerCost("output", arrays * item, len(kfn.kinds) * item))
    return tuple(out)


# Instructions that launch nothing on XLA:GPU: they name buffers or are compile-time.
_FREE = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all",
         "partition-id", "replica-id", "opt-barrier", "add-dependency", "domain",
         "copy-start", "copy-done", "reshape"}
_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*.*?\s([a-z][a-z0-9\-]*)\(")
_TRIP = re.compile(r'known_trip_count"?\s*[:=]\s*\{\s*"?n"?\s*[:=]\s*"?(\d+)')


def count_launches(hlo_text: str) -> int:
    """Kernel launches of one call of a compiled program, from its text
    (``compiled.as_text()``): each instruction of the entry computation that does work
    (a fusion, a dot, a custom call, an unfused elementwise op) is one; a ``while`` is
    its body's (and condition's) launches times its known trip count (1 where XLA does
    not know it); a ``conditional`` its largest branch's plus one; a ``call`` its
    callee's. Instructions inside fusions are not counted: a fusion is one kernel."""
    comps: dict = {}
    entry, current = None, None
    for line in hlo_text.splitlines():
        head = _COMPUTATION.match(line)
        if head and line.rstrip().endswith("{") and not line[:1].isspace():
            current = head[2]
            comps[current] = []
            if head[1]:
                entry = current
            continue
        if current is not None and line.strip() == "}":
            current = None
            continue
        if current is not None:
            m = _INSTRUCTION.match(line)
            if m:
                comps[current].append((m[1], line))
    if entry is None:
        return 0
    memo: dict = {}

    def callee(line: str, key: str) -> list:
        found = (re.search(rf"\b{key}=\{{([^}}]*)\}}", line)
                 or re.search(rf"\b{key}=(%?[\w.\-]+)", line))
        if not found:
            return []
        return [n.strip().lstrip("%") for n in found[1].split(",") if n.strip()]

    def launches(name: str) -> int:
        if name in memo:
            return memo[name]
        memo[name] = 0  # a cycle (none in valid HLO) counts nothing
        total = 0
        for op, line in comps.get(name, ()):
            if op in _FREE:
                continue
            if op == "while":
                trip = _TRIP.search(line)
                body = sum(launches(c) for c in callee(line, "body") + callee(line, "condition"))
                total += (int(trip[1]) if trip else 1) * body
            elif op == "conditional":
                total += 1 + max([launches(c) for c in callee(line, "branch_computations")
                                  + callee(line, "true_computation")
                                  + callee(line, "false_computation")] or [0])
            elif op == "call":
                total += sum(launches(c) for c in callee(line, "to_apply"))
            else:
                total += 1
        memo[name] = total
        return total

    return launches(entry)


def structural_launches(kfn) -> int:
    """Launches per call of a plan with one fused pass per layer: every layer
    (branches' too), the input and the output."""
    return len(layer_costs(kfn))


def cost_model(kfn, pair_batch: int, *, hlo_text: Optional[str] = None,
               platform: str = "cpu", bandwidth: float = H200_BANDWIDTH,
               launch_latency: float = H200_LAUNCH_LATENCY) -> CostModel:
    """The :class:`CostModel` of ``kfn`` at ``pair_batch`` pairs per call: launches
    from ``hlo_text`` (the compiled pairs program, for ``platform``) when given, else
    structural."""
    costs = layer_costs(kfn)
    if hlo_text is not None:
        launches, source = count_launches(hlo_text), f"hlo {platform}"
    else:
        launches, source = len(costs), "structural"
    return CostModel(costs, launches, source, int(pair_batch), float(bandwidth),
                     float(launch_latency), evaluations=len(kfn.group))


def pairs_program_text(kfn, n_rows: int, n_cols: int, pair_batch: int) -> Optional[str]:
    """The text of the compiled pairs program ``kfn`` calls on ``n_rows x n_cols``
    blocks at ``pair_batch`` pairs (``KernelFn.pairs_executable``: the executable the
    memory model compiled, no second compilation); ``None`` for a flat-input network's
    grid program or where the text is not available."""
    if kfn.uses_grid(n_rows, n_cols, pair_batch):
        return None
    try:
        return kfn.pairs_executable(n_rows, n_cols, pair_batch).as_text()
    except (AttributeError, NotImplementedError):  # an executable without its text
        return None


def describe_cost(model: CostModel, n: int = 3) -> Sequence[str]:
    """Lines for ``estimate``'s text output."""
    lines = [f"{model.launches_per_batch:,} per pair batch of {model.pair_batch:,} "
             f"({_source(model.launches_source)})",
             f"{model.bytes_per_pair / 1e6:,.3f} MB per "
             + ("pair" if model.evaluations == 1
                else f"evaluation, {model.evaluations} per pair (kernel.augment)")
             + "; most: "
             + ", ".join(f"{c.name} {c.bytes / 1e6:,.3f} MB" for c in model.top(n)),
             f"{model.seconds_per_entry * 1e3:.4f} ms per entry at "
             f"{model.bandwidth / 1e12:g} TB/s and {model.launch_latency * 1e6:g} us a "
             f"launch (bandwidth {model.bandwidth_seconds_per_entry * 1e3:.4f} ms + "
             f"launches {model.launch_seconds_per_entry * 1e3:.4f} ms)"]
    return lines


def _source(source: str) -> str:
    if source == "hlo cpu":
        return "counted in the program compiled for CPU: an estimate of XLA:GPU's"
    if source.startswith("hlo "):
        return f"counted in the program compiled for {source[4:]}"
    return "one fused pass per layer, plus input and output"
