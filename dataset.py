"""Token files: finding, preparing and checking a dataset, and its codec (chars or GPT-2 BPE).

A dataset is a folder (data/<name>/ or any path) holding train.bin and val.bin,
flat uint16 token ids (numpy's tofile), and optionally meta.pkl: a dict with
vocab_size, and for a char-level vocabulary stoi/itos (as nanoGPT's
shakespeare_char). The batches themselves are drawn in train.get_batch.
"""

import os
import pickle
import subprocess
import sys

import numpy as np
import torch

from configurator import UserError

HERE = os.path.dirname(os.path.abspath(__file__))


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

    Returns dict(train=path, val=path, meta=dict of plain Python values or None);
    get_batch maps the file per batch (a map kept open for the whole run grows
    the resident set to the file's size).
    Raises UserError for a missing, empty or odd-sized file, one shorter than
    block_size + 1 tokens, an unreadable meta.pkl, or a failed prepare script.
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
    data = {}
    for split, path in paths.items():
        if not os.path.isfile(path):
            hint = prepare_hint(prepare) if os.path.exists(prepare) else \
                "write uint16 token ids to train.bin and val.bin there (see data/*/prepare.py)"
            raise UserError(f"data file {path} not found for dataset={cfg.dataset!r}: {hint}")
        size = os.path.getsize(path)
        if size == 0 or size % 2:
            raise UserError(f"{path} holds {size} bytes, {'none' if size == 0 else 'an odd number'}: it must be "
                            f"uint16 token ids (np.array(ids, dtype=np.uint16).tofile(path)); write it again")
        if size // 2 < cfg.block_size + 1:
            raise UserError(f"{path} holds {size // 2} tokens, fewer than block_size + 1 = "
                            f"{cfg.block_size + 1}: use a smaller --block_size or more data")
        data[split] = path
    meta_path = os.path.join(folder, "meta.pkl")
    data["meta"] = None
    if os.path.exists(meta_path):
        try:
            with open(meta_path, "rb") as f:
                meta = pickle.load(f)
        except Exception as e:  # a pickle can fail in many ways; each is a bad file
            raise UserError(f"{meta_path} is unreadable ({type(e).__name__}: {str(e)[:100]}): write it again "
                            f"with pickle.dump(dict(vocab_size=...), f), or delete it and set --vocab_size") from None
        if not isinstance(meta, dict):
            raise UserError(f"{meta_path} holds a {type(meta).__name__}, not a dict such as {{'vocab_size': 50257}}")
        data["meta"] = plain(meta, meta_path)
    return data


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
