"""XLA's own peak estimate of a ``KernelFn``'s programs: what the planner sizes pair
batches (and ``estimate`` its peaks) by. Each estimate is of the executable the run
then calls (compiled once and kept by ``SerialJit``), so asking costs no extra
compilation when the run uses those shapes.

A pairs call of two or more whole chunks of the cpu engine's loop holds the same
temporaries whatever the number of chunks (the loop's buffers are one chunk's): its
memory at another such size differs only by the index arguments and the outputs of
the pairs between. So once one such size is compiled, the planner's question at
another (``plan.memory_line`` asks at a batch and at half of it) is answered without
compiling a program the run would not call (``tests/kernels/test_kernels_memory.py`` checks
the answer against the compiled program's)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ._programs import device_mesh, replicated, split

# Pair calls of the cpu engine smaller than this (or than a chunk) are padded up to it:
# one program for every small batch (``call_pairs``).
SMALL_CALL_PAIRS = 32


def call_pairs(pair_batch: int, chunk: int) -> int:
    """Pairs one call of the cpu engine's pairs program evaluates for batches of
    ``pair_batch`` pairs, its loop taking ``chunk`` pairs a step. A batch smaller than
    ``min(chunk, SMALL_CALL_PAIRS)`` is padded up to that, so every small batch is one
    program. The planner sizes a batch by the compiled memory at two batches
    (``plan.memory_line``); on a small data set both are small, and were two
    compilations of nearly the same program before the first pair was computed (a
    third of a first call's time on a 3-layer flatten network, measured by
    bench/first_call.py). The padded pairs cost less than a compilation: a chunk or less of
    cache-sized work per call. A batch of a chunk or more is rounded up to whole
    chunks, which the program's loop pads it to anyway (the same pairs in each chunk,
    so the same bits): then the memory at two such batches is one compilation (the
    module docstring). Pooling networks have a chunk of one pair: unchanged."""
    pb = max(1, int(pair_batch))
    if pb >= chunk:
        return -(-pb // chunk) * chunk
    return max(pb, min(chunk, SMALL_CALL_PAIRS))


class CompiledMemory:
    """The memory model of a ``KernelFn``, asked of its compiled ``programs``
    (``_programs.Programs``) for inputs of ``input_shape`` in ``dtype``.
    ``variance_shapes``: per-example shape of each recorded variance;
    ``live_bytes_per_pair``: the fallback's bytes per pair where a backend has no
    memory analysis; ``uses_grid(rows, cols, pairs)``: whether such a call is the grid
    program; ``on_mesh(devices)``: whether calls on ``devices`` take the mesh path
    (read at each question: tests switch a kernel function's path after it is built);
    ``whole_chunks(pairs)``: whether a pairs call of that size is two or more whole
    chunks of the cpu engine's loop (see the module docstring); ``pair_io``: bytes per
    pair of the outputs and of the index arguments, ``(outputs, indices)``.
    """

    def __init__(self, programs, input_shape, dtype, variance_shapes, live_bytes_per_pair: int,
                 uses_grid, on_mesh, whole_chunks=lambda pairs: False, pair_io=(0, 0)):
        self._programs = programs
        self.input_shape = input_shape
        self.dtype = dtype
        self.variance_shapes = variance_shapes
        self.live_bytes_per_pair = live_bytes_per_pair
        self._uses_grid = uses_grid
        self._on_mesh = on_mesh
        self._whole_chunks = whole_chunks
        self._pair_io = pair_io
        self._memory: dict = {}  # compiled_memory's answers, by sizes
        self._analysed: dict = {}  # those read from XLA's analysis of a compiled program

    def compiled_memory(self, n_rows: int, n_cols: int, pair_batch: int,
                        arguments: bool = True) -> int:
        """XLA's own peak estimate (bytes) for one ``pairs`` call with blocks of
        ``n_rows`` / ``n_cols`` examples and ``pair_batch`` pairs: arguments,
        outputs and temporaries of the compiled program. ``arguments=False``
        leaves out the block's inputs and their variances, which all pairs of the
        block share: what remains grows with the pairs in flight.

        Each new set of sizes is a compilation, unless another size of whole chunks
        was compiled for these blocks (:meth:`_from_whole_chunks`); its answer is kept,
        so planning the same shapes again (every ``kernel_matrix`` call of a notebook)
        costs nothing.
        """
        key = (int(n_rows), int(n_cols), int(pair_batch), bool(arguments))
        if key not in self._memory:
            got = self._analysed.get(key)
            if got is None:
                got = self._from_whole_chunks(*key)
            if got is None:
                got = self._compiled_memory(*key)
            self._memory[key] = got
        return self._memory[key]

    def _from_whole_chunks(self, n_rows: int, n_cols: int, pair_batch: int,
                           arguments: bool):
        """The answer at ``pair_batch`` pairs from an analysed program of these blocks
        at another size, both two or more whole chunks of a per-device program (see
        the module docstring); ``None`` where there is none."""
        if (not self._whole_chunks(pair_batch) or self._uses_grid(n_rows, n_cols, pair_batch)
                or self._on_mesh(jax.local_devices())):
            return None
        outputs, indices = self._pair_io
        for (r, c, p, a), m in self._analysed.items():
            if (r, c, a) == (n_rows, n_cols, arguments) and self._whole_chunks(p):
                return m + (pair_batch - p) * (outputs + arguments * indices)
        return None

    def pairs_executable(self, n_rows: int, n_cols: int, pair_batch: int):
        """The compiled program one pair call of ``n_rows x n_cols`` blocks at
        ``pair_batch`` pairs runs (the grid program of a flat-input block, the mesh
        program, or the first device's pairs program), compiled once and kept: the
        memory model's analysis and the cost model's launch count read this one
        executable, and the run's calls of these shapes reuse it."""
        # Compiled for the first local device, where a run's first pair batches go (or,
        # on a mesh, for all of them). On a mesh XLA's analysis is of the per-device
        # program.
        devices = jax.local_devices()
        mesh = device_mesh(devices) if self._on_mesh(devices) else None
        on = (jax.sharding.SingleDeviceSharding(devices[0]) if mesh is None
              else replicated(mesh))

        def spec(shape, dtype=self.dtype, sharding=on):
            return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)

        v = self.variance_shapes
        args = (spec((n_rows,) + self.input_shape), tuple(spec((n_rows,) + t) for t in v),
                spec((n_cols,) + self.input_shape), tuple(spec((n_cols,) + t) for t in v))
        if self._uses_grid(n_rows, n_cols, pair_batch):
            first = jax.sharding.SingleDeviceSharding(devices[0])  # one device: grid_values
            args = jax.tree_util.tree_map(lambda a: spec(a.shape, sharding=first), args)
            return self._programs.grid.compile(*args)
        if mesh is not None:
            index = spec((pair_batch * len(devices),), jnp.int32, split(mesh))
            return self._programs.mesh("pairs", mesh).compile(*args, index, index)
        index = spec((pair_batch,), jnp.int32)
        return self._programs.pairs.compile(*args, index, index)

    def _compiled_memory(self, n_rows: int, n_cols: int, pair_batch: int,
                         arguments: bool) -> int:
        m = self.pairs_executable(n_rows, n_cols, pair_batch).memory_analysis()
        if m is None:  # backend without memory analysis: fall back to the live-tensor count
            return 3 * pair_batch * self.live_bytes_per_pair
        for a in (True, False):  # both answers of this program, one analysis
            self._analysed[(n_rows, n_cols, pair_batch, a)] = int(
                a * m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes)
        return self._analysed[(n_rows, n_cols, pair_batch, arguments)]

    def compiled_stats_memory(self, rows: int) -> int:
        """XLA's peak estimate (bytes) for one per-input call on ``rows`` inputs."""
        devices = jax.local_devices()
        if self._on_mesh(devices):
            mesh = device_mesh(devices)
            spec = jax.ShapeDtypeStruct((rows * len(devices),) + self.input_shape,
                                        self.dtype, sharding=split(mesh))
            m = self._programs.mesh("stats", mesh).compile(spec).memory_analysis()
        else:  # the program the first device's per-input calls of ``rows`` rows reuse
            on = jax.sharding.SingleDeviceSharding(devices[0])
            spec = jax.ShapeDtypeStruct((rows,) + self.input_shape, self.dtype, sharding=on)
            m = self._programs.stats.compile(spec).memory_analysis()
        if m is None:
            return 3 * rows * self.live_bytes_per_pair
        return int(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes)
