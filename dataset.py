"""Token files: finding, preparing and checking a dataset, and its codec (chars or GPT-2 BPE).

A dataset is a folder (data/<name>/ or any path) holding train.bin and val.bin,
flat token ids (numpy's tofile), and optionally meta.pkl: a dict with
vocab_size, "dtype" ("uint16" or "uint32": how the .bin files are written),
and for a char-level vocabulary stoi/itos (as nanoGPT's shakespeare_char).
meta.pkl's "dtype" is the one place a token file's dtype is recorded; the
prepare scripts write it. Data without it (older preparations, or no
meta.pkl) is read as uint16; a dataset without meta.pkl that holds uint32 ids
records it with a meta.pkl of {"dtype": "uint32"}. The batches themselves are
drawn in train.get_batch.
"""

import os
import pickle
import subprocess
import sys

import numpy as np
import torch

from configurator import UserError

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = ("uint16", "uint32")  # the token file dtypes meta.pkl's "dtype" may record
DEFAULT_DTYPE = "uint16"       # what a dataset recording none holds (nanoGPT's layout)
SAMPLE_TOKENS = 1 << 20        # load_data checks the first and the last this many ids of each file


def dataset_dir(dataset):
    """The folder of `dataset`: a path as given when it names one, else data/<dataset>/ here."""
    return dataset if os.sep in dataset or os.path.isabs(dataset) else os.path.join(HERE, "data", dataset)


def plain(value, where):
    """value with numpy scalars and arrays turned into Python ints, floats, lists (recursively).

    What train.py writes must load with torch.load(weights_only=True) and
    json; a meta.pkl built with numpy (`vocab_size = arr.max() + 1` is a
    np.uint16) would otherwise give a checkpoint that its own readers refuse.
    Raises UserError naming `where` for a value of any other type.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v, where) for v in value)
    if isinstance(value, dict):
        return {plain(k, where): plain(v, where) for k, v in value.items()}
    raise UserError(f"{where} holds a {type(value).__name__} ({str(value)[:60]!r}): store plain Python "
                    f"values there (ints, floats, strings, lists, dicts)")


def prepare_hint(prepare):
    """How to make a dataset's bins: run its prepare.py, after the `pip install` its docstring names."""
    with open(prepare) as f:
        needs = [ln.strip() for ln in f.read().split('"""')[1].splitlines() if ln.strip().startswith("pip install")]
    return " && ".join(needs + [f"python {os.path.relpath(prepare)}"])


def load_data(cfg, prepare_here=True):
    """Check train.bin / val.bin and read meta.pkl; prepare shakespeare data if missing.

    prepare_here: this process may run the prepare script (under DDP: local rank 0;
    every rank then meets at a barrier, whether or not anything was prepared).

    Returns dict(train=path, val=path, meta=dict of plain Python values or None,
    dtype="uint16" or "uint32": meta.pkl's "dtype", uint16 when none is recorded);
    get_batch maps the file per batch (a map kept open for the whole run grows
    the resident set to the file's size).
    Raises UserError for a missing or empty file, a size that is not a whole
    number of ids of the dtype, one shorter than block_size + 1 tokens, a
    sampled id >= vocab_size (when known), a file that looks like uint32 ids
    read as uint16, an unreadable meta.pkl, a recorded dtype other than
    uint16/uint32, or a failed prepare script.
    """
    folder = dataset_dir(cfg.dataset)
    paths = {split: os.path.join(folder, f"{split}.bin") for split in ("train", "val")}
    prepare = os.path.join(folder, "prepare.py")
    local = os.path.basename(folder.rstrip(os.sep)) in ("shakespeare_char", "shakespeare")
    missing = not all(os.path.exists(p) for p in paths.values())
    if missing and local and os.path.exists(prepare) and prepare_here:
        print(f"{paths['train']} not found: running {os.path.relpath(prepare)} to make it", flush=True)
        proc = subprocess.run([sys.executable, prepare], capture_output=True, text=True)
        if proc.returncode:
            why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
            raise UserError(f"{os.path.relpath(prepare)} failed: {why}")
        print(proc.stdout, end="", flush=True)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    for path in paths.values():
        if not os.path.isfile(path):
            hint = prepare_hint(prepare) if os.path.exists(prepare) else \
                "write uint16 token ids to train.bin and val.bin there (see data/*/prepare.py)"
            raise UserError(f"data file {path} not found for dataset={cfg.dataset!r}: {hint}")
    meta_path = os.path.join(folder, "meta.pkl")
    meta = None
    if os.path.exists(meta_path):
        try:
            with open(meta_path, "rb") as f:
                meta = pickle.load(f)
        except Exception as e:  # a pickle can fail in many ways; each is a bad file
            raise UserError(f"{meta_path} is unreadable ({type(e).__name__}: {str(e)[:100]}): write it again "
                            f"with pickle.dump(dict(vocab_size=...), f), or delete it and set --vocab_size") from None
        if not isinstance(meta, dict):
            raise UserError(f"{meta_path} holds a {type(meta).__name__}, not a dict such as {{'vocab_size': 50257}}")
        meta = plain(meta, meta_path)
    recorded = (meta or {}).get("dtype")
    if recorded is not None and recorded not in DTYPES:
        raise UserError(f"{meta_path} records dtype={recorded!r}: token files must be 'uint16' or 'uint32'; set "
                        f"meta.pkl's 'dtype' to the dtype train.bin and val.bin were written with")
    dtype = recorded or DEFAULT_DTYPE
    vocab = getattr(cfg, "vocab_size", 0) or (meta or {}).get("vocab_size")
    data = {}
    for split, path in paths.items():
        check_token_file(path, dtype, recorded is not None, vocab if type(vocab) is int else None,
                         cfg.block_size, meta_path)
        data[split] = path
    data["meta"] = meta
    data["dtype"] = dtype
    return data


def check_token_file(path, dtype, recorded, vocab, block_size, meta_path):
    """UserError (one line, naming path and the fix) when path's size or sampled ids do not fit dtype and vocab.

    Reads only the first and last SAMPLE_TOKENS ids: cheap for a file of any
    size. Read as uint16 (recorded or not), a file of uint32 ids shows every
    second value 0 (little-endian high halves; <= (vocab_size - 1) >> 16 for
    a vocabulary past 65536): that is named as such, with the record to write.
    """
    item = np.dtype(dtype).itemsize
    size = os.path.getsize(path)
    if size == 0 or size % item:
        what = "none" if size == 0 else ("an odd number" if item == 2 else f"not a multiple of {item}")
        raise UserError(f"{path} holds {size} bytes, {what}: it must be {dtype} token ids "
                        f"(np.array(ids, dtype=np.{dtype}).tofile(path)); write it again, or record in "
                        f"{meta_path} the dtype it was written with")
    n = size // item
    if n < block_size + 1:
        raise UserError(f"{path} holds {n} tokens, fewer than block_size + 1 = "
                        f"{block_size + 1}: use a smaller --block_size or more data")
    arr = np.memmap(path, dtype=dtype, mode="r")
    head = np.array(arr[:SAMPLE_TOKENS])
    tail = np.array(arr[max(SAMPLE_TOKENS, n - SAMPLE_TOKENS) // 2 * 2:])  # even start: uint32 halves stay paired
    del arr
    top = max(int(head.max()), int(tail.max()) if len(tail) else 0)
    if dtype == "uint16" and size % 4 == 0:
        # uint32 ids below vocab_size, read as uint16: every odd value is a high half <= (vocab_size - 1) >> 16
        halves = [a for a in (head, tail) if len(a) >= 2] or [np.zeros(2, np.uint16)]
        high = max(int(a[1::2].max()) for a in halves)
        bound = (vocab - 1) >> 16 if vocab else 0
        if high <= bound and max(int(a[0::2].max()) for a in halves) > high:
            why = "every second uint16 value is 0" if high == 0 else \
                f"every second uint16 value is <= {bound}, as the high halves of ids below vocab_size={vocab} are"
            fix = f"{meta_path} records dtype 'uint16': set it to 'uint32'" if recorded else \
                f"record it: add 'dtype': 'uint32' to the dict in {meta_path} (create it as " + \
                "{'dtype': 'uint32'} if absent)"
            raise UserError(f"{path} looks like uint32 token ids ({why}) but is read as uint16: {fix}, "
                            f"or write the file as uint16")
    if vocab is not None and top >= vocab:
        raise UserError(f"{path} holds token id {top} >= vocab_size={vocab} (read as {dtype}): set --vocab_size "
                        f"(or meta.pkl's vocab_size) to the tokenizer's size, or record in meta.pkl's 'dtype' "
                        f"the dtype the file was written with")


def make_codec(meta, vocab_size):
    """(encode, decode) for a dataset: its char vocab, else GPT-2 BPE (tiktoken r50k_base).

    None when neither fits: no char vocabulary in meta.pkl and a vocabulary
    smaller than GPT-2's, so the ids are some other tokenizer's.
    encode raises UserError naming the characters a char vocabulary lacks;
    make_codec raises UserError (with the TIKTOKEN_CACHE_DIR fix) when the
    BPE vocabulary cannot be loaded.
    """
    if meta and "stoi" in meta:
        stoi, itos = meta["stoi"], meta["itos"]

        def encode(s):
            unknown = sorted(set(s) - stoi.keys())
            if unknown:
                known = "".join(sorted(stoi))
                raise UserError(f"{''.join(unknown)!r} not in this vocabulary of {len(stoi)} characters: "
                                f"use only its characters ({known[:40]!r}{'...' if len(known) > 40 else ''})")
            return [stoi[c] for c in s]
        return encode, (lambda ids: "".join(itos[i] for i in ids))
    if not (meta and "encoding" in meta) and vocab_size < 50257:
        return None
    enc = bpe_encoding((meta or {}).get("encoding", "r50k_base"))
    return (lambda s: enc.encode(s, allowed_special={"<|endoftext|>"})), enc.decode


def bpe_encoding(name):
    """tiktoken's encoding `name`; UserError saying how to get its vocabulary file offline."""
    try:
        import tiktoken
        return tiktoken.get_encoding(name)
    except ImportError:
        raise UserError("GPT-2 BPE needs the package tiktoken: pip install tiktoken") from None
    except Exception as e:  # no network: requests' ConnectionError, an HTTP error, ...
        raise UserError(f"cannot load the {name} vocabulary ({type(e).__name__}); offline, set "
                        f"TIKTOKEN_CACHE_DIR to a folder holding tiktoken's cached vocabulary file") from None
