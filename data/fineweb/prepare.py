"""FineWeb-Edu in GPT-2 BPE for the 124M configs: train.bin, val.bin (uint16) and meta.pkl (recording "dtype").

    pip install datasets
    python data/fineweb/prepare.py                      # 2.7B train tokens, ~5.5 GB on disk
    python data/fineweb/prepare.py --train_tokens=1e8   # a small slice to try things

Streams the "sample-10BT" subset of HuggingFaceFW/fineweb-edu from the
Hugging Face Hub (needs the network), encodes each document with tiktoken's
r50k_base (= GPT-2 BPE) followed by <|endoftext|> (50256), and writes the
first --val_tokens tokens to val.bin and the next --train_tokens to
train.bin. Documents are never split between the two files.
"""

import argparse
import os
import pickle
from multiprocessing import Pool

import numpy as np
import tiktoken

ENCODING = "r50k_base"


def encoding():
    """tiktoken's r50k_base; SystemExit with the fix when its vocabulary file cannot be had."""
    try:
        return tiktoken.get_encoding(ENCODING)
    except Exception as e:  # offline: requests' ConnectionError, or an HTTP error
        raise SystemExit(f"cannot load tiktoken's {ENCODING} vocabulary ({type(e).__name__}): it is downloaded "
                         f"on first use; offline, set TIKTOKEN_CACHE_DIR to a folder that holds it") from None


def encode(doc):
    enc = tiktoken.get_encoding(ENCODING)
    return np.array(enc.encode_ordinary(doc["text"]) + [enc.eot_token], dtype=np.uint16)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train_tokens", type=float, default=2.7e9)
    p.add_argument("--val_tokens", type=float, default=1e7)
    p.add_argument("--subset", default="sample-10BT")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    args = p.parse_args()
    try:
        from datasets import load_dataset
    except ImportError:
        raise SystemExit("data/fineweb/prepare.py needs the package 'datasets': pip install datasets") from None
    encoding()  # fail fast, before streaming

    out = os.path.dirname(os.path.abspath(__file__))
    docs = load_dataset("HuggingFaceFW/fineweb-edu", name=args.subset, split="train", streaming=True)
    targets = [("val", int(args.val_tokens)), ("train", int(args.train_tokens))]
    split, limit = targets.pop(0)
    f, written = open(os.path.join(out, f"{split}.bin.tmp"), "wb"), 0
    with Pool(args.workers) as pool:
        for ids in pool.imap(encode, docs, chunksize=64):
            ids.tofile(f)
            written += len(ids)
            if written >= limit:
                f.close()
                os.replace(f.name, f.name[:-len(".tmp")])
                print(f"{split}.bin: {written:,} tokens")
                if not targets:
                    break
                split, limit = targets.pop(0)
                f, written = open(os.path.join(out, f"{split}.bin.tmp"), "wb"), 0
            elif written % 10_000_000 < len(ids):
                print(f"{split}: {written / 1e6:,.0f}M / {limit / 1e6:,.0f}M tokens", flush=True)
    if not f.closed:  # the subset ran out before the limit
        f.close()
        os.replace(f.name, f.name[:-len(".tmp")])
        print(f"{split}.bin: {written:,} tokens (the subset has no more)")
    with open(os.path.join(out, "meta.pkl"), "wb") as fm:
        pickle.dump({"vocab_size": 50257, "encoding": ENCODING, "dtype": "uint16"}, fm)  # as encode() writes


if __name__ == "__main__":
    main()
