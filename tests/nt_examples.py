"""Kernel examples from neural-tangents' own README and documentation, written once.

Each example is the neural-tangents code with ``stax`` as its only free name: the
reference script (``bench/nt_examples.py``) passes ``neural_tangents.stax`` and
``tests/stax/test_nt_dropin.py`` passes ``kernelcli.stax``, so that "only the import
changed" is literally true. ``EXAMPLES``: name -> (the example, its input shape,
the ``get`` it is called with, where it comes from).
"""

from __future__ import annotations

import functools

import numpy as np


def readme_fully_connected(stax):
    init_fn, apply_fn, kernel_fn = stax.serial(
        stax.Dense(512), stax.Relu(),
        stax.Dense(512), stax.Relu(),
        stax.Dense(1)
    )
    return kernel_fn


def readme_wide_resnet(stax):
    def WideResnetBlock(channels, strides=(1, 1), channel_mismatch=False):
        Main = stax.serial(
            stax.Relu(), stax.Conv(channels, (3, 3), strides, padding='SAME'),
            stax.Relu(), stax.Conv(channels, (3, 3), padding='SAME'))
        Shortcut = stax.Identity() if not channel_mismatch else stax.Conv(
            channels, (3, 3), strides, padding='SAME')
        return stax.serial(stax.FanOut(2),
                           stax.parallel(Main, Shortcut),
                           stax.FanInSum())

    def WideResnetGroup(n, channels, strides=(1, 1)):
        blocks = []
        blocks += [WideResnetBlock(channels, strides, channel_mismatch=True)]
        for _ in range(n - 1):
            blocks += [WideResnetBlock(channels, (1, 1))]
        return stax.serial(*blocks)

    def WideResnet(block_size, k, num_classes):
        return stax.serial(
            stax.Conv(16, (3, 3), padding='SAME'),
            WideResnetGroup(block_size, int(16 * k)),
            WideResnetGroup(block_size, int(32 * k), (2, 2)),
            WideResnetGroup(block_size, int(64 * k), (2, 2)),
            stax.AvgPool((8, 8)),
            stax.Flatten(),
            stax.Dense(num_classes, 1., 0.))

    init_fn, apply_fn, kernel_fn = WideResnet(block_size=1, k=1, num_classes=10)
    return kernel_fn


def myrtle_notebook(stax):
    def MyrtleNetwork(depth, W_std=np.sqrt(2.0), b_std=0.):  # noqa: B008 - the notebook's own code
        layer_factor = {5: [2, 1, 1], 7: [2, 2, 2], 10: [3, 3, 3]}
        width = 1
        activation_fn = stax.Relu()
        layers = []
        conv = functools.partial(stax.Conv, W_std=W_std, b_std=b_std, padding='SAME')
        layers += [conv(width, (3, 3)), activation_fn] * layer_factor[depth][0]
        layers += [stax.AvgPool((2, 2), strides=(2, 2))]
        layers += [conv(width, (3, 3)), activation_fn] * layer_factor[depth][1]
        layers += [stax.AvgPool((2, 2), strides=(2, 2))]
        layers += [conv(width, (3, 3)), activation_fn] * layer_factor[depth][2]
        layers += [stax.AvgPool((2, 2), strides=(2, 2))] * 3
        layers += [stax.Flatten(), stax.Dense(10, W_std, b_std)]
        return stax.serial(*layers)

    _, _, kernel_fn = MyrtleNetwork(5)
    return kernel_fn


def docs_conv_flatten(stax):
    init_fn, apply_fn, kernel_fn = stax.serial(
        stax.Conv(32, (3, 3)), stax.Relu(), stax.Flatten(), stax.Dense(10))
    return kernel_fn


def cnn_global_average_pooling(stax):
    init_fn, apply_fn, kernel_fn = stax.serial(
        stax.Conv(256, (3, 3), padding='SAME'), stax.Relu(),
        stax.Conv(256, (3, 3), padding='SAME'), stax.Relu(),
        stax.GlobalAvgPool(), stax.Dense(10))
    return kernel_fn


def erf_network(stax):
    init_fn, apply_fn, kernel_fn = stax.serial(
        stax.Dense(1024, W_std=1.5, b_std=0.05), stax.Erf(),
        stax.Dense(1024, W_std=1.5, b_std=0.05), stax.Erf(),
        stax.Dense(1, W_std=1.5, b_std=0.05))
    return kernel_fn


def standard_parameterization(stax):
    init_fn, apply_fn, kernel_fn = stax.serial(
        stax.Conv(64, (3, 3), padding='SAME', parameterization='standard'), stax.Gelu(),
        stax.Flatten(), stax.Dense(10, parameterization='standard'))
    return kernel_fn


def residual_block(stax):
    block = stax.serial(stax.Relu(), stax.Conv(64, (3, 3), padding='SAME'), stax.Relu(),
                        stax.Conv(64, (3, 3), padding='SAME'))
    init_fn, apply_fn, kernel_fn = stax.serial(
        stax.Conv(64, (3, 3), padding='SAME'),
        stax.FanOut(2), stax.parallel(block, stax.Identity()), stax.FanInSum(),
        stax.GlobalAvgPool(), stax.Dense(10))
    return kernel_fn


def inception_concat(stax):
    init_fn, apply_fn, kernel_fn = stax.serial(
        stax.FanOut(2),
        stax.parallel(stax.serial(stax.Conv(32, (1, 1), padding='SAME'), stax.Relu()),
                      stax.serial(stax.Conv(32, (3, 3), padding='SAME'), stax.Relu())),
        stax.FanInConcat(),
        stax.AvgPool((2, 2), strides=(2, 2)), stax.Flatten(), stax.Dense(10))
    return kernel_fn


def pooling_and_sign(stax):
    init_fn, apply_fn, kernel_fn = stax.serial(
        stax.Conv(16, (3, 3), strides=(2, 2), padding='SAME', b_std=0.1), stax.Abs(),
        stax.Conv(16, (2, 2), padding='VALID', b_std=0.1), stax.Sign(),
        stax.SumPool((2, 2), padding='SAME'), stax.GlobalAvgPool(), stax.Dense(1))
    return kernel_fn


EXAMPLES = {
    # name: (example, example shape, get, source)
    "readme_fully_connected": (readme_fully_connected, (12,), ("nngp", "ntk"),
                               "neural-tangents README, infinite-width network"),
    "readme_wide_resnet": (readme_wide_resnet, (32, 32, 3), None,
                           "neural-tangents README, WideResnet"),
    "myrtle_notebook": (myrtle_notebook, (32, 32, 3), "ntk",
                        "neural-tangents notebook myrtle_kernel_with_neural_tangents"),
    "docs_conv_flatten": (docs_conv_flatten, (8, 8, 3), ("nngp", "ntk"),
                          "neural-tangents docs, stax module"),
    "cnn_global_average_pooling": (cnn_global_average_pooling, (8, 8, 3), None,
                                   "neural-tangents README, CNN with pooling"),
    "erf_network": (erf_network, (10,), "nngp", "neural-tangents docs, Erf"),
    "standard_parameterization": (standard_parameterization, (6, 6, 2), ("ntk", "nngp"),
                                  "neural-tangents docs, parameterization='standard'"),
    "residual_block": (residual_block, (6, 6, 2), None,
                       "neural-tangents docs, FanOut / parallel / FanInSum"),
    "inception_concat": (inception_concat, (6, 6, 2), "ntk",
                         "neural-tangents docs, FanInConcat"),
    "pooling_and_sign": (pooling_and_sign, (8, 8, 2), ("nngp", "ntk"),
                         "neural-tangents docs, SumPool, Abs, Sign"),
}


def inputs(name: str, n1: int = 3, n2: int = 2):
    """The example's ``(x1, x2)``: float64 standard normals, fixed per example."""
    shape = EXAMPLES[name][1]
    rng = np.random.default_rng(sorted(EXAMPLES).index(name))
    return rng.standard_normal((n1,) + shape), rng.standard_normal((n2,) + shape)


def kernels(result, get) -> dict:
    """``{"nngp": ..., "ntk": ...}`` (those asked) of what ``kernel_fn`` returned for
    ``get``, the way neural-tangents returns it (a Kernel, an array, a tuple)."""
    if get is None:
        return {"nngp": np.asarray(result.nngp), "ntk": np.asarray(result.ntk)}
    if isinstance(get, str):
        return {get: np.asarray(result)}
    return {g: np.asarray(r) for g, r in zip(get, result)}
