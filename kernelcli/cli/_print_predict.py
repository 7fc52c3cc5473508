"""The text that ``kernelcli predict`` prints, from :class:`kernelcli.run.PredictResult`.

Three tables, in the order a reader should trust them: the ridge chosen per kind by
its held-out score on the training set, with the test numbers at that ridge; the
whole sweep, whose test columns are labelled as test-set numbers (choosing the best
of them would overstate the accuracy); with ``--time``, the gradient flow at the
chosen ridge.
"""

from __future__ import annotations

from typing import Optional


def _pct(value: Optional[float], width: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.2%}"


def _num(value: Optional[float], width: int, fmt: str = ".4f") -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}{fmt}}"


def predict_lines(out) -> list[str]:
    """The lines of ``predict``'s report for ``out`` (a ``PredictResult``)."""
    held = "LOO" if out.selection == "leave-one-out" else "CV"
    labels = any(r.accuracy is not None for r in out.results)
    lines = [f"{out.n_train:,} training and {out.n_test:,} test examples, "
             f"{out.classes} classes; solver {out.solver}; ridge x trace(K)/n",
             f"ridge chosen by {out.selection} on the training set:",
             f"  {'kind':<6} {'ridge':>8}  {held + ' accuracy':>12}  {held + ' MSE':>8}  "
             f"{'test accuracy':>13}  {'test MSE':>10}"]
    for c in out.selected:
        if c.selected_ridge is None:
            lines.append(f"  {c.kind:<6} {'-':>8}  no ridge could be solved: use larger ones")
            continue
        test = (f"{_pct(c.test_accuracy, 13)}  {_num(c.test_mse, 10)}" if labels
                else f"{'(no test labels)':>13}")
        lines.append(f"  {c.kind:<6} {c.selected_ridge:>8g}  {_pct(c.loo_accuracy, 12)}  "
                     f"{_num(c.loo_mse, 8)}  {test}")
    lines += ["ridge sweep (test-set numbers: for reference, not for choosing the ridge):",
              f"  {'kind':<6} {'ridge':>8}  {held + ' accuracy':>12}  {'test accuracy':>13}  "
              f"{'test MSE':>10}"]
    for row in out.results:
        head = f"  {row.kind:<6} {row.ridge:>8g}  "
        if row.error:
            lines.append(head + "not positive definite at this ridge: use a larger one"
                         if "positive definite" in row.error else
                         head + "not solved: " + row.error.split(";")[0])
        elif not labels:
            lines.append(head + f"{_pct(row.loo_accuracy, 12)}  {'(no test labels)':>13}")
        else:
            lines.append(head + f"{_pct(row.loo_accuracy, 12)}  "
                         f"{_pct(row.accuracy, 13)}  {_num(row.mse, 10)}")
    if out.times:
        lines += _flow_lines(out, labels)
    lines.append(f"wrote {out.predictions}")
    return lines


def _flow_lines(out, labels: bool) -> list[str]:
    lines = ["gradient flow at the chosen ridge (time t x learning rate, neural-tangents' "
             "units; inf: the ridge solution):",
             f"  {'kind':<6} {'ridge':>8} {'time':>8}  {'test accuracy':>13}  "
             f"{'test MSE':>10}  {'mean variance':>13}"]
    for c in out.selected:
        for row in out.flow:
            if row.kind != c.kind or row.ridge != c.selected_ridge:
                continue
            test = (f"{_pct(row.accuracy, 13)}  {_num(row.mse, 10)}" if labels
                    else f"{'(no labels)':>13}  {'':>10}")
            lines.append(f"  {c.kind:<6} {row.ridge:>8g} {row.time:>8g}  {test}  "
                         f"{_num(row.mean_variance, 13, '.4g')}")
    return lines
