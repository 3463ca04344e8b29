"""Data preparation: Markdown stripping, whole-play validation split, char and BPE encodings."""

import importlib.util
import os
import pickle
import sys

import numpy as np

from conftest import ROOT, gpt2_bpe

sys.path.insert(0, os.path.join(ROOT, "data"))
import shakespeare_text  # noqa: E402


def load_prepare(name):
    spec = importlib.util.spec_from_file_location(f"prepare_{name}", os.path.join(ROOT, "data", name, "prepare.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_markdown_to_text():
    md = "# Macbeth\n\n## ACT I\n\n_Thunder. Enter three Witches_\n\n**First Witch**  \nWhen shall we three meet again  \n" \
         "In thunder? _\\[Aside]_\n"
    assert shakespeare_text.markdown_to_text(md) == (
        "Macbeth\n\nACT I\n\nThunder. Enter three Witches\n\nFirst Witch:\nWhen shall we three meet again\n"
        "In thunder? [Aside]\n")


def test_validation_holds_whole_plays_that_training_never_sees():
    train, val = shakespeare_text.load_plays()
    for title in ("Julius Caesar", "Twelfth Night", "The Tempest"):
        assert val.count(title) >= 1
    # a line from inside each held-out play, and one from a training play
    for line in ("Friends, Romans, countrymen, lend me your ears;", "If music be the food of love, play on;",
                 "We are such stuff"):
        assert line in val and line not in train
    assert "To be, or not to be" in train and "To be, or not to be" not in val
    assert 0.05 < len(val) / (len(train) + len(val)) < 0.15
    assert not any(c in train for c in "*_#\\")


def test_char_prepare_round_trips(tmp_path):
    meta = load_prepare("shakespeare_char").prepare("To be, or not\n", "not to be?", str(tmp_path))
    ids = np.fromfile(tmp_path / "val.bin", dtype=np.uint16)
    assert "".join(meta["itos"][i] for i in ids) == "not to be?"
    with open(tmp_path / "meta.pkl", "rb") as f:
        assert pickle.load(f)["vocab_size"] == len(set("To be, or not\nnot to be?"))


def test_bpe_prepare_round_trips_a_few_paragraphs(tmp_path):
    enc = gpt2_bpe()
    train = "ROMEO:\nBut, soft! what light through yonder window breaks?\n\nJULIET:\nO Romeo, Romeo!\n"
    val = "HAMLET:\nTo be, or not to be, that is the question:\n"
    meta, n_train, n_val = load_prepare("shakespeare").prepare(train, val, str(tmp_path))
    assert meta == {"vocab_size": 50257, "encoding": "r50k_base", "dtype": "uint16"}
    ids = np.fromfile(tmp_path / "train.bin", dtype=np.uint16)
    assert len(ids) == n_train and enc.decode(ids.tolist()) == train
    assert enc.decode(np.fromfile(tmp_path / "val.bin", dtype=np.uint16).tolist()) == val


def test_write_atomic_leaves_no_temporary_and_removes_a_killed_runs(tmp_path, capsys):
    """The Shakespeare scripts' writes: a write that fails mid-way leaves the old file and no temporary;
    a temporary of a killed run (its process gone) is removed by the next write, which says so."""
    import subprocess

    import pytest
    path = tmp_path / "train.bin"
    path.write_bytes(b"old")

    def fails(f):
        f.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        shakespeare_text.write_atomic(str(path), fails)
    assert os.listdir(tmp_path) == ["train.bin"] and path.read_bytes() == b"old"
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    (tmp_path / f"train.bin.tmp{child.pid}-").write_bytes(b"x" * 100)
    shakespeare_text.write_atomic(str(path), lambda f: f.write(b"new"))
    assert os.listdir(tmp_path) == ["train.bin"] and path.read_bytes() == b"new"
    assert "a half-written file, left by a run of this command that was killed" in capsys.readouterr().err
