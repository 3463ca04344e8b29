"""FineWeb-Edu in GPT-2 BPE for the 124M configs: train.bin, val.bin (uint16) and meta.pkl (recording "dtype").

    pip install datasets
    python data/fineweb/prepare.py                      # 2.7B train tokens, ~5.5 GB on disk
    python data/fineweb/prepare.py --train_tokens=1e8   # a small slice to try things

Without the network: python data/shakespeare/prepare.py && python train.py configs/unified_124m.py
    --dataset=shakespeare --device=cpu --compile=False --batch_size=1 --gradient_accumulation_steps=1
    --block_size=256 --max_iters=2 --eval_iters=1 --out_dir=out-smoke-124m
(the 124M model, two CPU steps on the Shakespeare BPE data; docs/reference.md).

Streams the "sample-10BT" subset of HuggingFaceFW/fineweb-edu from the
Hugging Face Hub (needs the network), encodes each document with tiktoken's
r50k_base (= GPT-2 BPE) followed by <|endoftext|> (50256), and writes the
first --val_tokens tokens to val.bin and the next --train_tokens to
train.bin. Documents are never split between the two files (each file ends
with the document that reaches its count). The files are written under .tmp
names and renamed into place only at the end, meta.pkl last, as
data/corpus/prepare.py does: an interrupted run leaves --out as it was.
"""

import argparse
import os
import sys
from contextlib import closing

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bpe_docs import Progress, TokenFiles, check_out, cli, encoding, os_error, tokenize  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def prepare(docs, out_dir, val_tokens, train_tokens, workers, source="the subset"):
    """Encode docs (dicts with a "text") in order into out_dir: val.bin until it holds >= val_tokens, then
    train.bin until it holds >= train_tokens (or docs run out). Returns the token counts per split.

    SystemExit when docs run out before train.bin holds any token.
    """
    targets = [("val", val_tokens), ("train", train_tokens)]
    progress = Progress()
    texts = (doc["text"] for doc in docs)
    with TokenFiles(out_dir) as out, closing(tokenize(texts, workers)) as encoded:
        split, limit = targets.pop(0)
        for ids in encoded:
            out.write(split, ids)
            progress.add(len(ids), progress.tokens / (val_tokens + train_tokens))
            if out.counts[split] >= limit:
                print(f"{split}.bin: {out.counts[split]:,} tokens", flush=True)
                if not targets:
                    break
                split, limit = targets.pop(0)
        else:  # the subset ran out before the limit
            if not out.counts["train"]:
                raise SystemExit(f"{source} ran out after {progress.tokens:,} tokens, before train.bin got any: "
                                 f"lower --val_tokens")
            print(f"{split}.bin: {out.counts[split]:,} tokens (the subset has no more)")
        out.commit()
    print(f"benchmark: {progress.tokens:,} tokens in {progress.seconds():.1f} s = "
          f"{progress.rate():,.0f} tokens/s with {workers} workers")
    return out.counts


def main(argv=None, load_dataset=None):
    """The command line; load_dataset: datasets.load_dataset unless given (a stand-in, in tests)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train_tokens", type=float, default=2.7e9)
    p.add_argument("--val_tokens", type=float, default=1e7)
    p.add_argument("--subset", default="sample-10BT")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    p.add_argument("--out", default=HERE, help="the dataset folder (default: this script's)")
    args = p.parse_args(argv)
    for flag, value in (("--train_tokens", args.train_tokens), ("--val_tokens", args.val_tokens)):
        if not 1 <= value < 1e15:
            raise SystemExit(f"{flag}={value:g}: a token count >= 1 (e.g. 1e8)")
    if args.workers < 1:
        raise SystemExit(f"--workers={args.workers}: encode with at least 1 process")
    real = load_dataset is None
    if real:
        try:
            from datasets import load_dataset
        except ImportError:
            raise SystemExit("data/fineweb/prepare.py needs the package 'datasets': pip install datasets") from None
    check_out(args.out)
    encoding()  # fail fast, before streaming

    try:
        offline = real and hub_problem()  # said at once: the Hub's client would retry for a minute first
        if offline:
            raise ConnectionError(offline)
        docs = load_dataset("HuggingFaceFW/fineweb-edu", name=args.subset, split="train", streaming=True)
        return prepare(docs, args.out, int(args.val_tokens), int(args.train_tokens), args.workers,
                       source=f"the {args.subset} subset")
    except (OSError, ConnectionError) as e:  # (requests' and huggingface_hub's errors are OSErrors too)
        if os_error(e) is not None:  # this disk's refusal (full, permission), not the network's: cli says which
            raise
        raise SystemExit(f"cannot stream HuggingFaceFW/fineweb-edu from the Hugging Face Hub ({type(e).__name__}: "
                         f"{str(e)[:100]}): this script needs the network (about {args.train_tokens * 2 / 1e9:.2g} "
                         f"GB of token files at --train_tokens={args.train_tokens:g}; --train_tokens=1e8 is a small "
                         f"slice); without it, prepare elsewhere and copy {args.out}, or train on your own text "
                         f"(data/corpus/prepare.py, configs/unified_bpe_cpu.py); --out is as it was") from None


def hub_problem():
    """Why the Hugging Face Hub cannot be reached from here (its host does not resolve), or None."""
    import socket
    from urllib.parse import urlparse
    try:
        from huggingface_hub import constants
        host = urlparse(constants.ENDPOINT).hostname
    except ImportError:
        host = "huggingface.co"
    try:
        socket.getaddrinfo(host, 443)
    except OSError as e:
        return f"{host} does not resolve: {e.strerror or e}"
    return None


if __name__ == "__main__":
    cli(lambda argv: main(argv) and 0)  # (main returns the counts, for tests): one line per error, SIGTERM cleans up
