"""The ``data`` section of a run configuration: the input files and keys, the row
limits, the preprocessing and the landmarks (the rest of the file is read by
:mod:`._load`, whose docstring states the rules every message follows)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from . import _fields as f
from ._allowed import LAYOUTS, PATCH_KEYS, PREPROCESS_KINDS, DataSpec, PreprocessSpec

MAX_ROWS = 2 ** 40        # data.limit, data.test_limit, data.landmarks
MAX_ZCA_REG = 1e6         # relative to the mean eigenvalue: beyond this zca is a scaling


def data_section(d: dict, base_dir: Path) -> DataSpec:
    """The ``data`` section (its keys already checked against the known ones)."""
    if d.get("x1") is None:
        raise f.fail("data.x1", "missing; expected the path of the input array file "
                                "(.npy, .npz or .h5)")
    x2 = d.get("x2")
    if x2 is None and d.get("x2_key") is not None:
        raise f.fail("data.x2_key", f"{f.show(d['x2_key'])} is given but data.x2 is null; "
                                    "expected data.x2 as well, or no x2_key")
    test = d.get("test")
    if test is not None and x2 is not None:
        raise f.fail("data.test", f"{f.show(test)} is given together with data.x2; expected "
                                  "one of them: x2 for a rectangular K(x1, x2), test for a "
                                  "training kernel K(x1, x1) with K(test, x1) beside it")
    if test is None:
        for key in ("test_key", "test_labels", "test_labels_key", "test_limit"):
            if d.get(key) is not None:
                raise f.fail(f"data.{key}", f"{f.show(d[key])} is given but data.test is "
                                            "null; expected data.test as well, or no "
                                            f"{key}")

    if d.get("landmarks") is not None and x2 is not None:
        raise f.fail("data.landmarks", f"{f.show(d['landmarks'])} is given together with "
                                       "data.x2; expected one of them: landmarks make the "
                                       "rectangle K(x1, landmarks) of a Nystrom regression "
                                       "run themselves")

    def opt_path(key):
        value = d.get(key)
        return None if value is None else f.file_path(value, f"data.{key}", base_dir)

    def opt_key(key):
        return f.optional_string(d.get(key), f"data.{key}", "an array name")

    def opt_limit(key):
        value = d.get(key)
        return None if value is None else f.positive_int(value, f"data.{key}", "a row count",
                                                         maximum=MAX_ROWS)

    return DataSpec(
        x1=f.file_path(d["x1"], "data.x1", base_dir),
        key=opt_key("key"),
        x2=opt_path("x2"),
        x2_key=opt_key("x2_key"),
        layout=f.choice(d.get("layout", "NHWC"), "data.layout", LAYOUTS, "a layout"),
        limit=opt_limit("limit"),
        labels=opt_path("labels"),
        labels_key=opt_key("labels_key"),
        test=opt_path("test"),
        test_key=opt_key("test_key"),
        test_labels=opt_path("test_labels"),
        test_labels_key=opt_key("test_labels_key"),
        test_limit=opt_limit("test_limit"),
        preprocess=_preprocess(d.get("preprocess")),
        landmarks=_landmarks(d.get("landmarks")),
    )


def _landmarks(value) -> Optional[int]:
    """``data.landmarks``: how many rows of ``x1`` the Nystrom route keeps (checked
    against the number of rows when the data is opened)."""
    if value is None:
        return None
    return f.positive_int(value, "data.landmarks", "a number of landmark rows of data.x1",
                          maximum=MAX_ROWS)


_PREPROCESS_KEYS = ("kind", "zca_reg", "per_image") + PATCH_KEYS
# random_patches: the defaults (docs/config-reference.md says whose they are) and the largest values
PATCH_DEFAULTS = {"count": 2048, "size": 6, "seed": 0, "bias": 1.0, "pool": 1, "split": True,
                  "zca_reg": 0.1}
MAX_PATCH_COUNT = 65536   # filters (channels: twice as many with split)
MAX_PATCH_SIZE = 32       # pixels: 32 x 32 x 3 is d = 3072 values to whiten (zca on CIFAR)
MAX_PATCH_POOL = 1024
MAX_PATCH_BIAS = 1e3      # a response of a whitened patch is about unit size
MAX_SEED = 2 ** 63 - 1


def _preprocess(value) -> Optional[PreprocessSpec]:
    """``null`` | ``standardize`` | ``zca`` (needs zca_reg, so only as a mapping) |
    ``random_patches`` | ``{kind: ..., zca_reg: ..., per_image: ...}`` (with
    random_patches: ``count``, ``size``, ``seed``, ``bias``, ``pool``, ``stride``,
    ``split``)."""
    path = "data.preprocess"
    if value is None:
        return None
    if isinstance(value, str):
        value = {"kind": value}
    value = f.mapping(value, path, "null, standardize, random_patches, or a mapping such as "
                                   "{kind: zca, zca_reg: 0.1}")
    f.check_keys(value, path, _PREPROCESS_KEYS)
    if value.get("kind") is None:
        raise f.fail(f"{path}.kind", f"missing; expected one of {', '.join(PREPROCESS_KINDS)}")
    kind = f.choice(value["kind"], f"{path}.kind", PREPROCESS_KINDS, "a preprocessing")
    if kind != "random_patches":
        for key in PATCH_KEYS:
            if value.get(key) is not None:
                raise f.fail(f"{path}.{key}", f"{f.show(value[key])} is only used with kind: "
                                              f"random_patches; drop it for {kind}")
    if kind == "standardize":
        for key in ("zca_reg", "per_image"):
            if value.get(key) is not None:
                raise f.fail(f"{path}.{key}", f"{f.show(value[key])} is only used with kind: "
                                              "zca; drop it for standardize")
        return PreprocessSpec("standardize")
    if kind == "random_patches":
        return _patches(value, path)
    if value.get("zca_reg") is None:
        raise f.fail(f"{path}.zca_reg", "missing; kind: zca needs a regulariser, a number "
                                        "> 0 relative to the mean eigenvalue (e.g. 0.1)")
    reg = _zca_reg(value["zca_reg"], f"{path}.zca_reg")
    per_image = value.get("per_image", True)
    return PreprocessSpec("zca", zca_reg=reg,
                          per_image=f.boolean(per_image, f"{path}.per_image"))


def _zca_reg(value, path: str) -> float:
    reg = f.number(value, path, minimum=0.0, maximum=MAX_ZCA_REG,
                   expected="a number > 0 (e.g. 0.1)")
    if not reg > 0:
        raise f.fail(path, f"{f.show(value)} is not accepted; expected a number > 0 (e.g. 0.1)")
    return reg


def _patches(value: dict, path: str) -> PreprocessSpec:
    """``kind: random_patches``: every setting checked and its default filled in (the
    sizes against the images wait for the data: ``kernelcli.data.PatchSettings``)."""
    if value.get("per_image") is not None:
        raise f.fail(f"{path}.per_image", f"{f.show(value['per_image'])} is only used with "
                                          "kind: zca; random_patches normalises every patch")
    got = {k: value[k] if value.get(k) is not None else PATCH_DEFAULTS.get(k)
           for k in PATCH_KEYS + ("zca_reg",)}
    pool = f.positive_int(got["pool"], f"{path}.pool", "a pooling window",
                          maximum=MAX_PATCH_POOL)
    return PreprocessSpec(
        "random_patches", zca_reg=_zca_reg(got["zca_reg"], f"{path}.zca_reg"),
        count=f.positive_int(got["count"], f"{path}.count", "a number of patches",
                             maximum=MAX_PATCH_COUNT),
        size=f.positive_int(got["size"], f"{path}.size", "a patch size",
                            maximum=MAX_PATCH_SIZE),
        seed=f.integer(got["seed"], f"{path}.seed", minimum=0, maximum=MAX_SEED),
        bias=f.number(got["bias"], f"{path}.bias", minimum=0.0, maximum=MAX_PATCH_BIAS),
        pool=pool,
        stride=pool if got["stride"] is None else f.positive_int(
            got["stride"], f"{path}.stride", "a pooling stride", maximum=MAX_PATCH_POOL),
        split=f.boolean(got["split"], f"{path}.split"))
