"""Documents to BPE token files: what data/corpus/prepare.py and data/fineweb/prepare.py share.

By default each document is encoded with tiktoken's r50k_base (encode_ordinary:
an "<|endoftext|>" inside a text stays plain text) and followed by
<|endoftext|> (50256), as nanoGPT's openwebtext prepare does. A Codec from
hf_codec() encodes with a Hugging Face model's own tokenizer.json instead (the
`tokenizers` library) and appends its end-of-text token; ids above 65,535 are
written as uint32. tokenize() encodes in worker processes; TokenFiles writes
train.bin / val.bin and meta.pkl under temporary names and puts them in place
only in commit().
"""

import itertools
import os
import pickle
import sys
import time
from collections import deque
from multiprocessing import get_context
from typing import NamedTuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root
from plumbing.common import cli  # noqa: E402,F401 (the prepare scripts' entry)
from plumbing.disk import SHORT_WRITE, os_error, remove_leftovers, temporary_prefix, writing  # noqa: E402,F401

ENCODING = "r50k_base"
EOT = 50256                                   # <|endoftext|>, after every document
META = {"vocab_size": 50257, "encoding": ENCODING, "dtype": "uint16"}  # ids <= 50256 fit in uint16
BATCH_CHARS = 1 << 20                         # text sent to a worker per task
PROGRESS_SECONDS = 3                          # a progress line at least this often


def encoding():
    """tiktoken's r50k_base; SystemExit with the fix when its vocabulary file cannot be had."""
    try:
        import tiktoken
        return tiktoken.get_encoding(ENCODING)
    except ImportError:
        raise SystemExit("GPT-2 BPE needs the package tiktoken: pip install tiktoken") from None
    except Exception as e:  # offline: requests' ConnectionError, or an HTTP error
        raise SystemExit(f"cannot load tiktoken's {ENCODING} vocabulary ({type(e).__name__}): it is downloaded "
                         f"on first use; offline, set TIKTOKEN_CACHE_DIR to a folder that holds it (fill one where the "
                         f"network is: TIKTOKEN_CACHE_DIR=cache python -c \"import tiktoken; "
                         f"tiktoken.get_encoding('{ENCODING}')\", then copy cache/ here)") from None


class Codec(NamedTuple):
    """What tokenize() encodes with: tokenizer_json None for GPT-2's r50k_base (tiktoken), else the
    path of a Hugging Face tokenizer.json; eos: the id after every document; meta: meta.pkl's dict."""

    tokenizer_json: str | None
    eos: int
    meta: dict


GPT2 = Codec(None, EOT, META)


def hf_codec(path, eos_token=None):
    """The Codec of a Hugging Face tokenizer: path is a model folder (its tokenizer.json, and its
    config.json's vocab_size when that is larger: a head padded past the tokenizer, as Qwen3's) or
    a tokenizer.json. eos_token: the token after every document (default: tokenizer_config.json's
    eos_token, else "<|endoftext|>"). meta.pkl then holds the tokenizer.json itself ("tokenizer"),
    so a checkpoint carries what decodes it. SystemExit (one line) when a file is missing or
    unreadable, or the end-of-text token is not in the vocabulary.
    """
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    if not os.path.isfile(file):
        raise SystemExit(f"--tokenizer={path}: no tokenizer.json there (name a Hugging Face model folder or its "
                         f"tokenizer.json)")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise SystemExit("a Hugging Face tokenizer needs the package tokenizers: pip install tokenizers") from None
    try:
        with open(file, encoding="utf-8") as f:
            text = f.read()
        tokenizer = Tokenizer.from_str(text)
    except Exception as e:  # the tokenizers library raises its own exception type
        raise SystemExit(f"{file} is not a tokenizer.json the tokenizers library reads ({str(e)[:100]})") from None
    config = read_json(os.path.join(folder, "tokenizer_config.json"))
    if eos_token is None:
        eos_token = config.get("eos_token") or "<|endoftext|>"
        eos_token = eos_token.get("content") if isinstance(eos_token, dict) else eos_token
    eos = tokenizer.token_to_id(eos_token)
    if eos is None:
        raise SystemExit(f"{file} has no token {eos_token!r} to end each document with: name one with --eos_token")
    vocab = max(tokenizer.get_vocab_size(with_added_tokens=True),
                read_json(os.path.join(folder, "config.json")).get("vocab_size", 0))
    special = {}  # the folder's other special tokens and chat template, for export to write back
    for key in ("bos_token", "unk_token", "pad_token"):
        token = config.get(key)
        token = token.get("content") if isinstance(token, dict) else token
        if isinstance(token, str) and tokenizer.token_to_id(token) is not None:
            special[key] = token
    template = os.path.join(folder, "chat_template.jinja")
    chat = open(template, encoding="utf-8").read() if os.path.isfile(template) else config.get("chat_template")
    meta = {"vocab_size": vocab, "dtype": "uint16" if vocab <= 1 << 16 else "uint32", "tokenizer": text,
            "eos_token": eos_token, "special_tokens": special, **({"chat_template": chat} if chat else {})}
    return Codec(file, eos, meta)


def read_json(path):
    """path's JSON object, {} when there is no such file; SystemExit (common.read_json's one line
    naming the file) for a file that is not one (a tokenizer folder is data from elsewhere)."""
    if not os.path.isfile(path):
        return {}
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from plumbing.common import read_json as read_object
    from configurator import UserError
    try:
        return read_object(path)
    except UserError as e:
        raise SystemExit(str(e)) from None


_TOKENIZERS = {}  # per worker process: tokenizer.json path -> tokenizers.Tokenizer


def encode_batch(texts, tokenizer_json=None, eos=EOT, dtype="uint16"):
    """One worker task: (the ids of every text followed by eos, as one array of dtype; each text's
    id count). tokenizer_json None: tiktoken's r50k_base (encode_ordinary), else that tokenizer."""
    if tokenizer_json is None:
        enc = encoding()  # tiktoken caches it per process
        ids = [enc.encode_ordinary(text) + [eos] for text in texts]
    else:
        if tokenizer_json not in _TOKENIZERS:
            from tokenizers import Tokenizer
            _TOKENIZERS[tokenizer_json] = Tokenizer.from_file(tokenizer_json)
        encoded = _TOKENIZERS[tokenizer_json].encode_batch(texts, add_special_tokens=False)
        ids = [e.ids + [eos] for e in encoded]
    lengths = [len(x) for x in ids]
    return np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=sum(lengths)), lengths


def batches(texts, max_chars=BATCH_CHARS):
    """texts in lists of about max_chars characters (a longer text alone)."""
    batch, size = [], 0
    for text in texts:
        batch.append(text)
        size += len(text)
        if size >= max_chars:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def tokenize(texts, workers, codec=GPT2):
    """Each text's ids followed by codec's end-of-text id, an array (meta's dtype) per text, in the
    order of texts.

    workers > 1: that many processes encode batches of texts, at most
    2 * workers batches in flight, so a stream is read only as fast as it is
    encoded. Close the generator to stop early (the pool is terminated).
    """
    how = (codec.tokenizer_json, codec.eos, codec.meta["dtype"])  # what a worker needs (not meta's tokenizer text)
    if workers <= 1:
        for batch in batches(texts):
            yield from split_ids(*encode_batch(batch, *how))
        return
    # spawned, not forked: a fork copies the locks the parent's other threads hold (torch's, a test
    # runner's), and a child that needs one waits forever
    pool, done = get_context("spawn").Pool(workers), False
    try:
        pending = deque()
        for batch in batches(texts):
            pending.append(pool.apply_async(encode_batch, (batch, *how)))
            if len(pending) >= 2 * workers:
                yield from split_ids(*pending.popleft().get())
        while pending:
            yield from split_ids(*pending.popleft().get())
        done = True
    finally:
        # At the end the workers leave on the pool's sentinel. terminate() (Pool's __exit__) sends them
        # SIGTERM instead, which a worker whose signal lands on another of its threads never acts on (its
        # main thread waits for a task): the join then waited forever. terminate() only for an early stop.
        if done:
            pool.close()
        else:
            pool.terminate()
        pool.join()


def split_ids(ids, lengths):
    return np.split(ids, np.cumsum(lengths)[:-1])


class Progress:
    """Counts documents and tokens; add() prints a line with tokens/s and an ETA every PROGRESS_SECONDS."""

    def __init__(self):
        self.start = self.last = time.monotonic()
        self.docs = self.tokens = 0

    def add(self, n_tokens, done):
        """One more document of n_tokens; done: the fraction of the whole job finished (for the ETA)."""
        self.docs += 1
        self.tokens += n_tokens
        now = time.monotonic()
        if now - self.last >= PROGRESS_SECONDS:
            self.last = now
            eta = (now - self.start) * (1 - done) / done if done > 0 else float("nan")
            print(f"{self.docs:,} docs, {self.tokens:,} tokens, {self.rate():,.0f} tokens/s, "
                  f"{100 * done:.1f}% done, ETA {duration(eta)}", flush=True)

    def seconds(self):
        return time.monotonic() - self.start

    def rate(self):
        return self.tokens / max(self.seconds(), 1e-9)


def duration(seconds):
    if seconds != seconds:  # nan: nothing done yet
        return "?"
    minutes, s = divmod(int(seconds), 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m{s:02d}s"


def put_in_place(tmp, path):
    os.replace(tmp, path)  # atomic on POSIX: path is the old file or the new one, never a part


def check_out(out_dir):
    """SystemExit, one line, when out_dir cannot hold the dataset (a file, an unwritable folder):
    checked before any input is read, so the hours of encoding are never lost at the end."""
    from configurator import folder_problem
    problem = folder_problem(out_dir)
    if problem:
        raise SystemExit(f"--out={out_dir}: {problem}")


TMP_NAMES = ("train.bin", "val.bin", "meta.pkl")  # what TokenFiles writes under a temporary name first


class TokenFiles:
    """train.bin and val.bin of one dataset folder, written as train.bin.tmp<pid>- / val.bin.tmp<pid>- until
    commit(); a killed run's (SIGKILL runs no cleanup) are removed by the next one, GBs at FineWeb's size.

    with TokenFiles(out_dir) as out:
        out.write("train", ids) ...
        out.commit()              # the new dataset in place

    Leaving the block without commit() (an error, Ctrl-C) removes the .tmp
    files and leaves out_dir as it was. commit() removes an old train.bin and
    meta.pkl, then renames val.bin, train.bin and, last, meta.pkl into place:
    until the last rename out_dir lacks train.bin or meta.pkl, so train.py
    (vocab_size from meta.pkl) refuses it, and old and new files never meet.
    """

    def __init__(self, out_dir, meta=META):
        os.makedirs(out_dir, exist_ok=True)
        self.out_dir, self.meta = out_dir, meta
        self.counts = {"train": 0, "val": 0}
        for name in TMP_NAMES:
            remove_leftovers(out_dir, name + ".tmp", "a half-written token file")
        self.files = {split: open(self.tmp(f"{split}.bin"), "wb") for split in self.counts}

    def tmp(self, name):
        """The temporary that becomes `name` at commit()."""
        return self.path(temporary_prefix(name + ".tmp"))

    def path(self, name):
        return os.path.join(self.out_dir, name)

    def write(self, split, ids):
        with writing(self.files[split].name):  # (a full disk: numpy's short write has no errno)
            ids.tofile(self.files[split])
        self.counts[split] += len(ids)

    def commit(self):
        with open(self.tmp("meta.pkl"), "wb") as f:
            pickle.dump(self.meta, f)
        for split, f in self.files.items():
            with writing(f.name):
                f.flush()
                os.fsync(f.fileno())
            written, meant = os.fstat(f.fileno()).st_size, self.counts[split] * np.dtype(self.meta.get("dtype", "uint16")).itemsize
            f.close()
            if written != meant:  # a write the disk cut short that nothing reported (a file-size limit, past a buffer)
                raise OSError(SHORT_WRITE, f"a short write ({meant} bytes meant, {written} on disk)", f.name)
        for name in ("train.bin", "meta.pkl"):  # from here the folder holds no dataset the trainer takes
            if os.path.exists(self.path(name)):
                os.remove(self.path(name))
        for name in ("val.bin", "train.bin", "meta.pkl"):
            put_in_place(self.tmp(name), self.path(name))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for f in self.files.values():
            f.close()
        for name in TMP_NAMES:  # left only when commit() did not finish
            if os.path.exists(self.tmp(name)):
                os.remove(self.tmp(name))
