"""Token files say what they hold: meta.pkl's "dtype" (uint16 or uint32), checked by dataset.load_data."""

import importlib.util
import json
import os
import pickle
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from conftest import ROOT, data_keys, gpt2_bpe
from configurator import UserError, load_config
from plumbing.dataset import load_data, meta_vocab_size
from train import get_batch, train

VOCAB = 40
CPU = torch.device("cpu")


def write_dataset(folder, dtype="uint16", meta=None, n_train=4000, n_val=1000, seed=0):
    """Random ids below VOCAB written as `dtype`; meta.pkl = meta (None: no meta.pkl). Returns the folder."""
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    for split, n in (("train", n_train), ("val", n_val)):
        rng.integers(0, VOCAB, n).astype(dtype).tofile(os.path.join(folder, f"{split}.bin"))
    if meta is not None:
        with open(os.path.join(folder, "meta.pkl"), "wb") as f:
            pickle.dump(meta, f)
    return str(folder)


def char_meta(**extra):
    itos = [chr(ord("a") + i % 26) if i < 26 else chr(ord("A") + i - 26) for i in range(VOCAB)]
    return {"vocab_size": VOCAB, "itos": itos, "stoi": {c: i for i, c in enumerate(itos)}, **extra}


def cfg_for(folder, vocab_size=0):
    return SimpleNamespace(dataset=folder, block_size=16, batch_size=4, seed=1, vocab_size=vocab_size)


def batches(data, cfg):
    """A few train and val batches, as int64 arrays."""
    cfg = SimpleNamespace(**{**vars(cfg), "vocab_size": VOCAB})
    out = [get_batch(data, "train", i, j, cfg, CPU) for i in range(3) for j in range(2)]
    out += [get_batch(data, "val", k, 0, cfg, CPU) for k in range(2)]
    return [(x.numpy(), y.numpy()) for x, y in out]


def old_batches(folder, cfg):
    """The batches as get_batch drew them before dtypes were recorded: always uint16."""
    out = []
    for split, index, micro in [("train", i, j) for i in range(3) for j in range(2)] + [("val", k, 0) for k in range(2)]:
        arr = np.memmap(os.path.join(folder, f"{split}.bin"), dtype=np.uint16, mode="r")
        rng = np.random.default_rng([cfg.seed, index, micro, 1] if split == "train" else [index, 2])
        ix = rng.integers(0, len(arr) - cfg.block_size, size=cfg.batch_size)
        window = np.stack([arr[i:i + cfg.block_size + 1] for i in ix]).astype(np.int64)
        out.append((window[:, :-1], window[:, 1:]))
    return out


def refused(folder, message, vocab_size=0):
    with pytest.raises(UserError, match=message) as e:
        load_data(**data_keys(cfg_for(folder, vocab_size)))
    assert "\n" not in str(e.value)
    return str(e.value)


def train_losses(folder, out_dir):
    args = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=16", "--batch_size=4", "--eval_iters=2",
            "--log_interval=1", "--sample_tokens=0", "--warmup_iters=2", "--max_iters=3", "--eval_interval=3",
            f"--dataset={folder}", f"--out_dir={out_dir}"]
    cfg, given = load_config(args)
    train(cfg, given)
    with open(os.path.join(out_dir, "log.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return [(r["kind"], r["iter"], r.get("loss", r.get("val_loss"))) for r in rows if r["kind"] in ("train", "eval")]


def test_uint32_with_recorded_dtype_trains_on_the_same_batches_as_uint16(tmp_path):
    ds16 = write_dataset(tmp_path / "u16", "uint16", char_meta(dtype="uint16"))
    ds32 = write_dataset(tmp_path / "u32", "uint32", char_meta(dtype="uint32"))
    d16, d32 = load_data(**data_keys(cfg_for(ds16))), load_data(**data_keys(cfg_for(ds32)))
    assert (d16["dtype"], d32["dtype"]) == ("uint16", "uint32")
    for (x16, y16), (x32, y32) in zip(batches(d16, cfg_for(ds16)), batches(d32, cfg_for(ds32))):
        assert np.array_equal(x16, x32) and np.array_equal(y16, y32)
    assert train_losses(ds32, tmp_path / "o32") == train_losses(ds16, tmp_path / "o16")


def test_uint32_without_a_record_is_refused_naming_the_file(tmp_path):
    with_meta = write_dataset(tmp_path / "meta", "uint32", char_meta())
    message = refused(with_meta, r"train\.bin looks like uint32 token ids \(read as uint16, every second value")
    assert os.path.join(with_meta, "meta.pkl") in message and "'dtype': 'uint32'" in message
    no_meta = write_dataset(tmp_path / "bare", "uint32")
    refused(no_meta, r"bare/train\.bin looks like uint32 .*create it as \{'dtype': 'uint32'\}", vocab_size=VOCAB)
    # a vocabulary past 65536: the high halves are 0 or 1
    big = write_dataset(tmp_path / "big", "uint32", {"vocab_size": 100_000})
    np.random.default_rng(1).integers(0, 100_000, 3000).astype(np.uint32).tofile(os.path.join(big, "train.bin"))
    refused(big, r"big/train\.bin looks like uint32 token ids \(read as uint16, every second value")
    # recorded as uint16, written as uint32: the record is what is wrong
    wrong = write_dataset(tmp_path / "wrong", "uint32", char_meta(dtype="uint16"))
    refused(wrong, r"train\.bin looks like uint32 .*records dtype 'uint16': set it to 'uint32'")


def test_a_bad_dtype_record_or_size_is_a_one_line_error(tmp_path):
    refused(write_dataset(tmp_path / "int8", "uint16", char_meta(dtype="int8")),
            r"meta\.pkl records dtype='int8': token files must be 'uint16' or 'uint32'")
    odd = write_dataset(tmp_path / "odd", "uint32", char_meta(dtype="uint32"))
    with open(os.path.join(odd, "val.bin"), "ab") as f:
        f.write(b"\0\0")
    refused(odd, r"odd/val\.bin holds 4002 bytes, not a multiple of 4: it must be uint32 token ids")
    # uint16 ids under a uint32 record: the pairs make ids far past the vocabulary
    halves = write_dataset(tmp_path / "halves", "uint16", char_meta(dtype="uint32"))
    refused(halves, r"halves/train\.bin holds token id \d+ >= vocab_size=40 \(read as uint32\)")


def test_old_uint16_data_without_a_record_loads_as_before(tmp_path):
    for name, meta in (("meta", char_meta()), ("bare", None)):
        folder = write_dataset(tmp_path / name, "uint16", meta)
        data = load_data(**data_keys(cfg_for(folder, vocab_size=VOCAB)))
        assert data["dtype"] == "uint16" and data["meta"] == meta
        for (x, y), (x_old, y_old) in zip(batches(data, cfg_for(folder)), old_batches(folder, cfg_for(folder))):
            assert np.array_equal(x, x_old) and np.array_equal(y, y_old)


def test_shakespeare_char_prepare_records_uint16(tmp_path):
    spec = importlib.util.spec_from_file_location("prepare_char", os.path.join(ROOT, "data", "shakespeare_char",
                                                                              "prepare.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = "To be, or not to be, that is the question:\n" * 4
    module.prepare(text, "Whether 'tis nobler in the mind to suffer\n", str(tmp_path))
    with open(tmp_path / "meta.pkl", "rb") as f:
        assert pickle.load(f)["dtype"] == "uint16"
    data = load_data(**data_keys(SimpleNamespace(dataset=str(tmp_path), block_size=8, vocab_size=0)))
    assert data["dtype"] == "uint16"
    ids = np.fromfile(tmp_path / "train.bin", dtype=data["dtype"])
    assert "".join(data["meta"]["itos"][i] for i in ids) == text


@pytest.mark.parametrize("recorded", [None, "uint16", "uint32"])
def test_int64_token_files_are_named_as_such_and_the_advice_loads(tmp_path, recorded):
    """numpy's default integer: read as uint16 (3 of every 4 values 0) or as uint32 (every second
    one 0, which trains silently on [id, 0, id, 0, ...]) it is named int64, and the conversion the
    message gives then loads, with the batches of the same ids written as uint16."""
    folder = write_dataset(tmp_path / "i64", "int64", char_meta(**({"dtype": recorded} if recorded else {})))
    message = refused(folder, r"train\.bin looks like int64 token ids .*astype\(np\.uint16\)")
    assert "'dtype': 'uint16'" in message
    for split in ("train", "val"):
        path = os.path.join(folder, f"{split}.bin")
        np.fromfile(path, dtype=np.int64).astype(np.uint16).tofile(path)  # the advice, followed
    with open(os.path.join(folder, "meta.pkl"), "wb") as f:
        pickle.dump(char_meta(dtype="uint16"), f)
    reference = write_dataset(tmp_path / "u16", "uint16", char_meta(dtype="uint16"))
    got, want = load_data(**data_keys(cfg_for(folder))), load_data(**data_keys(cfg_for(reference)))
    for (x, y), (x0, y0) in zip(batches(got, cfg_for(folder)), batches(want, cfg_for(reference))):
        assert np.array_equal(x, x0) and np.array_equal(y, y0)


def test_a_dtype_that_cannot_hold_the_vocabulary_is_refused(tmp_path):
    """Ids below 100,277 written as uint16 wrap above 65,535: whatever the file holds, uint16 and a
    vocabulary past 65,536 cannot be right, recorded or not."""
    for recorded in (None, "uint16"):
        meta = {"vocab_size": 100_277, **({"dtype": recorded} if recorded else {})}
        folder = write_dataset(tmp_path / f"wrap_{recorded}", "uint16", meta)
        refused(folder, r"read as uint16, which holds ids up to 65,535, but vocab_size=100,277: write the token "
                        r"files as uint32")
    ok = write_dataset(tmp_path / "ok", "uint32", {"vocab_size": 100_277, "dtype": "uint32"})
    assert load_data(**data_keys(cfg_for(ok)))["dtype"] == "uint32"


def test_the_codec_is_the_models_own_vocabulary_or_none():
    """One rule (dataset.codec_kind) for sample.py, train.py's sample and export.py: a char
    vocabulary must have the model's size, GPT-2 BPE is assumed only at GPT-2's 50,257 ids, and
    an encoding meta.pkl names must have the model's size."""
    from plumbing.dataset import codec_kind, make_codec
    assert codec_kind(char_meta(), VOCAB) == "char" and codec_kind(None, 50257) == "bpe"
    assert codec_kind(None, 100_277) is None and codec_kind({"vocab_size": 100_277}, 100_277) is None
    assert make_codec(None, 100_277) is None  # was: GPT-2's codec for a 100,277-way head
    with pytest.raises(UserError, match="the model has 80 outputs but its meta.pkl vocabulary has 40 characters"):
        codec_kind(char_meta(), 80)
    if importlib.util.find_spec("tiktoken"):
        gpt2_bpe()
        with pytest.raises(UserError, match="encoding 'r50k_base' of 50,257 tokens but the model has 100,277"):
            make_codec({"encoding": "r50k_base", "vocab_size": 100_277}, 100_277)


def test_a_model_meets_only_its_own_vocabulary(tmp_path):
    """--vocab_size other than meta.pkl's, and a resume on another dataset's vocabulary, are refused
    in one line before anything is written; the checkpoint stays as it was."""
    from test_train import run, tiny_args
    chars = write_dataset(tmp_path / "chars", "uint16", char_meta())
    with pytest.raises(UserError, match="vocab_size=80 but .*meta.pkl says 40"):
        run(tiny_args(chars, tmp_path / "o1", "--max_iters=2", "--vocab_size=80"))
    run(tiny_args(chars, tmp_path / "o", "--max_iters=2", "--eval_interval=2"))
    other = write_dataset(tmp_path / "other", "uint16", {**char_meta(), "itos": char_meta()["itos"][::-1],
                                                         "stoi": {c: i for i, c in enumerate(char_meta()["itos"][::-1])}})
    before = (tmp_path / "o" / "ckpt.pt").read_bytes()
    with pytest.raises(UserError, match="the checkpoint trained on another vocabulary"):
        run(["--init_from=resume", f"--out_dir={tmp_path / 'o'}", f"--dataset={other}", "--max_iters=4"])
    assert (tmp_path / "o" / "ckpt.pt").read_bytes() == before


class RunsACommand:
    """What a hostile meta.pkl holds: unpickling it calls os.system (here: touch a marker file)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_a_meta_pkl_that_would_run_code_is_refused_and_its_code_never_runs(tmp_path, capsys, protocol):
    """train.py (load_data) and --hf_model's data check read meta.pkl through the plain-data unpickler:
    the object's os.system is named in one line and the command it carried never runs. Plain data
    (numpy scalars and arrays included) of every protocol still loads."""
    import plumbing.hf_folder as folder_io
    marker = tmp_path / "ran"
    for payload in (RunsACommand(marker), {"vocab_size": VOCAB, "itos": [RunsACommand(marker)]}):
        folder = write_dataset(tmp_path / f"ds{protocol}")
        with open(os.path.join(folder, "meta.pkl"), "wb") as f:
            pickle.dump(payload, f, protocol=protocol)
        with pytest.raises(UserError, match=r"meta.pkl is refused: it would build (posix|os)\.system.*nothing of it ran"):
            load_data(**data_keys(cfg_for(folder)))
        with pytest.raises(UserError, match=r"would build (posix|os)\.system") as e:
            train(load_config([f"--dataset={folder}", f"--out_dir={tmp_path / 'o'}", "--n_layer=1", "--n_embd=32",
                               "--n_head=2", "--block_size=16", "--max_iters=1"])[0])
        assert "\n" not in str(e.value)
        with pytest.raises(UserError, match=r"would build (posix|os)\.system"):
            folder_io.check_data(str(tmp_path), folder)
        assert not marker.exists() and not (tmp_path / "o").exists()
    with open(os.path.join(folder, "meta.pkl"), "wb") as f:
        pickle.dump({"vocab_size": np.uint16(VOCAB), "ids": np.arange(3), "pairs": [(1, 2.5)], "none": None}, f,
                    protocol=protocol)
    assert load_data(**data_keys(cfg_for(folder)))["meta"] == {"vocab_size": VOCAB, "ids": [0, 1, 2], "pairs": [(1, 2.5)],
                                                  "none": None}


def test_the_memory_check_counts_the_vocabulary_meta_pkl_records(tmp_path):
    """vocab_size=0 (every BPE config's default) means meta.pkl's: the start-up memory check sees its
    logits, so a micro-batch whose GPT-2-sized logits cannot fit is one line before anything is
    allocated, as it is with --vocab_size given."""
    folder = write_dataset(tmp_path / "ds", meta={"vocab_size": 50257})
    args = [f"--dataset={folder}", "--n_layer=1", "--n_embd=32", "--n_head=2", "--block_size=1024",
            "--batch_size=4096", "--max_iters=1", "--device=cpu"]
    for extra in ([], ["--vocab_size=50257"]):
        with pytest.raises(UserError, match=r"GB of activations and logits.*use --batch_size=\d+ or less"):
            train(load_config([*args, *extra, f"--out_dir={tmp_path / 'o'}"])[0])
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("meta, message", [
    ({"dtype": "uint16"}, r"vocab_size=0 means 'from meta.pkl', but .* records none: set --vocab_size"),
    ({"vocab_size": "40"}, r"meta.pkl records vocab_size='40': it must be a positive int"),
    ({"vocab_size": 0}, r"meta.pkl records vocab_size=0: it must be a positive int"),
    ({"vocab_size": True}, r"meta.pkl records vocab_size=True: it must be a positive int"),
])
def test_meta_pkls_vocab_size_is_read_by_one_rule_and_refused_before_the_out_dir_exists(tmp_path, meta, message):
    """vocab_size=0 means meta.pkl's: the memory check before the data loads and the start after it
    read it by the same rule (dataset.meta_vocab_size), so a meta.pkl recording none, or not a
    positive int, is one line at once and leaves no out_dir; --vocab_size given skips meta.pkl's."""
    folder = write_dataset(tmp_path / "ds", meta=meta)
    args = [f"--dataset={folder}", "--n_layer=1", "--n_embd=32", "--n_head=2", "--block_size=16", "--batch_size=4",
            "--max_iters=1", "--eval_iters=1", "--device=cpu", "--compile=False", f"--out_dir={tmp_path / 'o'}"]
    with pytest.raises(UserError, match=message) as e:
        train(load_config(args)[0])
    assert "\n" not in str(e.value) and not (tmp_path / "o").exists()
    assert meta_vocab_size({"vocab_size": VOCAB}, folder) == VOCAB
    with pytest.raises(UserError, match=message):
        meta_vocab_size(meta, folder)


def test_a_vocab_size_other_than_meta_pkls_is_told_meta_pkls_size_first(tmp_path):
    """--vocab_size=100000 on data whose meta.pkl says 40: the line names meta.pkl's 40 (the likely
    typo), not the token files' uint16 limit that the larger size would also pass."""
    folder = write_dataset(tmp_path / "ds", meta=char_meta())
    with pytest.raises(UserError, match=r"vocab_size=100000 but .*meta.pkl says 40"):
        load_data(**data_keys(cfg_for(folder, vocab_size=100_000)))


@pytest.mark.parametrize("split, make, says", [
    ("train", os.mkfifo, "train.bin is not a file but a named pipe"),
    ("train", lambda path: os.symlink("/dev/zero", path), "train.bin is not a file but a link to /dev/zero, a character "
                                                          "device"),
    ("val", os.mkdir, "val.bin is not a file but a folder")])
def test_a_token_file_that_is_no_file_is_named_as_what_it_is(tmp_path, split, make, says):
    """A FIFO (read forever), a link to /dev/zero (endless zeros) or a folder where a token file belongs is
    said as what it is, before any read: "not found" sent the user looking for a file that is there."""
    if "dev/zero" in says and not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero here")
    folder = write_dataset(tmp_path / "ds", meta=char_meta())
    os.remove(os.path.join(folder, f"{split}.bin"))
    make(os.path.join(folder, f"{split}.bin"))
    with pytest.raises(UserError, match=says):
        load_data(**data_keys(cfg_for(folder)))
