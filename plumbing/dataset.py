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

import ast
import os
import pickle
import shlex
import subprocess
import sys

import numpy as np
import torch

from plumbing.common import checked_stat, open_checked
from plumbing.disk import present
from configurator import UserError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository (this file is in plumbing/)
DTYPES = ("uint16", "uint32")  # the token file dtypes meta.pkl's "dtype" may record
DEFAULT_DTYPE = "uint16"       # what a dataset recording none holds (nanoGPT's layout)
SAMPLE_TOKENS = 1 << 20        # load_data checks the first and the last this many ids of each file


def dataset_dir(dataset):
    """The folder of `dataset`: a path as given when it names one, else data/<dataset>/ here."""
    return dataset if os.sep in dataset or os.path.isabs(dataset) else os.path.join(ROOT, "data", dataset)


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


class PlainUnpickler(pickle.Unpickler):
    """An unpickler that builds plain data only: dict, list, tuple, str, bytes, int, float, bool and
    None (pickle's own opcodes), plus numpy scalars and arrays (what `arr.max() + 1` leaves in a
    nanoGPT-style meta.pkl; `plain` turns them into Python values). Any other global a pickle names
    (os.system, a class with __reduce__) is refused before anything runs: find_class is where a
    pickle gets the callables it would call. The Python docs' "Restricting Globals" pattern, as
    torch.load(weights_only=True) applies it to checkpoints."""

    ALLOWED = {("_codecs", "encode"),  # bytes under protocol 2
               *((f"numpy.{core}.{m}", name) for core in ("core", "_core")  # (renamed in numpy 2)
                 for m, name in (("multiarray", "scalar"), ("multiarray", "_reconstruct"), ("numeric", "_frombuffer"))),
               ("numpy", "dtype"), ("numpy", "ndarray")}

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"it would build {module}.{name}")


def read_meta(path):
    """path's meta.pkl as a dict of plain Python values (PlainUnpickler, then `plain`).

    Raises UserError naming the file: one whose pickle names anything but plain data (code such as
    os.system never runs: nothing is built before the refusal), one that is damaged, one that
    holds something other than a dict, or one that is not a regular file (a FIFO, a device:
    common.checked_stat says so before it is opened).
    """
    try:
        f = open_checked(path, links=True)  # a FIFO or a device: one line (common.checked_stat), never a wait
    except OSError as e:
        raise UserError(f"{path} cannot be read ({e.strerror or type(e).__name__}): make it readable to this "
                        f"user, or delete it and set --vocab_size") from None
    try:
        with f:
            meta = PlainUnpickler(f).load()
    except pickle.UnpicklingError as e:
        if str(e).startswith("it would build"):
            raise UserError(f"{path} is refused: {e}, and meta.pkl may hold plain data only (dicts, lists, "
                            f"strings, numbers); nothing of it ran. Write it again with pickle.dump(dict("
                            f"vocab_size=...), f), or delete it and set --vocab_size") from None
        raise UserError(f"{path} is unreadable (UnpicklingError: {str(e)[:100]}): write it again with "
                        f"pickle.dump(dict(vocab_size=...), f), or delete it and set --vocab_size") from None
    except Exception as e:  # a pickle can fail in many ways; each is a bad file
        raise UserError(f"{path} is unreadable ({type(e).__name__}: {str(e)[:100]}): write it again with "
                        f"pickle.dump(dict(vocab_size=...), f), or delete it and set --vocab_size") from None
    if not isinstance(meta, dict):
        raise UserError(f"{path} holds a {type(meta).__name__}, not a dict such as {{'vocab_size': 50257}}")
    return plain(meta, path)


def meta_vocab_size(meta, dataset):
    """vocab_size=0's meaning: meta.pkl's vocab_size, an int > 0. meta: read_meta's dict, or None
    when the dataset has no meta.pkl. Raises UserError when it records none, or not a positive int."""
    vocab = (meta or {}).get("vocab_size")
    if vocab is None:
        raise UserError(f"vocab_size=0 means 'from meta.pkl', but {dataset_dir(dataset)} records none: set "
                        f"--vocab_size (50257 for GPT-2 BPE)")
    if type(vocab) is not int or vocab <= 0:
        raise UserError(f"{os.path.join(dataset_dir(dataset), 'meta.pkl')} records vocab_size={vocab!r}: it must "
                        f"be a positive int (the tokenizer's vocabulary size); fix meta.pkl, or set --vocab_size")
    return vocab


def recorded_vocab_size(dataset):
    """meta_vocab_size of the dataset's meta.pkl as it is on disk, or 0 when there is none yet (a
    prepare script not yet run): what vocab_size=0 will mean, for checks made before the data loads."""
    path = os.path.join(dataset_dir(dataset), "meta.pkl")
    return meta_vocab_size(read_meta(path), dataset) if present(path) and os.path.exists(path) else 0


LOCAL_DATASETS = ("shakespeare_char", "shakespeare")  # made on this machine by their prepare script, no download


def repository_prepare(folder):
    """This repository's data/<name>/prepare.py when folder is this repository's data/<name>/ (by its real
    path), else None. A dataset folder is data: only these scripts, by their place in the repository,
    ever prepare one, never a prepare.py that came with a folder from elsewhere."""
    for name in os.listdir(os.path.join(ROOT, "data")):
        script = os.path.join(ROOT, "data", name, "prepare.py")
        if os.path.isfile(script) and os.path.realpath(folder) == os.path.realpath(os.path.dirname(script)):
            return script
    return None


def prepare_hint(folder):
    """How to make the token files of the dataset folder: this repository's prepare script for it (after
    the `pip install` lines its docstring names), or, for any other folder, data/corpus/prepare.py."""
    script = repository_prepare(folder)
    if script is None:
        corpus = shlex.quote(os.path.relpath(os.path.join(ROOT, "data", "corpus", "prepare.py")))
        return (f"write them with python {corpus} '<your texts>' {shlex.quote('--out=' + folder)} (a dataset "
                f"folder is data: its own scripts never run)")
    with open(script) as f:
        doc = ast.get_docstring(ast.parse(f.read())) or ""
    lines = [ln.strip() for ln in doc.splitlines()]
    needs = [ln for ln in lines if ln.startswith("pip install")]
    command = f"python {shlex.quote(os.path.relpath(script))}"
    said = []
    for way in (ln for ln in lines if ln.startswith("python ") and "#" in ln):  # the docstring's usage lines
        cmd, comment = (part.strip() for part in way.split("#", 1))
        words = cmd.split(None, 2)
        said.append(f"{words[2] if len(words) > 2 else 'by default'}: {comment}")
    hint = " && ".join(needs + [command]) + (f" ({'; '.join(said)})" if said else "")
    if "network" in doc:  # a download: say so, and the way that needs none
        hint += (". It downloads (needs the network); without it, or on a CPU, train on your own text: "
                 "data/corpus/prepare.py, then configs/unified_bpe_cpu.py")
    return hint


def check_char_vocabulary(meta, meta_path, fix="write meta.pkl again with the prepare script"):
    """UserError (one line, ending in `fix`) when a character vocabulary in meta.pkl (or a checkpoint's
    copy of it) disagrees with itself: itos and stoi of other sizes or not inverse to each other, or a
    vocab_size other than their size (a model of 1,000 outputs for 80 characters trains, but its loss
    is not the data's)."""
    if not meta or not ("itos" in meta or "stoi" in meta):
        return
    itos, stoi = meta.get("itos"), meta.get("stoi")
    if itos is not None and stoi is not None and (
            not isinstance(stoi, dict) or not isinstance(itos, (list, tuple, str, dict))  # (nanoGPT's: a dict)
            or len(itos) != len(stoi)
            or any(stoi.get(c) != i for i, c in (itos.items() if isinstance(itos, dict) else enumerate(itos)))):
        raise UserError(f"{meta_path}: its itos ({len(itos)} entries) and stoi ({len(stoi)}) are not one "
                        f"vocabulary (stoi[itos[i]] must be i): {fix}")
    n = len(itos if itos is not None else stoi)
    if meta.get("vocab_size") is not None and meta["vocab_size"] != n:
        raise UserError(f"{meta_path} records vocab_size={meta['vocab_size']!r} for a character vocabulary of "
                        f"{n} characters: set its vocab_size to {n} (or write meta.pkl again with the "
                        f"prepare script)")


def load_data(dataset, block_size, vocab_size=0, prepare_here=True):
    """Check train.bin / val.bin and read meta.pkl; prepare this repository's own data/shakespeare_char/
    or data/shakespeare/ by its script when missing (repository_prepare: a folder elsewhere is never
    prepared, whatever its name or its files).

    dataset: a folder under data/, or a path to one (dataset_dir); block_size: the context, which
    each file must exceed; vocab_size: the run's (0: meta.pkl's), which sampled ids must stay under.
    prepare_here: this process may run the prepare script (under DDP: local rank 0;
    every rank then meets at a barrier, whether or not anything was prepared).

    Returns dict(train=path, val=path, meta=dict of plain Python values or None,
    dtype="uint16" or "uint32": meta.pkl's "dtype", uint16 when none is recorded,
    files={split: the token file, opened once here by common.open_checked});
    get_batch maps that open file per batch (a map kept open for the whole run grows
    the resident set to the file's size), never the path again: a FIFO or another
    file put at the path after the start is never opened.
    Raises UserError for a missing or empty file, a size that is not a whole
    number of ids of the dtype, one shorter than block_size + 1 tokens, a
    sampled id >= vocab_size (when known), a file that looks like uint32 ids
    read as uint16, an unreadable meta.pkl, a recorded dtype other than
    uint16/uint32, or a failed prepare script.
    """
    folder = dataset_dir(dataset)
    paths = {split: os.path.join(folder, f"{split}.bin") for split in ("train", "val")}
    prepare = repository_prepare(folder)
    local = prepare is not None and os.path.basename(os.path.dirname(prepare)) in LOCAL_DATASETS
    missing = not all(present(p) and os.path.exists(p) for p in paths.values())
    if missing and local and prepare_here:
        print(f"{paths['train']} not found: running {os.path.relpath(prepare)} to make it", flush=True)
        proc = subprocess.run([sys.executable, prepare], capture_output=True, text=True)
        if proc.returncode:
            why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1].removeprefix("error: ")
            raise UserError(f"{os.path.relpath(prepare)} failed: {why}")
        print(proc.stdout, end="", flush=True)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    for path in paths.values():
        if not present(path) or not os.path.exists(path):  # (a dangling link too)
            hint = prepare_hint(folder)
            raise UserError(f"data file {path} not found for dataset={dataset!r}: {hint}")
        checked_stat(path, links=True)  # a FIFO, a device, a folder: said as what it is, never read
    meta_path = os.path.join(folder, "meta.pkl")
    meta = read_meta(meta_path) if present(meta_path) and os.path.exists(meta_path) else None  # (present: a locked folder is said)
    check_char_vocabulary(meta, meta_path)
    recorded = (meta or {}).get("dtype")
    if recorded is not None and recorded not in DTYPES:
        raise UserError(f"{meta_path} records dtype={recorded!r}: token files must be 'uint16' or 'uint32'; set "
                        f"meta.pkl's 'dtype' to the dtype train.bin and val.bin were written with")
    dtype = recorded or DEFAULT_DTYPE
    if vocab_size:  # another size than meta.pkl's is the first thing to say, before the ids
        check_vocabulary(meta, vocab_size, None, folder)
    vocab = vocab_size or (meta or {}).get("vocab_size")
    data = {"files": {}}
    for split, path in paths.items():
        check_token_file(path, dtype, recorded is not None, vocab if type(vocab) is int else None,
                         block_size, meta_path)
        data[split] = path
        data["files"][split] = open_checked(path, links=True)  # the file checked now is the one every batch maps
    data["meta"] = meta
    data["dtype"] = dtype
    return data


def sample_ids(path, dtype, n_items):
    """The first and last SAMPLE_TOKENS items of a file read as dtype (n_items of them), starting on
    an 8-byte boundary, so that one sample read at every width covers the same bytes."""
    arr = np.memmap(path, dtype=dtype, mode="r")
    step = max(1, 8 // np.dtype(dtype).itemsize)
    tail_start = max(SAMPLE_TOKENS, n_items - SAMPLE_TOKENS) // step * step
    ids = np.concatenate([np.array(arr[:SAMPLE_TOKENS]), np.array(arr[tail_start:])])
    del arr
    return ids


def written_as(path, dtype, vocab, size):
    """The wider integer dtype ("uint32" or "int64") a file's ids were written with, when read as
    `dtype` they show its tell-tale pattern: in each group of k = wide/narrow values, the k - 1
    high parts are at most (vocab_size - 1) >> bits (0 below 65,536 ids) while the low parts are
    not; and read as that dtype, every sampled id lies in [0, vocab_size). None otherwise."""
    item = np.dtype(dtype).itemsize
    bound = (vocab - 1) >> (8 * item) if vocab else 0
    for wide in ("int64", "uint32"):
        k = np.dtype(wide).itemsize // item
        if k < 2 or size % np.dtype(wide).itemsize:
            continue
        words = sample_ids(path, dtype, size // item)
        words = words[:len(words) // k * k].reshape(-1, k)
        high, low = words[:, 1:], words[:, 0]
        if not high.size or int(high.max()) > bound or int(low.max()) <= int(high.max()):
            continue
        ids = sample_ids(path, wide, size // np.dtype(wide).itemsize)
        if int(ids.min()) >= 0 and (vocab is None or int(ids.max()) < vocab):
            return wide
    return None


def check_token_file(path, dtype, recorded, vocab, block_size, meta_path):
    """UserError (one line, naming path and the fix) when path's size or sampled ids do not fit dtype and vocab.

    Reads only the first and last SAMPLE_TOKENS ids: cheap for a file of any
    size. Refuses a dtype that cannot hold the vocabulary (uint16 holds ids up to
    65,535). A file of wider integers read as a narrower dtype (uint32 ids read as
    uint16, numpy's default int64 read as uint16 or uint32) is named as what it is
    (written_as), checked to give valid ids read that way, with the fix: the
    record to write, or the conversion.
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
    wide = written_as(path, dtype, vocab, size)
    if wide == "uint32":
        fix = f"{meta_path} records dtype {dtype!r}: set it to 'uint32'" if recorded else \
            f"record it: add 'dtype': 'uint32' to the dict in {meta_path} (create it as " + \
            "{'dtype': 'uint32'} if absent)"
        raise UserError(f"{path} looks like uint32 token ids (read as {dtype}, every second value is a high half "
                        f"of an id below vocab_size) and reads as valid uint32 ids: {fix}, or write the file as "
                        f"{dtype}")
    if wide == "int64":
        fit = "uint16" if vocab is not None and vocab <= 1 << 16 else "uint32"
        raise UserError(f"{path} looks like int64 token ids (numpy's default integer; read as {dtype}, all but one "
                        f"value of every {8 // item} is a high part of an id) and reads as valid int64 ids: "
                        f"convert them with np.fromfile(path, dtype=np.int64).astype(np.{fit}).tofile(path) and "
                        f"record 'dtype': '{fit}' in {meta_path}")
    if vocab is not None and vocab - 1 > np.iinfo(dtype).max:
        raise UserError(f"{path} is read as {dtype}, which holds ids up to {np.iinfo(dtype).max:,}, but "
                        f"vocab_size={vocab:,}: write the token files as uint32 and record 'dtype': 'uint32' in "
                        f"{meta_path}")
    top = int(sample_ids(path, dtype, n).max())
    if vocab is not None and top >= vocab:
        raise UserError(f"{path} holds token id {top} >= vocab_size={vocab} (read as {dtype}): set --vocab_size "
                        f"(or meta.pkl's vocab_size) to the tokenizer's size, or record in meta.pkl's 'dtype' "
                        f"the dtype the file was written with")


def id_past_vocab(name, window, starts, n, vocab_size):
    """The UserError for a batch (window: (batch, tokens) ids read from `starts`) holding an id >= vocab_size
    in a file of n tokens whose sample at start (load_data) held none: it names the first such token's
    place, since that part of the file, not vocab_size, is what is wrong."""
    row, col = np.unravel_index(int(window.argmax()), window.shape)
    top = int(window[row, col])
    return UserError(f"{name} holds token id {top} >= vocab_size={vocab_size} at token {int(starts[row]) + int(col):,} "
                     f"of {n:,}, where the sample read at start held none: that part of the file is damaged or from "
                     f"another tokenizer; write the dataset again with its prepare script (raise --vocab_size only "
                     f"if the tokenizer's ids reach {top})")


GPT2_VOCAB = 50257  # r50k_base's ids, <|endoftext|> = 50256 the last


def codec_kind(meta, vocab_size):
    """Which tokenizer a model of vocab_size outputs, trained on data whose meta.pkl is meta, reads
    and writes: "char" (meta's char vocabulary), "hf" (the Hugging Face tokenizer.json meta holds,
    as data/corpus/prepare.py --tokenizer writes it), "bpe" (the tiktoken encoding meta names, or
    GPT-2's r50k_base when meta names none and vocab_size is GPT-2's 50,257), or None (some other
    tokenizer's ids). The one rule sample.py, train.py's sample and export.py follow.
    Raises UserError when meta's vocabulary and the model's outputs differ in size (a model paired
    with another dataset's vocabulary)."""
    if meta and ("itos" in meta or "stoi" in meta):
        n = len(meta.get("itos") or meta["stoi"])
        if n != vocab_size:
            raise UserError(f"the model has {vocab_size} outputs but its meta.pkl vocabulary has {n} characters: "
                            f"they come from different datasets; use the checkpoint with the data it trained on")
        return "char"
    if meta and "tokenizer" in meta:
        return "hf"
    if meta and "encoding" in meta:
        return "bpe"
    return "bpe" if vocab_size == GPT2_VOCAB else None


def check_vocabulary(meta, vocab_size, saved_meta, where):
    """UserError (one line) when a model of vocab_size outputs does not fit the data's meta.pkl
    (`meta`, of the dataset at `where`): another vocab_size than meta.pkl's, or, on resume, a
    checkpoint trained on another vocabulary (saved_meta: the checkpoint's meta; its characters,
    encoding or size differ)."""
    if meta and meta.get("vocab_size") not in (None, vocab_size):
        raise UserError(f"vocab_size={vocab_size} but {where}'s meta.pkl says {meta['vocab_size']}: the model's "
                        f"outputs must be the data's ids (padding to a multiple of 64 happens inside the model); "
                        f"drop --vocab_size (with --hf_model: prepare the data with its tokenizer, "
                        f"data/corpus/prepare.py --tokenizer)")
    def vocabulary(m):
        return m and (m.get("itos"), m.get("encoding"), m.get("tokenizer"), m.get("vocab_size"))

    if saved_meta is not None and vocabulary(saved_meta) != vocabulary(meta):
        raise UserError(f"--init_from=resume: the checkpoint trained on another vocabulary than {where}'s meta.pkl "
                        f"(its {saved_meta.get('vocab_size')} ids against {(meta or {}).get('vocab_size')}): resume "
                        f"on the data it trained on")


def checked_encoding(meta, vocab_size):
    """The tiktoken encoding of a "bpe" codec_kind (meta's, else r50k_base); UserError when its size
    is not the model's vocab_size."""
    name = (meta or {}).get("encoding", "r50k_base")
    enc = bpe_encoding(name)
    if enc.n_vocab != vocab_size:
        raise UserError(f"meta.pkl names the encoding {name!r} of {enc.n_vocab:,} tokens but the model has "
                        f"{vocab_size:,} outputs: set --vocab_size={enc.n_vocab} to train with it, or name the "
                        f"tokenizer the ids came from")
    return enc


def make_codec(meta, vocab_size):
    """(encode, decode) for a dataset by codec_kind: its char vocab, its Hugging Face tokenizer, or
    a tiktoken BPE (checked_encoding); None for some other tokenizer's ids.

    encode raises UserError naming the characters a char vocabulary lacks;
    make_codec raises UserError (with the TIKTOKEN_CACHE_DIR fix) when the
    BPE vocabulary cannot be loaded, and as codec_kind and checked_encoding do.
    """
    kind = codec_kind(meta, vocab_size)
    if kind == "char":  # (a checkpoint's copy is checked as meta.pkl is: an edited table decodes garbage)
        check_char_vocabulary(meta, "the character table the model was trained with",
                              "the checkpoint or its meta.pkl was edited; use them as written")
        stoi, itos = meta["stoi"], meta["itos"]

        def encode(s):
            unknown = sorted(set(s) - stoi.keys())
            if unknown:
                known = "".join(sorted(stoi))
                raise UserError(f"{''.join(unknown)!r} not in this vocabulary of {len(stoi)} characters: "
                                f"use only its characters ({known[:40]!r}{'...' if len(known) > 40 else ''})")
            return [stoi[c] for c in s]
        return encode, (lambda ids: "".join(itos[i] for i in ids))
    if kind is None:
        return None
    if kind == "hf":
        tok = hf_tokenizer(meta)
        return (lambda s: tok.encode(s, add_special_tokens=False).ids), (lambda ids: tok.decode(ids, False))
    enc = checked_encoding(meta, vocab_size)
    return (lambda s: enc.encode(s, allowed_special={"<|endoftext|>"})), enc.decode


def hf_tokenizer(meta):
    """The tokenizers.Tokenizer of the tokenizer.json meta holds ("hf" codec_kind); UserError when
    the package is missing."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise UserError("this data's Hugging Face tokenizer needs the package tokenizers: pip install tokenizers") \
            from None
    return Tokenizer.from_str(meta["tokenizer"])


def bpe_encoding(name):
    """tiktoken's encoding `name`; UserError saying how to get its vocabulary file offline."""
    try:
        import tiktoken
        return tiktoken.get_encoding(name)
    except ImportError:
        raise UserError("GPT-2 BPE needs the package tiktoken: pip install tiktoken") from None
    except Exception as e:  # no network: requests' ConnectionError, an HTTP error, ...
        raise UserError(f"cannot load the {name} vocabulary ({type(e).__name__}); offline, set TIKTOKEN_CACHE_DIR to a "
                        f"folder holding tiktoken's cached vocabulary file (fill one where the network is: "
                        f"TIKTOKEN_CACHE_DIR=cache python -c \"import tiktoken; tiktoken.get_encoding('{name}')\", "
                        f"then copy cache/ here)") from None
