"""``parallel`` in the configuration: how it is read, and its shape and order rules,
with the exact one-line messages of each mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelcli.config import (
    LAYER_NAMES,
    Architecture,
    Conv,
    Dense,
    Identity,
    Parallel,
    Relu,
    check_architecture,
    layer_shapes,
    parse_config,
)
from kernelcli.errors import ConfigError

IMAGE = (8, 8, 3)
L1 = "architecture.layers[1]"


def arch(*items: str) -> Architecture:
    text = "data: {x1: a.npy}\narchitecture:\n  layers:\n" + "".join(
        f"    - {item}\n" for item in items)
    return parse_config(text, base_dir=Path("/cfg")).architecture


def parse_error(*items: str) -> str:
    with pytest.raises(ConfigError) as info:
        arch(*items)
    assert "\n" not in str(info.value)
    return str(info.value)


def check_error(*items: str, shape=IMAGE) -> str:
    with pytest.raises(ConfigError) as info:
        check_architecture(arch(*items), shape)
    assert "\n" not in str(info.value)
    return str(info.value)


def par(*branches: str, merge: str = "sum") -> str:
    return f"parallel: {{branches: [{', '.join(branches)}], merge: {merge}}}"


# --- reading ------------------------------------------------------------------------------

def test_branches_are_layer_lists_and_an_empty_one_is_the_identity():
    layers = arch("conv", par("[relu, {conv: {width: 2}}]", "[]", "[identity]",
                              merge="concat")).layers
    assert layers[1] == Parallel(branches=((Relu(), Conv(width=2)), (), (Identity(),)),
                                 merge="concat")
    assert layers[1].where == f"{L1}.parallel"
    assert layers[1].branches[0][1].where == f"{L1}.parallel.branches[0][1].conv"


def test_repeat_expands_inside_a_branch():
    layers = arch(par("[{repeat: {times: 3, layers: [relu, dense]}}]", "[]")).layers
    assert layers[0].branches[0] == (Relu(), Dense()) * 3
    assert (layers[0].branches[0][5].where
            == "architecture.layers[0].parallel.branches[0][0].repeat.layers[1].dense")


@pytest.mark.parametrize("item, message", [
    ("parallel", "architecture.layers[0].parallel.branches: missing; expected a list of at "
                 "least one branch, each a list of layers ([] for the identity)"),
    ("parallel: {branches: [[dense]]}",
     "architecture.layers[0].parallel.merge: missing; expected one of sum, concat"),
    ("parallel: {branches: [[dense]], merge: add}",
     "architecture.layers[0].parallel.merge: 'add' is not a merge; expected one of sum, "
     "concat"),
    ("parallel: {branches: [], merge: sum}",
     "architecture.layers[0].parallel.branches: empty; expected a list of at least one "
     "branch, each a list of layers ([] for the identity)"),
    ("parallel: {branches: dense, merge: sum}",
     "architecture.layers[0].parallel.branches: 'dense' is not a list of branches; expected "
     "a list of at least one branch, each a list of layers ([] for the identity)"),
    ("parallel: {branches: [[dense], relu], merge: sum}",
     "architecture.layers[0].parallel.branches[1]: 'relu' is not a list of layers; expected "
     "a list of layers ([] for the identity)"),
    ("parallel: {branches: [[dense]], merge: sum, axis: -1}",
     "architecture.layers[0].parallel: unknown parameter 'axis'; expected branches, merge"),
    ("parallel: [[dense], [dense]]",
     "architecture.layers[0].parallel: [['dense'], ['dense']] is not a mapping; expected "
     "a mapping of branches, merge"),
    ("parallel: {branches: [[], [relu, {conv: {strides: 0}}]], merge: sum}",
     "architecture.layers[0].parallel.branches[1][1].conv.strides: 0 is not a stride; "
     "expected a positive integer (the same along every spatial axis) or a list of 1 to 3 "
     "positive integers (one per spatial axis)"),
    ("parallel: {branches: [[{parallel: {branches: [[flaten]], merge: sum}}]], merge: sum}",
     "architecture.layers[0].parallel.branches[0][0].parallel.branches[0][0]: unknown layer "
     f"'flaten'; expected one of {', '.join(LAYER_NAMES)}; did you mean 'flatten'?"),
])
def test_mistakes_in_a_parallel_name_their_path(item, message):
    assert parse_error(item) == message


def test_each_branch_counts_toward_the_layer_bound():
    # 1 (the parallel) + 998 branches (empty: identities) + flatten = 1000 layers
    empty = ", ".join(["[]"] * 998)
    arch(f"parallel: {{branches: [{empty}], merge: concat}}", "flatten")
    assert parse_error(f"parallel: {{branches: [{empty}, []], merge: concat}}",
                       "flatten") == (
        "architecture.layers[1].flatten: the architecture has 1001 layers here; expected "
        "at most 1000 layers in all, once repeats are expanded")


# --- shapes -------------------------------------------------------------------------------

def test_concat_adds_channels_and_sum_keeps_the_shape():
    rows = layer_shapes(arch("conv: {width: 4}",
                             par("[relu, {conv: {width: 2}}]", "[]",
                                 "[{avg_pool: {strides: 1, padding: SAME}}]", merge="concat"),
                             "conv: {width: 3}",
                             par("[relu, {conv: {width: 3}}]", "[]"),
                             "relu", "global_avg_pool", "dense"), IMAGE)
    assert [out for _, _, out in rows] == [(8, 8, 4), (8, 8, 10), (8, 8, 3), (8, 8, 3),
                                           (8, 8, 3), (3,), (1,)]


def test_concat_of_vectors_of_different_lengths_is_a_longer_vector():
    """A vector's one axis is its channel axis (neural-tangents concatenates there)."""
    rows = layer_shapes(arch("conv", par("[flatten]", "[global_avg_pool]", merge="concat"),
                             "dense"), IMAGE)
    assert rows[1][2] == (65,)


def test_a_sum_of_one_branch_is_that_branch():
    assert check_architecture(arch("conv", par("[relu]"), "flatten", "dense"), IMAGE) == (1,)
    assert check_error("conv", par("[relu]"), "relu", "flatten", "dense").startswith(
        f"architecture.layers[2].relu: relu acts on the output of relu at {L1}.parallel"
        ".branches[0][0].relu, which is not Gaussian;")


def test_parallel_holds_and_sits_inside_residual_and_repeat():
    a = arch("conv", "repeat: {times: 2, layers: [{residual: [relu, "
             + par("[conv]", "[dense]", merge="concat") + ", conv]}]}",
             par("[{residual: [relu, conv]}]", "[relu, dense]"), "relu", "flatten", "dense")
    assert check_architecture(a, IMAGE) == (1,)


# --- order rules --------------------------------------------------------------------------

AFFINE = "dense, conv, conv_local or conv_transpose"
KEEPERS = ("avg_pool, global_avg_pool, global_sum_pool, identity, layer_norm, sum_pool, "
           "residual or a parallel with merge sum")


def test_sum_needs_gaussian_branch_outputs():
    assert check_error("conv", par("[relu, conv]", "[relu]"), "flatten", "dense") == (
        f"{L1}.parallel: merge sum needs Gaussian branch outputs, but branches[1] gives the "
        f"output of relu at {L1}.parallel.branches[1][0].relu, which is not Gaussian; "
        f"expected each branch to end in {AFFINE} (possibly through {KEEPERS})")


def test_sum_with_the_identity_needs_a_gaussian_input():
    assert check_error(par("[conv]", "[]"), "flatten", "dense") == (
        "architecture.layers[0].parallel: merge sum needs Gaussian branch outputs, but "
        "branches[1] (empty: the identity) gives the raw input, which is not Gaussian; "
        f"expected each branch to end in {AFFINE} (possibly through {KEEPERS})")


def test_sum_needs_one_shape():
    assert check_error("conv", par("[{conv: {width: 2}}]", "[conv]"), "flatten",
                       "dense") == (
        f"{L1}.parallel: merge sum adds outputs of shape (8, 8, 2) from branches[0] and "
        "(8, 8, 1) from branches[1]; expected one shape, since the outputs are added")


@pytest.mark.parametrize("branches, names", [
    (("[]", "[identity]"), "branches[0] and branches[1]"),
    (("[conv]", "[avg_pool: {strides: 1, padding: SAME}]", "[layer_norm]"),
     "branches[1] and branches[2]"),
    (("[]", "[{residual: [relu, conv]}]"), "branches[0] and branches[1]"),
    (("[]", "[]", "[]"), "branches[0], branches[1] and branches[2]"),
])
def test_sum_refuses_copies_of_one_signal(branches, names):
    assert check_error("conv", par(*branches), "flatten", "dense") == (
        f"{L1}.parallel: merge sum adds {names}, which have no dense or conv of their own; "
        "expected at most one such branch, since the sum would count copies of one signal "
        "as independent")


def test_a_branch_with_its_own_dense_may_sum_with_the_identity():
    inner = par("[relu, conv]", "[erf, dense]")  # every branch fresh: so is the parallel
    assert check_architecture(arch("conv", par("[]", "[relu, conv, avg_pool: {strides: 1, "
                                               "padding: SAME}]", f"[{{{inner}}}]"),
                                   "relu", "flatten", "dense"), IMAGE) == (1,)


def test_concat_needs_one_shape_but_for_the_channels():
    assert check_error("conv", par("[{conv: {width: 2}}]", "[{conv: {strides: 2}}]",
                                   merge="concat"), "flatten", "dense") == (
        f"{L1}.parallel: merge concat joins outputs of shape (8, 8, 2) from branches[0] and "
        "(4, 4, 1) from branches[1]; expected the same shape but for the channel (last) axis")
    assert check_error("conv", par("[]", "[flatten]", merge="concat"), "flatten",
                       "dense") == (
        f"{L1}.parallel: merge concat joins outputs of shape (8, 8, 1) from branches[0] and "
        "(64,) from branches[1]; expected the same shape but for the channel (last) axis")


def test_concat_output_is_not_gaussian():
    assert check_error("conv", par("[conv]", "[dense]", merge="concat"), "relu", "flatten",
                       "dense") == (
        f"architecture.layers[2].relu: relu acts on the output of parallel (merge concat) at "
        f"{L1}.parallel, which is not Gaussian; it must follow {AFFINE} (possibly "
        f"through {KEEPERS})")
    assert check_error("conv", par("[conv]", "[dense]", merge="concat"),
                       par("[dense]", "[]")).startswith(
        "architecture.layers[2].parallel: merge sum needs Gaussian branch outputs, but "
        "branches[1] (empty: the identity) gives the output of parallel (merge concat) at "
        f"{L1}.parallel, which is not Gaussian;")


def test_no_spatial_layer_after_a_flatten_in_a_branch():
    assert check_error("conv", par("[flatten, conv]"), "dense") == (
        f"{L1}.parallel.branches[0][1].conv: conv needs spatial axes (a sequence (L, C), an image (H, W, C) or a volume (D, H, W, C)) but gets "
        f"a vector of shape (64,) made by {L1}.parallel.branches[0][0].flatten; spatial layers cannot "
        "follow flatten, global_avg_pool, global_sum_pool or local_avg_pool")
    assert check_error("conv", par("[global_avg_pool]", "[global_avg_pool]", merge="concat"),
                       "avg_pool", "dense") == (
        "architecture.layers[2].avg_pool: avg_pool needs spatial axes (a sequence (L, C), an image (H, W, C) or a volume (D, H, W, C)) "
        f"but gets a vector of shape (2,) made by {L1}.parallel.branches[0][0].global_avg_pool; "
        "spatial layers cannot follow flatten, global_avg_pool, global_sum_pool or local_avg_pool")


def test_a_mistake_deep_inside_names_the_whole_path():
    assert check_error("conv", par("[{residual: [relu, "
                                   + par("[conv]", "[dense]", merge="concat")
                                   + ", relu, conv]}]", "[dense]"), "flatten",
                       "dense").startswith(
        f"{L1}.parallel.branches[0][0].residual[2].relu: relu acts on the output of parallel "
        f"(merge concat) at {L1}.parallel.branches[0][0].residual[1].parallel, which is not "
        "Gaussian;")
