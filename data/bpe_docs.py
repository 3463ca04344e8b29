"""Documents to GPT-2 BPE token files: what data/corpus/prepare.py and data/fineweb/prepare.py share.

Each document is encoded with tiktoken's r50k_base (encode_ordinary: an
"<|endoftext|>" inside a text stays plain text) and followed by
<|endoftext|> (50256), as nanoGPT's openwebtext prepare does. tokenize()
encodes in worker processes; TokenFiles writes train.bin / val.bin (uint16)
and meta.pkl under temporary names and puts them in place only in commit().
"""

import itertools
import os
import pickle
import sys
import time
from collections import deque
from multiprocessing import Pool

import numpy as np

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
                         f"on first use; offline, set TIKTOKEN_CACHE_DIR to a folder that holds it") from None


def encode_batch(texts):
    """One worker task: (the ids of every text followed by EOT, as one uint16 array; each text's id count)."""
    enc = encoding()  # tiktoken caches it per process
    ids = [enc.encode_ordinary(text) + [EOT] for text in texts]
    lengths = [len(x) for x in ids]
    return np.fromiter(itertools.chain.from_iterable(ids), dtype=np.uint16, count=sum(lengths)), lengths


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


def tokenize(texts, workers):
    """Each text's ids followed by EOT, a uint16 array per text, in the order of texts.

    workers > 1: that many processes encode batches of texts, at most
    2 * workers batches in flight, so a stream is read only as fast as it is
    encoded. Close the generator to stop early (the pool is terminated).
    """
    if workers <= 1:
        for batch in batches(texts):
            yield from split_ids(*encode_batch(batch))
        return
    with Pool(workers) as pool:
        pending = deque()
        for batch in batches(texts):
            pending.append(pool.apply_async(encode_batch, (batch,)))
            if len(pending) >= 2 * workers:
                yield from split_ids(*pending.popleft().get())
        while pending:
            yield from split_ids(*pending.popleft().get())


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
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from configurator import folder_problem
    problem = folder_problem(out_dir)
    if problem:
        raise SystemExit(f"--out={out_dir}: {problem}")


class TokenFiles:
    """train.bin and val.bin of one dataset folder, written as train.bin.tmp / val.bin.tmp until commit().

    with TokenFiles(out_dir) as out:
        out.write("train", ids) ...
        out.commit()              # the new dataset in place

    Leaving the block without commit() (an error, Ctrl-C) removes the .tmp
    files and leaves out_dir as it was. commit() removes an old train.bin and
    meta.pkl, then renames val.bin, train.bin and, last, meta.pkl into place:
    until the last rename out_dir lacks train.bin or meta.pkl, so train.py
    (vocab_size from meta.pkl) refuses it, and old and new files never meet.
    """

    def __init__(self, out_dir):
        os.makedirs(out_dir, exist_ok=True)
        self.out_dir = out_dir
        self.counts = {"train": 0, "val": 0}
        self.files = {split: open(self.path(f"{split}.bin.tmp"), "wb") for split in self.counts}

    def path(self, name):
        return os.path.join(self.out_dir, name)

    def write(self, split, ids):
        ids.tofile(self.files[split])
        self.counts[split] += len(ids)

    def commit(self):
        with open(self.path("meta.pkl.tmp"), "wb") as f:
            pickle.dump(META, f)
        for f in self.files.values():
            f.flush()
            os.fsync(f.fileno())
            f.close()
        for name in ("train.bin", "meta.pkl"):  # from here the folder holds no dataset the trainer takes
            if os.path.exists(self.path(name)):
                os.remove(self.path(name))
        for name in ("val.bin", "train.bin", "meta.pkl"):
            put_in_place(self.path(name + ".tmp"), self.path(name))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for f in self.files.values():
            f.close()
        for name in ("train.bin.tmp", "val.bin.tmp", "meta.pkl.tmp"):  # left only when commit() did not finish
            if os.path.exists(self.path(name)):
                os.remove(self.path(name))
