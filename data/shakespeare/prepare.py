"""Shakespeare in GPT-2 BPE: train.bin, val.bin (uint16 token ids) and meta.pkl (recording "dtype": "uint16").

    python data/shakespeare/prepare.py

GPT-2 BPE is tiktoken's r50k_base (50,257 tokens, <|endoftext|> = 50256).
tiktoken downloads its vocab file on first use; offline, set
TIKTOKEN_CACHE_DIR to a folder that holds it. Text and split as in
data/shakespeare_char (whole held-out plays).
"""

import os
import pickle
import sys

import numpy as np
import tiktoken

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from shakespeare_text import cli, load_plays, write_atomic  # noqa: E402

ENCODING = "r50k_base"


def encoding():
    """tiktoken's r50k_base; SystemExit with the fix when its vocabulary file cannot be had."""
    try:
        return tiktoken.get_encoding(ENCODING)
    except Exception as e:  # offline: requests' ConnectionError, or an HTTP error
        raise SystemExit(f"cannot load tiktoken's {ENCODING} vocabulary ({type(e).__name__}): it is downloaded "
                         f"on first use; offline, set TIKTOKEN_CACHE_DIR to a folder that holds it") from None


def prepare(train_text, val_text, out_dir):
    """Encode both texts with GPT-2 BPE into out_dir; returns (meta, n_train, n_val) token counts.

    Raises SystemExit naming TIKTOKEN_CACHE_DIR when the vocabulary cannot be loaded.
    """
    enc = encoding()
    meta = {"vocab_size": enc.n_vocab, "encoding": ENCODING, "dtype": "uint16"}  # dtype: how dataset.py reads the bins
    write_atomic(os.path.join(out_dir, "meta.pkl"), lambda f: pickle.dump(meta, f))
    counts = {}
    for split, text in (("val", val_text), ("train", train_text)):  # train.bin last: it marks "ready"
        ids = np.array(enc.encode_ordinary(text), dtype=np.uint16)  # max id 50256 fits in uint16
        write_atomic(os.path.join(out_dir, f"{split}.bin"), ids.tofile)
        counts[split] = len(ids)
    return meta, counts["train"], counts["val"]


def main(argv):
    encoding()  # fail fast, before reading the plays
    train_text, val_text = load_plays()
    meta, n_train, n_val = prepare(train_text, val_text, os.path.dirname(os.path.abspath(__file__)))
    print(f"{ENCODING}: train {n_train:,} tokens, val {n_val:,} tokens")
    return 0


if __name__ == "__main__":
    cli(main)  # one line per error (a full disk, permission), SIGTERM cleans up
