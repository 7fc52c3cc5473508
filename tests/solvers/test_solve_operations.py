"""The work of ``predict``'s solve, counted in multiply-adds per route before it runs:
closed forms on small cases, growth with the one-hot classes, and CG's bound against
a real solve."""

from __future__ import annotations

import numpy as np
import pytest

from kernelcli.solvers import (
    cg_operations,
    cholesky_operations,
    landmark_operations,
    one_hot,
    solve_cg_folds,
)
from kernelcli.solvers._memory import cg_product_cap  # the bound the count must keep

ROUTES = {
    "cholesky": lambda c: cholesky_operations(96, 10, c, 5, 2, 1),
    "cg": lambda c: cg_operations(96, 10, c, 5, 2, 5),
    "direct": lambda c: landmark_operations("direct", 96, 10, 12, c, 5, 5, 2),
    "falkon": lambda c: landmark_operations("falkon", 96, 10, 12, c, 5, 5, 2),
}


def test_the_counts_match_their_closed_forms_on_small_cases():
    # n = 6, m = 4, C = 3, 2 ridges, 2 kinds, one with the variance:
    # 2 ridges x (2 kinds x (6^3 / 3 + 6^2 3 + 4 6 3) + 6^2 4 / 2)
    assert cholesky_operations(6, 4, 3, 2, 2, 1) == 2 * (2 * (72 + 108 + 72) + 72)
    # rank min(1000, 6), 2 x 6 x 3 columns, the cap 2 n + 10 products of n^2 + 2 n rank,
    # the preconditioner's 5 n rank^2 / 2 and the means 2 ridges x m n C, per kind
    assert cg_product_cap(6) == 22
    assert cg_operations(6, 4, 3, 2, 2, 5) == 2 * (22 * 108 * 36 + 540 + 144)
    # n = 20 training, t = 4 test rows, m = 3 landmarks, C = 2, 2 ridges, 5 folds
    predictions = 2 * 24 * 3 * 2
    direct = 9 * 27 // 2 + 2 * 20 * 9 + 20 * 3 * 2 + 2 * 6 * (27 // 2 + 2 * 9 * 2)
    assert landmark_operations("direct", 20, 4, 3, 2, 2, 5) == direct + predictions
    falkon = 27 * 27 // 6 + 6 * 20 * 3 * 2 + (500 * (2 * 20 * 3 + 4 * 9) + 36) * 24
    assert landmark_operations("falkon", 20, 4, 3, 2, 2, 5) == falkon + predictions


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_every_route_counts_its_work_in_proportion_to_the_classes(route):
    ops = ROUTES[route]
    per_class = ops(2) - ops(1)
    assert per_class > 0
    # affine in C, and a label of 2^20 among 96 rows: the classes are the work
    assert ops(2**20 + 1) == ops(1) + 2**20 * per_class
    assert ops(2**20 + 1) <= (1 + 1e-3) * (2**20 + 1) * per_class


def test_a_cg_solve_stays_within_its_counted_products():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 6))
    k = x @ x.T + np.eye(40)
    products = []
    solve_cg_folds(k, one_hot(np.arange(40) % 3), [1e-2, 1.0], 5,
                   on_iteration=lambda p, _res: products.append(p))
    assert 0 < max(products) <= cg_product_cap(40)
