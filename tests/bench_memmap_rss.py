"""Resident memory of the training batches on a large token file: one memmap for the run vs one per batch.

    python tests/bench_memmap_rss.py                       # a 1 GB file, 1,000 batches of 512 x 1024
    python tests/bench_memmap_rss.py --mb=200 --batches=300

Not a test (pytest does not collect it): a measurement. Each way runs in its
own process and reports the file-backed resident set (RssFile in
/proc/self/status, Linux) before and after the batches. A memmap kept open
for the whole run keeps every page it has touched mapped, so its RSS grows
toward the file's size; train.get_batch maps the file per batch (as nanoGPT
does) and stays bounded.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from train import get_batch  # noqa: E402


def rss_file_mb():
    with open("/proc/self/status") as f:
        kb = next(int(line.split()[1]) for line in f if line.startswith("RssFile:"))
    return kb / 1024


def measure(path, way, batches, batch_size, block_size):
    cfg = SimpleNamespace(seed=1, batch_size=batch_size, block_size=block_size, vocab_size=65536)
    data = {"files": {"train": open(path, "rb")}, "dtype": "uint16"}  # as dataset.load_data opens it
    kept = np.memmap(path, dtype=np.uint16, mode="r") if way == "kept" else None
    before, t0 = rss_file_mb(), time.perf_counter()
    for i in range(batches):
        if kept is None:
            get_batch(data, "train", i, 0, cfg, torch.device("cpu"))
        else:  # the old way: one map for the run, the same gather
            rng = np.random.default_rng([cfg.seed, i, 0, 1])
            ix = rng.integers(0, len(kept) - block_size, size=batch_size)
            np.stack([kept[j:j + block_size + 1] for j in ix]).astype(np.int64)
    print(f"{way:<10} RssFile {before:7.0f} MiB before, {rss_file_mb():7.0f} MiB after {batches} batches "
          f"of {batch_size} x {block_size} ({time.perf_counter() - t0:.1f} s)", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mb", type=int, default=1024, help="size of the token file to make, MiB")
    p.add_argument("--batches", type=int, default=1000)
    p.add_argument("--batch_size", type=int, default=512)
    p.add_argument("--block_size", type=int, default=1024)
    p.add_argument("--way", choices=("kept", "per_batch"), help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.way:
        measure(args.path, args.way, args.batches, args.batch_size, args.block_size)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "train.bin")
        rng = np.random.default_rng(0)
        with open(path, "wb") as f:
            for _ in range(args.mb):
                rng.integers(0, 50257, 512 * 1024, dtype=np.uint16).tofile(f)
        for way in ("kept", "per_batch"):
            subprocess.run([sys.executable, __file__, f"--way={way}", f"--path={path}", f"--batches={args.batches}",
                            f"--batch_size={args.batch_size}", f"--block_size={args.block_size}"], check=True)


if __name__ == "__main__":
    main()
