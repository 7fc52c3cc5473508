"""CIFAR-10's official binary batches to the .npy files the CIFAR configs read.

    python3 configs/data/cifar10_to_npy.py PATH/cifar-10-batches-bin [OUT_DIR]

Reads ``data_batch_1.bin`` .. ``data_batch_5.bin`` and ``test_batch.bin`` (from
https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz) as raw bytes -- no pickle --
and writes into OUT_DIR (default: this folder) ``cifar10_train.npy`` (50000, 32, 32, 3)
uint8 NHWC, ``cifar10_train_labels.npy`` (50000,) int64, ``cifar10_test.npy`` and
``cifar10_test_labels.npy`` (10000). Each record of a batch file is one label byte
and 3072 pixel bytes: the 1024 red values of the 32x32 image row by row, then green,
then blue. Numpy only.
"""

import sys
from pathlib import Path

import numpy as np

RECORD = 1 + 3 * 32 * 32


def read_batches(paths) -> tuple:
    """``(images (n, 32, 32, 3) uint8, labels (n,) int64)`` of the batch files."""
    parts = []
    for path in paths:
        raw = np.fromfile(path, dtype=np.uint8)
        if raw.size == 0 or raw.size % RECORD:
            raise SystemExit(f"{path}: {raw.size} bytes is not a whole number of "
                             f"{RECORD}-byte CIFAR-10 records")
        parts.append(raw.reshape(-1, RECORD))
    records = np.concatenate(parts)
    labels = records[:, 0].astype(np.int64)
    if labels.max() > 9:
        raise SystemExit(f"labels up to {labels.max()}: these are not CIFAR-10 batches")
    images = records[:, 1:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), labels


def main(argv) -> None:
    if not argv or len(argv) > 2:
        raise SystemExit(__doc__.strip().splitlines()[2].strip())
    src = Path(argv[0])
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent
    train = [src / f"data_batch_{k}.bin" for k in range(1, 6)]
    missing = [p for p in train + [src / "test_batch.bin"] if not p.is_file()]
    if missing:
        raise SystemExit(f"{missing[0]}: no such file; expected the folder "
                         f"cifar-10-batches-bin of the binary version")
    for name, paths in (("train", train), ("test", [src / "test_batch.bin"])):
        images, labels = read_batches(paths)
        np.save(out / f"cifar10_{name}.npy", images)
        np.save(out / f"cifar10_{name}_labels.npy", labels)
        print(f"{out / f'cifar10_{name}.npy'}: {images.shape} uint8, labels {labels.shape}")


if __name__ == "__main__":
    main(sys.argv[1:])
