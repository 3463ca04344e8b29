"""Your own corpus and FineWeb in GPT-2 BPE: data/corpus/prepare.py, data/fineweb/prepare.py, data/bpe_docs.py."""

import importlib.util
import json
import os
import pickle
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import ROOT, data_keys, gpt2_bpe
from configurator import UserError
from plumbing.dataset import load_data
from test_train import run, tiny_args

sys.path.insert(0, os.path.join(ROOT, "data"))
import bpe_docs  # noqa: E402

EOT = 50256
META = {"vocab_size": 50257, "encoding": "r50k_base", "dtype": "uint16"}
WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly hex "
         "naïve café owners — résumé, 東京, emoji 🙂, numbers 12345 and <|endoftext|> as text").split()


def load_prepare(name):
    spec = importlib.util.spec_from_file_location(f"prepare_{name}", os.path.join(ROOT, "data", name, "prepare.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


corpus, fineweb = load_prepare("corpus"), load_prepare("fineweb")


@pytest.fixture(scope="module")
def enc():
    return gpt2_bpe()


def text(i, n_words=30):
    """Document i: distinct, at least ~30 tokens, with multi-line and non-ASCII text."""
    rng = np.random.default_rng(i)
    words = [WORDS[j] for j in rng.integers(0, len(WORDS), n_words)]
    return f"Document {i}.\n" + " ".join(words[:10]) + "\n\n" + " ".join(words[10:])


def write_corpus(folder, n_txt=4, n_jsonl=5):
    """n_txt .txt files and one .jsonl of n_jsonl lines (plus an empty file and a blank line, both skipped).

    Returns the documents' texts in the order prepare reads them (files sorted, then the .jsonl).
    """
    os.makedirs(folder / "txt")
    docs = [text(i) for i in range(n_txt + n_jsonl)]
    for i in range(n_txt):
        (folder / "txt" / f"{i:02d}.txt").write_text(docs[i], encoding="utf-8")
    (folder / "txt" / "empty.txt").write_text("")
    lines = [json.dumps({"id": i, "text": docs[i]}) for i in range(n_txt, n_txt + n_jsonl)]
    (folder / "docs.jsonl").write_text("\n".join(lines[:2] + [""] + lines[2:]) + "\n", encoding="utf-8")
    return docs


def read_split(folder, split):
    """A split's documents: its ids cut after each EOT (encode_ordinary never yields one inside a text)."""
    ids = np.fromfile(os.path.join(folder, f"{split}.bin"), dtype=np.uint16).tolist()
    assert ids and ids[-1] == EOT
    docs, start = [], 0
    for i, t in enumerate(ids):
        if t == EOT:
            docs.append(ids[start:i + 1])
            start = i + 1
    return docs


def assert_whole_documents(folder, docs, enc):
    """train.bin and val.bin hold each document's encoding + EOT once, in input order within each split.

    Returns the indices of the validation documents.
    """
    expected = [enc.encode_ordinary(d) + [EOT] for d in docs]
    train, val = read_split(folder, "train"), read_split(folder, "val")
    val_index = [i for i, e in enumerate(expected) if e in val]
    assert [expected[i] for i in val_index] == val
    assert [e for i, e in enumerate(expected) if i not in val_index] == train
    with open(os.path.join(folder, "meta.pkl"), "rb") as f:
        assert pickle.load(f) == META
    return val_index


def prepare_corpus(*argv):
    return corpus.main([str(a) for a in argv])


def cfg_for(folder):
    """What load_data reads of a config: tiny_args' block_size, vocab_size from meta.pkl."""
    return SimpleNamespace(dataset=str(folder), block_size=16, vocab_size=0)


def refused_by_trainer(folder, tmp_path, match):
    with pytest.raises(UserError, match=match):
        run(tiny_args(folder, tmp_path / "refused", "--max_iters=2", "--eval_interval=2"))


def test_txt_and_jsonl_files_become_a_dataset_the_trainer_reads(tmp_path, enc, capsys):
    docs = write_corpus(tmp_path / "in")
    out = tmp_path / "ds"
    counts = prepare_corpus(tmp_path / "in" / "txt" / "*.txt", tmp_path / "in" / "docs.jsonl", f"--out={out}",
                            "--val_docs=2", "--workers=2")
    val_index = assert_whole_documents(out, docs, enc)
    assert len(val_index) == 2
    assert counts == {split: len(np.fromfile(out / f"{split}.bin", np.uint16)) for split in ("train", "val")}
    assert sorted(os.listdir(out)) == ["meta.pkl", "train.bin", "val.bin"]
    printed = capsys.readouterr().out
    assert "9 documents: 7 train, 2 val" in printed and "tokens/s with 2 workers" in printed

    data = load_data(**data_keys(cfg_for(out)))
    assert data["dtype"] == "uint16" and data["meta"] == META
    run(tiny_args(str(out), tmp_path / "run", "--max_iters=2", "--eval_interval=2",
                  f"--vocab_size={data['meta']['vocab_size']}"))
    with open(tmp_path / "run" / "log.jsonl") as f:
        assert any(json.loads(line)["kind"] == "eval" for line in f)


def test_validation_share_holds_out_whole_documents_the_same_way_each_time(tmp_path, enc):
    docs = [text(i, n_words=5 + i % 7) for i in range(40)]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"body": d}) + "\n" for d in docs), encoding="utf-8")
    for name in ("a", "b"):
        prepare_corpus(tmp_path / "docs.jsonl", f"--out={tmp_path / name}", "--val_share=0.1", "--workers=1",
                       "--text_field=body")
    val_index = assert_whole_documents(tmp_path / "a", docs, enc)
    assert len(val_index) == 4 and val_index != [0, 1, 2, 3]
    for split in ("train.bin", "val.bin"):
        assert (tmp_path / "a" / split).read_bytes() == (tmp_path / "b" / split).read_bytes()
    # a folder as INPUT: its .txt and .jsonl files; the share is rounded up to one document
    write_corpus(tmp_path / "dir")
    prepare_corpus(tmp_path / "dir", f"--out={tmp_path / 'c'}", "--workers=1")
    assert len(read_split(tmp_path / "c", "val")) == 1 and len(read_split(tmp_path / "c", "train")) == 8


def bad(argv, match):
    with pytest.raises(SystemExit, match=match) as e:
        prepare_corpus(*argv)
    assert "\n" not in str(e.value)


def test_bad_input_is_a_one_line_error(tmp_path, enc):
    good = json.dumps({"text": "fine"})
    (tmp_path / "broken.jsonl").write_text(f"{good}\n{good}\n{{'text': 'single quotes'}}\n")
    bad([tmp_path / "broken.jsonl", f"--out={tmp_path / 'o'}"], r"broken\.jsonl:3: not a JSON object")
    (tmp_path / "nofield.jsonl").write_text(f"{good}\n" + json.dumps({"content": "x", "id": 2}) + "\n")
    bad([tmp_path / "nofield.jsonl", f"--out={tmp_path / 'o'}"],
        r"nofield\.jsonl:2: no 'text' field \(has: content, id\); name the text's field with --text_field")
    bad([tmp_path / "*.md", f"--out={tmp_path / 'o'}"], r"no input matches '.*\*\.md' \(no such file\)")
    (tmp_path / "e1.txt").write_text("")
    (tmp_path / "e2.jsonl").write_text("\n" + json.dumps({"text": ""}) + "\n")
    bad([tmp_path / "e1.txt", tmp_path / "e2.jsonl", f"--out={tmp_path / 'o'}"], "no documents")
    for i in range(3):
        (tmp_path / f"d{i}.txt").write_text(text(i))
    bad([tmp_path / "d*.txt", f"--out={tmp_path / 'o'}", "--val_docs=0"],
        "--val_docs=0 leaves the validation split empty")
    bad([tmp_path / "d*.txt", f"--out={tmp_path / 'o'}", "--val_share=0.9"],
        "--val_share=0.9 would hold out 3 of the 3 documents, leaving none to train on")
    if importlib.util.find_spec("pyarrow") is None:
        (tmp_path / "t.parquet").write_bytes(b"PAR1")
        bad([tmp_path / "t.parquet", f"--out={tmp_path / 'o'}"],
            r"t\.parquet: reading \.parquet needs the package pyarrow \(pip install pyarrow\)")
    assert not (tmp_path / "o").exists()


def test_an_interrupted_prepare_leaves_nothing_the_trainer_takes(tmp_path, enc, monkeypatch):
    docs = write_corpus(tmp_path / "in")
    args = (tmp_path / "in" / "txt", tmp_path / "in" / "docs.jsonl", f"--out={tmp_path / 'ds'}", "--val_docs=2",
            "--workers=1")
    calls = []

    def write_then_fail(self, split, ids):
        if calls and split == "train":  # the train file holds a document: stop
            raise KeyboardInterrupt
        calls.append(split)
        self.files[split].write(ids.tobytes())
        self.counts[split] += len(ids)

    monkeypatch.setattr(bpe_docs.TokenFiles, "write", write_then_fail)
    with pytest.raises(KeyboardInterrupt):
        prepare_corpus(*args)
    assert os.listdir(tmp_path / "ds") == []  # the .tmp files are removed too
    refused_by_trainer(tmp_path / "ds", tmp_path, "train.bin not found")
    monkeypatch.undo()

    # over a complete old dataset: an interruption while writing keeps it whole ...
    old = tmp_path / "ds"
    prepare_corpus(tmp_path / "in" / "txt", f"--out={old}", "--val_docs=1", "--workers=1")
    before = {name: (old / name).read_bytes() for name in ("train.bin", "val.bin", "meta.pkl")}
    monkeypatch.setattr(bpe_docs.TokenFiles, "write", write_then_fail)
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        prepare_corpus(*args)
    assert {name: (old / name).read_bytes() for name in sorted(os.listdir(old))} == before
    monkeypatch.undo()

    # ... and one after train.bin is in place (before meta.pkl) leaves the new bins, no old file, no meta.pkl
    def fail_at_meta(tmp, path):
        if path.endswith("meta.pkl"):
            raise KeyboardInterrupt
        os.replace(tmp, path)

    monkeypatch.setattr(bpe_docs, "put_in_place", fail_at_meta)
    with pytest.raises(KeyboardInterrupt):
        prepare_corpus(*args)
    assert sorted(os.listdir(old)) == ["train.bin", "val.bin"]
    assert (old / "train.bin").read_bytes() != before["train.bin"]
    refused_by_trainer(old, tmp_path, "vocab_size=0 means 'from meta.pkl'")
    monkeypatch.undo()
    prepare_corpus(*args)
    assert len(assert_whole_documents(old, docs, enc)) == 2


# --- FineWeb's loop, against a stand-in for datasets.load_dataset ---

def stand_in(n_docs, asked):
    """A load_dataset that records its arguments and streams n_docs made-up documents."""
    def load_dataset(path, **kwargs):
        asked.append((path, kwargs))
        return ({"text": text(i, n_words=5 + i % 23), "id": i} for i in range(n_docs))
    return load_dataset


def fineweb_expected(enc, n_docs, val_tokens, train_tokens):
    """The ids val.bin and train.bin should hold: whole documents, val first, each until it reaches its count."""
    docs = (enc.encode_ordinary(text(i, n_words=5 + i % 23)) + [EOT] for i in range(n_docs))
    out = {}
    for split, limit in (("val", val_tokens), ("train", train_tokens)):
        out[split] = []
        for ids in docs:
            out[split] += ids
            if len(out[split]) >= limit:
                break
    return out


def test_fineweb_writes_val_then_train_and_the_trainer_reads_it(tmp_path, enc, capsys):
    asked = []
    counts = fineweb.main(["--val_tokens=500", "--train_tokens=3e3", "--workers=2", "--subset=sample-test",
                           f"--out={tmp_path}"], load_dataset=stand_in(300, asked))
    assert asked == [("HuggingFaceFW/fineweb-edu", {"name": "sample-test", "split": "train", "streaming": True})]
    expected = fineweb_expected(enc, 300, 500, 3000)
    for split in ("val", "train"):
        ids = np.fromfile(tmp_path / f"{split}.bin", dtype=np.uint16).tolist()
        assert ids == expected[split] and counts[split] == len(ids)
    assert 500 <= counts["val"] < 600 and 3000 <= counts["train"] < 3100
    printed = capsys.readouterr().out
    assert f"val.bin: {counts['val']:,} tokens\ntrain.bin: {counts['train']:,} tokens\n" in printed
    data = load_data(**data_keys(cfg_for(tmp_path)))
    assert data["meta"] == META and data["dtype"] == "uint16"
    assert sorted(os.listdir(tmp_path)) == ["meta.pkl", "train.bin", "val.bin"]


def test_fineweb_subset_running_out(tmp_path, enc, capsys):
    counts = fineweb.main(["--val_tokens=500", "--train_tokens=1e9", "--workers=1", f"--out={tmp_path}"],
                          load_dataset=stand_in(200, []))
    expected = fineweb_expected(enc, 200, 500, 10 ** 9)
    assert np.fromfile(tmp_path / "train.bin", dtype=np.uint16).tolist() == expected["train"]
    assert f"train.bin: {counts['train']:,} tokens (the subset has no more)" in capsys.readouterr().out
    assert load_data(**data_keys(cfg_for(tmp_path)))["meta"] == META
    with pytest.raises(SystemExit, match="the sample-10BT subset ran out after .* tokens, before train.bin got any"):
        fineweb.main(["--val_tokens=1e9", "--workers=1", f"--out={tmp_path / 'short'}"],
                     load_dataset=stand_in(50, []))
    assert os.listdir(tmp_path / "short") == []


def test_inputs_that_are_not_regular_files_are_refused_before_any_read(tmp_path, enc):
    """A FIFO or /dev/zero would be read forever, a dangling link not at all: each is one line, at once."""
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    bad([fifo, f"--out={tmp_path / 'o'}"], r"pipe\.txt: not a regular file")
    if os.path.exists("/dev/zero"):
        bad(["/dev/zero", f"--out={tmp_path / 'o'}"], r"/dev/zero: not a regular file")
    (tmp_path / "gone.txt").symlink_to(tmp_path / "nothing.txt")
    bad([tmp_path / "gone.txt", f"--out={tmp_path / 'o'}"], r"gone\.txt: not a regular file")
    assert not (tmp_path / "o").exists()


def test_flags_that_cannot_work_are_refused_before_any_read(tmp_path, enc):
    """An --out that is a file or cannot be written, a share that is no share (nan, 0, above 1), no
    workers, a token count that is not one: each one line naming the flag, before any input is read
    (a stand-in dataset that fails if opened) and nothing written."""
    docs = write_corpus(tmp_path / "in")
    (tmp_path / "taken").write_text("a file")
    bad([tmp_path / "in", f"--out={tmp_path / 'taken'}"], r"--out=.*taken: a file, not a folder")
    bad([tmp_path / "in", f"--out={tmp_path / 'taken' / 'sub'}"],
        r"--out=.*taken is a file, not a folder: no folder can be made inside it")
    if os.path.isdir("/proc/self"):  # a folder no user, root included, can create files in
        bad([tmp_path / "in", "--out=/proc/self/ds"], r"--out=/proc/self/ds: cannot write in /proc/self")
    for share in ("nan", "0", "1.5", "-0.1", "inf"):
        bad([tmp_path / "in", f"--out={tmp_path / 'o'}", f"--val_share={share}"],
            rf"--val_share={float(share)}: the share of documents held out is a number in \(0, 1\)")
    bad([tmp_path / "in", f"--out={tmp_path / 'o'}", "--workers=0"], "--workers=0: encode with at least 1 process")
    assert not (tmp_path / "o").exists() and docs

    def never(*args, **kwargs):
        raise AssertionError("the dataset was opened before the flags were checked")

    for flags, match in ((["--train_tokens=nan"], "--train_tokens=nan: a token count >= 1"),
                         (["--val_tokens=0"], "--val_tokens=0: a token count >= 1"),
                         (["--workers=-1"], "--workers=-1: encode with at least 1 process"),
                         ([f"--out={tmp_path / 'taken'}"], "--out=.*taken: a file, not a folder")):
        with pytest.raises(SystemExit, match=match) as e:
            fineweb.main(flags + [f"--out={tmp_path / 'fw'}"] * ("--out" not in flags[0]), load_dataset=never)
        assert "\n" not in str(e.value)
    assert not (tmp_path / "fw").exists()


def test_fineweb_without_the_network_is_one_line_and_writes_nothing(tmp_path, monkeypatch, enc):  # enc: the vocab is read first
    """Offline (the Hub's host does not resolve): one line naming the network need, the size at the
    flags given and the small slice, before the Hub's client retries for a minute; a stream that
    breaks mid-way is the same line, and --out is as it was."""
    import socket
    import types

    def unresolved(*args, **kw):
        raise OSError(-2, "Name or service not known")

    def never(*args, **kw):
        raise AssertionError("the Hub was asked although its host does not resolve")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=never))
    monkeypatch.setattr(socket, "getaddrinfo", unresolved)
    out = tmp_path / "fw"
    with pytest.raises(SystemExit) as e:
        fineweb.main(["--train_tokens=1e8", f"--out={out}"])
    line = str(e.value)
    assert "\n" not in line and "needs the network" in line and "0.2 GB" in line and "--train_tokens=1e8" in line
    assert not out.exists()
    monkeypatch.undo()

    def broken(*args, **kw):
        def docs():
            yield {"text": "one document"}
            raise ConnectionError("Couldn't reach 'HuggingFaceFW/fineweb-edu' on the Hub")
        return docs()
    with pytest.raises(SystemExit, match="needs the network"):
        fineweb.main(["--val_tokens=1", "--train_tokens=1e3", "--workers=1", f"--out={out}"], load_dataset=broken)
    assert not out.exists() or sorted(os.listdir(out)) == []


@pytest.mark.slow
@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGKILL"])
def test_a_prepare_stopped_mid_encoding_leaves_no_token_files_once_it_or_its_rerun_ends(tmp_path, signal_name):
    """The prepare scripts write GBs of token files under temporary names. A SIGTERM (a cluster's time
    limit) runs their cleanup: one 'terminated' line, exit 143, the folder as it was. A SIGKILL runs
    none: the next run removes the killed one's files, says so, and writes the dataset whole."""
    import random
    import signal
    import subprocess
    import time
    gpt2_bpe()
    rng = random.Random(0)
    words = ["alpha", "beta", "gamma", "delta", "scale", "vector", "norm", "model"]
    docs = tmp_path / "docs.jsonl"
    with open(docs, "w") as f:
        for _ in range(20000):
            f.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(300))}) + "\n")
    out = tmp_path / "out"
    argv = [sys.executable, os.path.join(ROOT, "data", "corpus", "prepare.py"), str(docs), f"--out={out}", "--workers=1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env) as proc:
        deadline = time.monotonic() + 120
        while not (out.is_dir() and any(".tmp" in n for n in os.listdir(out))):
            assert proc.poll() is None and time.monotonic() < deadline, "it ended before writing token files"
            time.sleep(0.05)
        proc.send_signal(getattr(signal, signal_name))
        _, err = proc.communicate(timeout=120)
    if signal_name == "SIGTERM":
        assert proc.returncode == 143 and err.startswith("terminated (SIGTERM)") and err.count("\n") == 1, err
        assert os.listdir(out) == []
        return
    left = sorted(n for n in os.listdir(out) if ".tmp" in n)
    assert proc.returncode == -9 and left
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert sorted(os.listdir(out)) == ["meta.pkl", "train.bin", "val.bin"]
    assert all(f"removed {out / n}: a half-written token file" in done.stderr for n in left), done.stderr


@pytest.mark.slow
def test_a_dataset_the_disk_cut_short_is_refused_and_the_old_one_kept(tmp_path):
    """Under a file-size limit numpy's buffered writes of train.bin stopped at the limit without an
    error, and the prepare script replaced a whole dataset by a truncated one (exit 0). Now each token
    file's size is checked against the ids written before it goes in place: one line, exit 1, the old
    dataset byte for byte."""
    import random
    import resource
    import signal
    import subprocess
    gpt2_bpe()
    rng = random.Random(0)
    words = ["alpha", "beta", "gamma", "delta", "scale", "vector", "norm", "model"]

    def corpus(path, n):
        with open(path, "w") as f:
            for _ in range(n):
                f.write(json.dumps({"text": " ".join(rng.choice(words) for _ in range(300))}) + "\n")
        return str(path)

    out = tmp_path / "out"
    argv = [sys.executable, os.path.join(ROOT, "data", "corpus", "prepare.py"), "--workers=1", f"--out={out}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([*argv, corpus(tmp_path / "small.jsonl", 200)], check=True, capture_output=True, env=env, timeout=300)
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}

    def small_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), or comes up short
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))

    done = subprocess.run([*argv, corpus(tmp_path / "big.jsonl", 5000)], capture_output=True, text=True, env=env,
                          timeout=300, preexec_fn=small_disk)
    assert done.returncode == 1 and done.stderr.startswith("error: ") and "Traceback" not in done.stderr, done.stderr
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before
