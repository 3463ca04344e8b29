"""Your own text as token files: train.bin, val.bin and meta.pkl (recording "dtype") in one command.

    python data/corpus/prepare.py 'books/*.txt' notes.jsonl --out=data/mine   # then: train.py --dataset=mine
    python data/corpus/prepare.py corpus/ --out=data/mine --val_docs=50 --workers=8
    python data/corpus/prepare.py corpus/ --out=data/mine-smol --tokenizer=PATH   # a model's own tokenizer

INPUT: files, globs (quote them; ** recurses) or folders (their .txt, .jsonl
and .parquet files, recursively). A .jsonl file holds one document per line,
its text in --text_field; a .parquet file one per row (needs: pip install
pyarrow); any other file is one plain-text (UTF-8) document. Empty documents
are skipped.

Each document is encoded with tiktoken's r50k_base (= GPT-2 BPE) and
followed by <|endoftext|> (50256), written as uint16. With --tokenizer=PATH (a
Hugging Face model folder, or its tokenizer.json) the model's own tokenizer
encodes instead, each document followed by its end-of-text token (--eos_token;
default its tokenizer_config.json's eos_token), uint32 when the vocabulary
needs it; meta.pkl then holds the tokenizer, which sample.py and export.py
use (train.py --hf_model=PATH --dataset=... continues that model on it).
Validation holds out whole documents:
--val_docs of them, or --val_share of all (rounded up), drawn by a shuffle
seeded with --seed, so the same inputs give the same split. Documents keep
their input order within each split.

The files appear only when everything is encoded: they are written under
.tmp names and renamed into place, meta.pkl last. An interrupted run leaves
the folder as it was; a dataset being replaced is removed just before the
renames, so old and new files are never mixed.
"""

import argparse
import glob
import json
import math
import os
import sys
from contextlib import closing

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bpe_docs import GPT2, Progress, TokenFiles, check_out, cli, encoding, hf_codec, tokenize  # noqa: E402

SUFFIXES = (".txt", ".jsonl", ".parquet")  # what a folder given as INPUT contributes


def input_files(patterns):
    """The files that patterns name, in order (each pattern's matches sorted), each once.

    SystemExit when a pattern matches nothing, names something other than a regular file (a FIFO
    or a device would be read forever, a dangling link not at all), or a .parquet file cannot be read.
    """
    files = []
    for pattern in patterns:
        matches = [pattern] if os.path.exists(pattern) else sorted(glob.glob(pattern, recursive=True))
        found = []
        for path in matches:
            if os.path.isdir(path) and not os.access(path, os.R_OK | os.X_OK):  # glob sees an empty folder
                raise SystemExit(f"{path}: this user may not list the folder (permission denied): make it readable "
                                 f"(chmod u+rx {path}) or name its files")
            if os.path.isdir(path):
                found += sorted(p for p in glob.glob(os.path.join(path, "**", "*"), recursive=True)
                                if p.endswith(SUFFIXES) and os.path.isfile(p))
            elif not os.path.isfile(path):
                raise SystemExit(f"{path}: not a regular file (a FIFO, a device or a link to nothing): pass text, "
                                 f".jsonl or .parquet files, or folders of them")
            else:
                found.append(path)
        if not found:
            what = "no .txt, .jsonl or .parquet files under it" if matches else "no such file"
            raise SystemExit(f"no input matches {pattern!r} ({what})")
        files += found
    files = list(dict.fromkeys(os.path.normpath(p) for p in files))
    parquet = [p for p in files if p.endswith(".parquet")]
    if parquet:
        try:
            import pyarrow.parquet  # noqa: F401
        except ImportError:
            raise SystemExit(f"{parquet[0]}: reading .parquet needs the package pyarrow (pip install pyarrow); "
                             f"or pass the documents as .jsonl") from None
    return files


def documents(files, text_field):
    """Every document's text, in order (empty ones skipped).

    SystemExit naming the file (and line or row) for a file that is not UTF-8,
    a .jsonl line that is not JSON or lacks text_field, a non-string text.
    """
    for path in files:
        if path.endswith(".parquet"):
            yield from parquet_texts(path, text_field)
            continue
        try:
            with open(path, encoding="utf-8") as f:
                if not path.endswith(".jsonl"):
                    text = f.read()
                    if text:
                        yield text
                    continue
                for lineno, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except ValueError as e:
                        raise SystemExit(f"{path}:{lineno}: not a JSON object ({str(e)[:80]})") from None
                    if not isinstance(row, dict) or text_field not in row:
                        keys = ", ".join(list(row)[:8]) if isinstance(row, dict) else type(row).__name__
                        raise SystemExit(f"{path}:{lineno}: no {text_field!r} field (has: {keys}); "
                                         f"name the text's field with --text_field")
                    text = text_of(row[text_field], f"{path}:{lineno}", text_field)
                    if text:
                        yield text
        except UnicodeDecodeError as e:
            raise SystemExit(f"{path}: not UTF-8 text (byte {e.start}): convert it, or leave it out") from None


def parquet_texts(path, text_field):
    """Each row's text of a .parquet file, read a batch at a time. SystemExit naming the file for one that is
    cut (a download stopped short), empty or damaged, as pyarrow finds it at the footer or at a page."""
    import pyarrow
    import pyarrow.parquet as pq

    row = 0
    try:
        f = pq.ParquetFile(path)
        if text_field not in f.schema_arrow.names:
            raise SystemExit(f"{path}: no {text_field!r} column (has: {', '.join(f.schema_arrow.names[:8])}); "
                             f"name the text's column with --text_field")
        for batch in f.iter_batches(columns=[text_field]):
            for text in batch.column(0).to_pylist():
                row += 1
                text = text_of(text, f"{path} row {row}", text_field)
                if text:
                    yield text
    except (pyarrow.ArrowException, ValueError) as e:  # (ArrowInvalid is both) a cut file, an empty one, junk
        size = os.path.getsize(path)
        where = f"after row {row}" if row else "at its start"
        raise SystemExit(f"{path}: not a whole .parquet file ({size:,} bytes; pyarrow: {str(e).splitlines()[0][:100]}) "
                         f"{where}: a download cut short or damaged; download it again, or leave it out") from None


def text_of(text, where, text_field):
    """text, "" for None (a missing value); SystemExit naming where for anything else."""
    if text is None:
        return ""
    if not isinstance(text, str):
        raise SystemExit(f"{where}: {text_field!r} holds a {type(text).__name__}, not text")
    return text


def validation_docs(n_docs, val_share, val_docs, seed):
    """The indices of the documents held out for validation; SystemExit when that is none or all of them."""
    if n_docs == 0:
        raise SystemExit("no documents: the inputs hold no text (empty files and texts are skipped)")
    n_val = val_docs if val_docs is not None else math.ceil(val_share * n_docs - 1e-9)
    asked = f"--val_docs={val_docs}" if val_docs is not None else f"--val_share={val_share}"
    if n_val < 1:
        raise SystemExit(f"{asked} leaves the validation split empty: hold out at least one document")
    if n_val >= n_docs:
        raise SystemExit(f"{asked} would hold out {n_val:,} of the {n_docs:,} documents, leaving none to "
                         f"train on: hold out fewer, or add documents")
    return set(np.random.default_rng(seed).permutation(n_docs)[:n_val].tolist())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="files, globs or folders")
    p.add_argument("--out", required=True, help="the dataset folder (train.py --dataset=it)")
    split = p.add_mutually_exclusive_group()
    split.add_argument("--val_share", type=float, default=0.005, help="share of documents held out (rounded up)")
    split.add_argument("--val_docs", type=int, help="number of documents held out")
    p.add_argument("--seed", type=int, default=1337, help="of the shuffle that picks the validation documents")
    p.add_argument("--text_field", default="text", help="the text's field in .jsonl, column in .parquet")
    p.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    p.add_argument("--tokenizer", help="a Hugging Face model folder or tokenizer.json (default: GPT-2 BPE)")
    p.add_argument("--eos_token", help="with --tokenizer: the token after each document (default: its eos_token)")
    args = p.parse_args(argv)
    if args.val_docs is None and not 0 < args.val_share < 1:
        raise SystemExit(f"--val_share={args.val_share}: the share of documents held out is a number in (0, 1), "
                         f"e.g. 0.005 (or name a count with --val_docs)")
    if args.workers < 1:
        raise SystemExit(f"--workers={args.workers}: encode with at least 1 process")
    if args.eos_token is not None and args.tokenizer is None:
        raise SystemExit("--eos_token names a token of --tokenizer's vocabulary: give --tokenizer too (GPT-2 BPE "
                         "ends each document with <|endoftext|>)")
    check_out(args.out)
    files = input_files(args.inputs)
    codec = hf_codec(args.tokenizer, args.eos_token) if args.tokenizer else GPT2
    if codec is GPT2:
        encoding()  # fail fast, before reading
    print(f"counting the documents in {len(files):,} files", flush=True)
    n_docs = sum(1 for _ in documents(files, args.text_field))
    val = validation_docs(n_docs, args.val_share, args.val_docs, args.seed)
    print(f"{n_docs:,} documents: {n_docs - len(val):,} train, {len(val):,} val; "
          f"encoding with {args.workers} workers", flush=True)

    progress = Progress()
    with TokenFiles(args.out, codec.meta) as out, \
            closing(tokenize(documents(files, args.text_field), args.workers, codec)) as docs:
        for i, ids in enumerate(docs):
            out.write("val" if i in val else "train", ids)
            progress.add(len(ids), (i + 1) / n_docs)
        if progress.docs != n_docs:
            raise SystemExit(f"the inputs changed while being read ({progress.docs:,} documents, "
                             f"{n_docs:,} counted before): run again")
        out.commit()
    print(f"{args.out}: train.bin {out.counts['train']:,} tokens ({n_docs - len(val):,} docs), "
          f"val.bin {out.counts['val']:,} tokens ({len(val):,} docs), meta.pkl")
    print(f"benchmark: {progress.tokens:,} tokens in {progress.seconds():.1f} s = "
          f"{progress.rate():,.0f} tokens/s with {args.workers} workers")
    return out.counts


if __name__ == "__main__":
    cli(lambda argv: main(argv) and 0)  # (main returns the counts, for tests): one line per error, SIGTERM cleans up
