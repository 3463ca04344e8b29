"""train.py: config parsing, bad input, exact resume, divergence, the log, sampling."""

import json
import os
import pickle
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

from plumbing import common
from plumbing import ops
import optim
from plumbing import start
import sample
import train as train_mod
from conftest import ROOT, data_keys
from model import GPT, model_config
from plumbing.checkpoint import load_checkpoint
from configurator import DEFAULTS, UserError, load_config
from plumbing.dataset import load_data
from train import train


def make_dataset(folder, n_train=4000, n_val=1000, vocab=40, seed=0):
    """A random-token dataset in the layout of data/<name>/ (uint16 bins + meta.pkl)."""
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    for split, n in (("train", n_train), ("val", n_val)):
        rng.integers(0, vocab, n).astype(np.uint16).tofile(os.path.join(folder, f"{split}.bin"))
    itos = [chr(ord("a") + i % 26) if i < 26 else chr(ord("A") + i - 26) for i in range(vocab)]
    with open(os.path.join(folder, "meta.pkl"), "wb") as f:
        pickle.dump({"vocab_size": vocab, "itos": itos, "stoi": {c: i for i, c in enumerate(itos)}}, f)
    return str(folder)


def tiny_args(dataset, out_dir, *extra):
    base = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=16", "--batch_size=4",
            "--eval_iters=2", "--log_interval=1", "--sample_tokens=0", "--warmup_iters=2", "--mechanism_stats=on",
            f"--dataset={dataset}", f"--out_dir={out_dir}"]
    overridden = {a.split("=", 1)[0] for a in extra}  # a key given twice on the command line is an error
    return [a for a in base if a.split("=", 1)[0] not in overridden] + list(extra)


def run(args):
    cfg, given = load_config(args)
    return train(cfg, given)


def read_log(out_dir):
    with open(os.path.join(out_dir, "log.jsonl")) as f:
        return [json.loads(line) for line in f]


def cli(*args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


# --- config parsing ---

def test_int_is_accepted_for_a_float_key():
    cfg, given = load_config(["--learning_rate=1"])
    assert cfg["learning_rate"] == 1.0 and isinstance(cfg["learning_rate"], float)
    assert given == {"learning_rate"}


def test_bool_and_string_values():
    cfg, _ = load_config(["--compile=False", "--tie_embeddings=true", "--out_dir=runs/a=b", "--scale_wd='all'"])
    assert cfg["compile"] is False and cfg["tie_embeddings"] is True
    assert cfg["out_dir"] == "runs/a=b" and cfg["scale_wd"] == "all"


def test_unknown_key_on_the_command_line_names_the_closest_keys():
    with pytest.raises(UserError, match="unknown config key 'learing_rate'.*learning_rate"):
        load_config(["--learing_rate=1e-3"])


def test_help_lists_every_key_with_its_meaning_and_a_default_that_parses_back(tmp_path):
    r = cli("--help", f"--out_dir={tmp_path}")
    assert r.returncode == 0, r.stderr
    rows = [ln.split(None, 1) for ln in r.stdout.splitlines() if ln.startswith("    --")]
    args = [row[0] for row in rows]
    assert [a[2:].split("=", 1)[0] for a in args] == list(DEFAULTS)
    assert all(len(row) == 2 and row[1].strip() for row in rows)  # every key says what it means
    cfg, _ = load_config(args)  # each printed default is valid input and gives the default back
    assert cfg == DEFAULTS
    assert not os.listdir(tmp_path)  # --help trains nothing


def test_unknown_key_in_a_config_file_names_the_file_and_the_closest_keys(tmp_path):
    path = tmp_path / "cfg.py"
    path.write_text("import math\nn_layers = 4\n")
    with pytest.raises(UserError, match=r"cfg\.py: unknown config key 'n_layers'.*n_layer"):
        load_config([str(path)])


@pytest.mark.parametrize("args, message", [
    (["--n_layer=abc"], "^--n_layer=abc: n_layer must be an int$"),
    (["--n_layer=1.5"], "^--n_layer=1.5: n_layer must be an int, got float 1.5$"),
    (["--learning_rate=fast"], "^--learning_rate=fast: learning_rate must be a float$"),
    (["--compile=maybe"], "^--compile=maybe: compile must be True or False$"),
    (["--max_iters"], "write --key=value"),
    (["nope.py"], "^config file 'nope.py' not found$"),
    (["learning_rate=1e-3"], "^config file 'learning_rate=1e-3' not found: a key is written --learning_rate=1e-3$"),
    (["nope=1"], "^config file 'nope=1' not found$"),  # no key of that name: no hint
])
def test_wrong_values_are_errors(args, message):
    with pytest.raises(UserError, match=message):
        load_config(args)


def test_a_folder_for_a_config_file_is_said_to_be_one(tmp_path):
    with pytest.raises(UserError, match=r"^config file '.*' is a folder: name a config file$"):
        load_config([str(tmp_path)])


def test_config_file_values_are_type_checked(tmp_path):
    path = tmp_path / "cfg.py"
    path.write_text("n_layer = '4'\n")
    with pytest.raises(UserError, match="n_layer must be an int, got str"):
        load_config([str(path)])


def test_every_config_file_in_configs_loads():
    folder = os.path.join(ROOT, "configs")
    files = sorted(f for f in os.listdir(folder) if f.endswith(".py"))
    assert files
    for name in files:
        load_config([os.path.join(folder, name)])


# --- bad input on the command line: one clear line, non-zero exit ---

def test_cli_errors_are_one_clear_line(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    short = make_dataset(tmp_path / "short", n_train=10, n_val=10)
    empty = make_dataset(tmp_path / "empty")
    open(os.path.join(empty, "val.bin"), "wb").close()
    out = tmp_path / "out"
    out.mkdir()
    (out / "ckpt.pt").write_bytes(b"not a checkpoint")
    cases = [
        (["--n_layr=2"], "unknown config key 'n_layr'; did you mean n_layer"),
        (["--batch_size=big"], "--batch_size=big: batch_size must be an int"),
        (tiny_args(ds, out, "--n_embd=30", "--n_head=4"), "n_embd=30 is not divisible by n_head=4"),
        (tiny_args(tmp_path / "missing", out), "not found for dataset="),
        (tiny_args(short, out), "fewer than block_size + 1 = 17"),
        (tiny_args(empty, out), "val.bin holds 0 bytes"),
        (tiny_args(ds, out, "--init_from=resume"), "is unreadable"),
        (tiny_args(ds, out), "already holds a run"),
    ]
    for args, message in cases:
        proc = cli(*map(str, args))
        assert proc.returncode == 1, (args, proc.stderr)
        assert message in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr, proc.stderr
    assert (out / "ckpt.pt").read_bytes() == b"not a checkpoint"  # nothing overwritten


# --- resume, divergence, log ---

@pytest.mark.parametrize("optimizer, extra", [("adamw", []), ("muon", []),
                                              ("muon", ["--n_head=4", "--n_kv_head=2", "--head_dim=12"])],
                         ids=["adamw", "muon", "muon-gqa"])
def test_resume_continues_exactly(tmp_path, monkeypatch, optimizer, extra):
    """8 iterations straight == 4, a crash at iteration 7, resume from the iteration-4 checkpoint
    (also with grouped-query attention and heads wider than n_embd / n_head)."""
    ds = make_dataset(tmp_path / "ds")
    common = ["--max_iters=8", "--eval_interval=4", "--gradient_accumulation_steps=2",
              f"--optimizer={optimizer}", "--dropout=0.1", *extra]
    run(tiny_args(ds, tmp_path / "a", *common))
    straight = read_log(tmp_path / "a")

    real_get_batch = train_mod.get_batch

    def crash_at_7(data, split, index, *rest):
        if split == "train" and index == 7:  # read one micro-step ahead: during iteration 7 (1-based)
            raise KeyboardInterrupt
        return real_get_batch(data, split, index, *rest)

    monkeypatch.setattr(train_mod, "get_batch", crash_at_7)
    with pytest.raises(KeyboardInterrupt):
        run(tiny_args(ds, tmp_path / "b", *common))
    monkeypatch.undo()
    assert max(r["iter"] for r in read_log(tmp_path / "b")) == 6  # rows past the checkpoint exist
    run(["--init_from=resume", f"--out_dir={tmp_path / 'b'}"])
    resumed = read_log(tmp_path / "b")
    assert [(r["kind"], r["iter"]) for r in resumed] == [(r["kind"], r["iter"]) for r in straight]
    for a, b in zip(straight, resumed):
        for key in {"loss", "val_loss", "lr", "tokens"} & a.keys():
            assert b[key] == pytest.approx(a[key], rel=1e-6, abs=0), (a, b)


def test_resume_applies_this_runs_optimizer_settings(tmp_path):
    """--learning_rate / --weight_decay on resume change what the optimizer applies, not just the log."""
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=4", "--eval_interval=4", "--lr_schedule=constant"))
    result = run(tiny_args(ds, tmp_path / "o", "--init_from=resume", "--max_iters=6", "--lr_schedule=constant",
                           "--learning_rate=1e-4", "--weight_decay=0.3"))
    rows = [r for r in read_log(tmp_path / "o") if r["kind"] == "train"]
    assert [r["lr"] for r in rows] == [3e-3 * m for m in (0.5, 1.0, 1.0, 1.0)] + [1e-4, 1e-4]
    ckpt = torch.load(tmp_path / "o" / "ckpt.pt", weights_only=True)
    groups = {g["name"]: g for g in ckpt["optimizers"][0]["param_groups"]}
    assert groups["matrix"]["lr"] == 1e-4 and groups["matrix"]["weight_decay"] == 0.3
    assert result["val_loss"] > 0


@pytest.mark.parametrize("saved, resumed, key", [
    (["--scale_wd=iwd"], ["--scale_wd=iwd_final"], "scale_wd"),  # tied: the final-norm scale moves group
    (["--scale_wd=iwd_final"], ["--scale_wd=iwd"], "scale_wd"),
    (["--optimizer=adamw"], ["--optimizer=muon"], "optimizer"),
])
def test_resuming_with_other_optimizer_groups_is_one_line_naming_the_key(tmp_path, saved, resumed, key):
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=2", "--eval_interval=2", *saved))
    before = (tmp_path / "o" / "ckpt.pt").read_bytes()
    old = saved[0].split("=", 1)[1]
    with pytest.raises(UserError, match=f"{key}=.* \\(the checkpoint's: '{old}'\\).*resume with --{key}={old}"):
        run(tiny_args(ds, tmp_path / "o", "--init_from=resume", "--max_iters=4", *resumed))
    assert (tmp_path / "o" / "ckpt.pt").read_bytes() == before  # nothing lost


def test_scratch_run_never_overwrites_an_existing_run(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=2", "--eval_interval=2"))
    before = (tmp_path / "o" / "log.jsonl").read_text()
    with pytest.raises(UserError, match="already holds a run.*--init_from=resume"):
        run(tiny_args(ds, tmp_path / "o", "--max_iters=2"))
    assert (tmp_path / "o" / "log.jsonl").read_text() == before


def test_a_torn_last_log_line_is_dropped_on_resume(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=2", "--eval_interval=2"))
    with open(tmp_path / "o" / "log.jsonl", "a") as f:
        f.write('{"kind": "train", "iter": 3, "lo')  # a crash mid-write
    run(tiny_args(ds, tmp_path / "o", "--init_from=resume", "--max_iters=4"))
    assert [r["iter"] for r in read_log(tmp_path / "o") if r["kind"] == "train"] == [1, 2, 3, 4]


@pytest.mark.parametrize("args, message", [
    (["--gradient_accumulation_steps=0"], "gradient_accumulation_steps=0 must be >= 1"),
    (["--eval_iters=0"], "eval_iters=0 must be >= 1"),
    (["--wsd_decay_frac=1.5"], "wsd_decay_frac=1.5 must be in"),
    (["--lr_schedule=no_such_schedule"], "lr_schedule='no_such_schedule' is not one of "  # read only after warmup
     + ", ".join(map(repr, optim.LR_SCHEDULES))),
    (["--lr_schedule=wsd", "--max_iters=10", "--warmup_iters=5", "--wsd_decay_frac=0.8"],
     "decay .* would start inside warmup .* --wsd_decay_frac <= 0.5"),
    (["--min_lr=1.0"], "min_lr=1.0 is above learning_rate"),
    (["--out_dir="], "out_dir='' is empty"),
    (["--optimizer=no_such_optimizer"], "optimizer='no_such_optimizer' is not one of " + ", ".join(map(repr, optim.OPTIMIZERS))),
    (["--scale_wd=no_such_recipe"], "scale_wd='no_such_recipe' is not one of " + ", ".join(map(repr, optim.SCALE_WD))),
    (["--vocab_size=30"], r"vocab_size=30 but .*meta.pkl says 40"),  # meta.pkl's size first
])
def test_training_keys_out_of_range_are_errors(tmp_path, args, message):
    with pytest.raises(UserError, match=message):
        run(tiny_args(make_dataset(tmp_path / "ds"), tmp_path / "o", *args))


def test_token_ids_past_vocab_size_are_one_line_where_meta_pkl_records_no_size(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    os.remove(os.path.join(ds, "meta.pkl"))
    with pytest.raises(UserError, match=r"(train|val)\.bin holds token id 3[0-9] >= vocab_size=30"):
        run(tiny_args(ds, tmp_path / "o", "--vocab_size=30", "--sample_tokens=0"))


def test_a_token_id_past_vocab_size_mid_file_names_its_place_and_blames_the_file(tmp_path):
    """An id past vocab_size that the start's sample missed (one damaged stretch) is met by a batch: the
    line names the token's place in the file, which holds that id, and asks for the file to be written
    again, not for a vocab_size the rest of the file shows is right."""
    import re
    from types import SimpleNamespace

    import numpy as np

    from train import get_batch
    path = tmp_path / "train.bin"
    ids = np.random.default_rng(0).integers(0, 30, 4000).astype(np.uint16)
    ids[1000:3000] = 31  # the damaged stretch
    ids.tofile(path)
    cfg = SimpleNamespace(seed=0, block_size=16, batch_size=8, vocab_size=30)
    data = {"files": {"train": str(path)}, "dtype": np.uint16}
    with pytest.raises(UserError) as info:
        for index in range(20):  # (each batch samples 8 windows: one meets the stretch)
            get_batch(data, "train", index, 0, cfg, torch.device("cpu"))
    found = re.search(r"token id (\d+) >= vocab_size=30 at token ([\d,]+) of 4,000", str(info.value))
    assert found, info.value
    assert ids[int(found.group(2).replace(",", ""))] == int(found.group(1)) == 31
    assert "write the dataset again" in str(info.value)


def test_log_rows_follow_the_contract(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=4", "--eval_interval=2", "--batch_size=3"))
    rows = read_log(tmp_path / "o")
    train_rows = [r for r in rows if r["kind"] == "train"]
    eval_rows = [r for r in rows if r["kind"] == "eval"]
    assert [r["iter"] for r in train_rows] == [1, 2, 3, 4]
    assert [r["iter"] for r in eval_rows] == [0, 2, 4]
    assert all(r["tokens"] == r["iter"] * 3 * 16 for r in rows)
    assert all(r["lr"] > 0 and np.isfinite(r["loss"]) for r in train_rows)
    scales = eval_rows[0]["scales"]
    assert scales and all(set(s) == {"mean", "std", "min", "max"} for s in scales.values())
    assert scales["norm_f.scale"] == {"mean": 1.0, "std": 0.0, "min": 1.0, "max": 1.0}  # init


def test_resume_past_max_iters_is_an_error_and_changes_nothing(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=4", "--eval_interval=2"))
    log_before = (tmp_path / "o" / "log.jsonl").read_text()
    with pytest.raises(UserError, match="checkpoint is at iteration 4, past max_iters=2"):
        run(tiny_args(ds, tmp_path / "o", "--init_from=resume", "--max_iters=2"))
    assert (tmp_path / "o" / "log.jsonl").read_text() == log_before


def test_config_file_that_fails_to_run_names_file_and_line(tmp_path):
    for source, message in (("n_layer = 2\nx = = 3\n", "line 2: SyntaxError"),
                            ("n_layer = 2\n\nn_head = undefined_name\n", "line 3: NameError")):
        path = tmp_path / "cfg.py"
        path.write_text(source)
        with pytest.raises(UserError, match=f"config file {path}, {message}"):
            load_config([str(path)])


def test_resume_with_a_different_model_shape_is_an_error(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=2", "--eval_interval=2"))
    with pytest.raises(UserError, match="n_layer=2 differs from the checkpoint's 1"):
        run(tiny_args(ds, tmp_path / "o", "--init_from=resume", "--n_layer=2"))


def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=4", "--eval_interval=4"))
    ckpt_path = tmp_path / "o" / "ckpt.pt"
    good = ckpt_path.read_bytes()
    real_forward = GPT.forward

    def nan_in_training(self, idx, targets=None):
        logits, loss, aux = real_forward(self, idx, targets)
        return logits, (loss * float("nan") if self.training and loss is not None else loss), aux

    monkeypatch.setattr(GPT, "forward", nan_in_training)
    with pytest.raises(FloatingPointError, match="train loss is nan at iter 5.*last good checkpoint"):
        run(tiny_args(ds, tmp_path / "o", "--init_from=resume", "--max_iters=8"))
    assert ckpt_path.read_bytes() == good
    assert max(r["iter"] for r in read_log(tmp_path / "o")) == 4


def test_checkpoint_is_written_atomically(tmp_path, monkeypatch):
    """A crash inside torch.save leaves the previous checkpoint intact."""
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=2", "--eval_interval=2"))
    good = (tmp_path / "o" / "ckpt.pt").read_bytes()

    def failing_save(obj, f):
        f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        run(tiny_args(ds, tmp_path / "o", "--init_from=resume", "--max_iters=4"))
    assert (tmp_path / "o" / "ckpt.pt").read_bytes() == good


# --- sampling ---

def test_sample_works_for_plain_and_compiled_checkpoints(tmp_path, capsys):
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=2", "--eval_interval=2"))
    args = [f"--out_dir={tmp_path / 'o'}", "--start=abc", "--max_new_tokens=20", "--seed=1"]
    capsys.readouterr()
    sample.main(args)
    plain = capsys.readouterr().out
    ckpt = torch.load(tmp_path / "o" / "ckpt.pt", weights_only=True)
    ckpt["model"] = {"_orig_mod." + k: v for k, v in ckpt["model"].items()}  # as torch.compile saves
    torch.save(ckpt, tmp_path / "o" / "ckpt.pt")
    sample.main(args)
    compiled = capsys.readouterr().out
    assert plain == compiled and plain.startswith("abc") and len(plain.split("\n")[0]) == 23
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the untying is said as one line, never a library warning
        sample.main(args + ["--fold"])  # folded scales: the same model, so the same text
    folded = capsys.readouterr()
    assert folded.out == plain and "note: the LM head was untied from the embedding" in folded.err
    sample.main(args + ["--top_k=0"])  # 0: no top-k cut
    assert capsys.readouterr().out.startswith("abc")
    for bad, message in (("--max_new_tokens=0", "--max_new_tokens=0: need"), ("--top_k=-1", "--top_k=-1: need"),
                         ("--temperature=0", "--temperature=0.0: need"),
                         (f"--out_dir={tmp_path / 'nope'}", "no checkpoint at")):
        with pytest.raises(UserError, match=message):
            sample.main(args + [bad])


def test_sample_reads_its_prompt_from_a_file_as_nanogpt_does(tmp_path, capsys):
    """--start=FILE:path samples from the file's text: the same text as that prompt given inline; a
    missing file, a folder, a FIFO (never waited on) and bytes that are no UTF-8 are one line each."""
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=2", "--eval_interval=2"))
    args = [f"--out_dir={tmp_path / 'o'}", "--max_new_tokens=10", "--seed=1"]
    (tmp_path / "prompt.txt").write_text("abKc")
    capsys.readouterr()
    sample.main(args + ["--start=abKc"])
    inline = capsys.readouterr().out
    sample.main(args + [f"--start=FILE:{tmp_path / 'prompt.txt'}"])
    assert capsys.readouterr().out == inline and inline.startswith("abKc")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    for path, message in ((tmp_path / "nope.txt", "no such file"), (tmp_path, "is not a file but a folder"),
                          (tmp_path / "fifo", "is not a file but a named pipe"), (tmp_path / "latin1.txt", "is not UTF-8")):
        with pytest.raises(UserError, match=message) as e:
            sample.main(args + [f"--start=FILE:{path}"])
        assert "\n" not in str(e.value)


def test_no_sample_without_a_vocabulary_to_decode(tmp_path, capsys):
    ds = make_dataset(tmp_path / "ds")
    os.remove(os.path.join(ds, "meta.pkl"))  # token ids of an unknown tokenizer
    run(tiny_args(ds, tmp_path / "o", "--max_iters=2", "--eval_interval=2", "--vocab_size=40",
                  "--sample_tokens=5"))
    assert "no sample" in capsys.readouterr().out
    with pytest.raises(UserError, match="no vocabulary to decode"):
        sample.main([f"--out_dir={tmp_path / 'o'}"])


# --- what a run writes can be read back; counters, recovery, messages (issue: no traceback, lost result, wrong number) ---

def test_numpy_values_in_meta_pkl_give_a_checkpoint_its_own_readers_load(tmp_path, capsys):
    ds = make_dataset(tmp_path / "ds")
    with open(os.path.join(ds, "meta.pkl"), "rb") as f:
        meta = pickle.load(f)
    meta["vocab_size"] = np.uint16(40)  # what `arr.max() + 1` gives
    meta["stoi"] = {c: np.int64(i) for c, i in meta["stoi"].items()}
    meta["itos"] = np.array(meta["itos"])
    with open(os.path.join(ds, "meta.pkl"), "wb") as f:
        pickle.dump(meta, f)
    run(tiny_args(ds, tmp_path / "o", "--max_iters=2", "--eval_interval=2"))
    ckpt = load_checkpoint(str(tmp_path / "o" / "ckpt.pt"))  # the weights-only loader
    assert type(ckpt["config"]["vocab_size"]) is int and type(ckpt["meta"]["stoi"]["a"]) is int
    run(["--init_from=resume", f"--out_dir={tmp_path / 'o'}", "--max_iters=3"])
    capsys.readouterr()
    sample.main([f"--out_dir={tmp_path / 'o'}", "--start=ab", "--max_new_tokens=3"])
    assert capsys.readouterr().out.startswith("ab")
    with open(os.path.join(ds, "meta.pkl"), "wb") as f:
        pickle.dump({"vocab_size": 40, "tokenizer": object()}, f)  # a value no reader could load
    with pytest.raises(UserError, match="meta.pkl is refused: it would build builtins.object"):
        run(tiny_args(ds, tmp_path / "p", "--max_iters=2"))


def test_checkpoint_keeps_the_requested_device_and_each_machine_resolves_it(tmp_path, monkeypatch):
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=2", "--eval_interval=2"))
    config = torch.load(tmp_path / "o" / "ckpt.pt", weights_only=True)["config"]
    assert (config["device"], config["dtype"]) == ("auto", "auto")
    seen = []
    real = common.resolve_device
    monkeypatch.setattr(start, "resolve_device", lambda device, dtype: (seen.append((device, dtype)), real(device, dtype))[1])
    run(["--init_from=resume", f"--out_dir={tmp_path / 'o'}", "--max_iters=3"])
    assert seen == [("auto", "auto")]  # resolved again on this machine
    run(tiny_args(ds, tmp_path / "p", "--max_iters=2", "--device=cpu", "--dtype=float32"))
    config = torch.load(tmp_path / "p" / "ckpt.pt", weights_only=True)["config"]
    assert (config["device"], config["dtype"]) == ("cpu", "float32")  # an explicit choice is kept


def test_end_of_run_sample_never_turns_a_finished_run_into_a_failure(tmp_path, capsys, monkeypatch):
    ds = make_dataset(tmp_path / "ds")  # letters only: "\n", the usual prompt, is not in the vocabulary
    result = run(tiny_args(ds, tmp_path / "o", "--max_iters=2", "--sample_tokens=5"))
    out = capsys.readouterr().out
    assert "--- sample (5 tokens) ---" in out and "done: 2 iterations" in out  # started from token 0
    assert np.isfinite(result["val_loss"])
    with pytest.raises(UserError, match="'!' not in this vocabulary of 40 characters"):
        sample.main([f"--out_dir={tmp_path / 'o'}", "--start=ab!"])

    import tiktoken

    def offline(name):
        raise ConnectionError("no network")
    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    with open(os.path.join(ds, "meta.pkl"), "wb") as f:
        pickle.dump({"vocab_size": 40, "encoding": "r50k_base"}, f)  # BPE ids, vocabulary not at hand
    run(tiny_args(ds, tmp_path / "p", "--max_iters=2", "--sample_tokens=5"))
    out = capsys.readouterr().out
    assert "no sample (cannot load the r50k_base vocabulary" in out and "TIKTOKEN_CACHE_DIR" in out
    with pytest.raises(UserError, match="TIKTOKEN_CACHE_DIR"):
        sample.main([f"--out_dir={tmp_path / 'p'}"])


def test_token_count_continues_from_the_checkpoint_after_a_batch_size_change(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=2", "--eval_interval=2", "--batch_size=2"))
    run(tiny_args(ds, tmp_path / "o", "--init_from=resume", "--max_iters=4", "--batch_size=8"))
    rows = read_log(tmp_path / "o")
    assert [r["tokens"] for r in rows if r["kind"] == "train"] == [32, 64, 64 + 128, 64 + 256]
    assert [r["tokens"] for r in rows if r["kind"] == "eval"] == [0, 64, 320]


def test_bad_data_files_and_output_paths_are_one_line_errors(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    (tmp_path / "a_file").write_text("")
    cases = [(tiny_args(ds, tmp_path / "a_file" / "run"), r"out_dir=.*a_file/run'?: .*a_file is a file, not a folder"),
             (tiny_args(ds, tmp_path / "a_file"), r"out_dir=.*a_file'?: a file, not a folder")]
    if os.path.isdir("/proc/self"):  # a folder no user, root included, can create files in
        cases.append((tiny_args(ds, "/proc/self/run"), "out_dir='/proc/self/run': cannot write in /proc/self"))
    if os.geteuid() != 0:  # root writes anywhere else
        (tmp_path / "ro").mkdir(mode=0o555)
        cases.append((tiny_args(ds, tmp_path / "ro"), "cannot write in"))
    for args, message in cases:
        with pytest.raises(UserError, match=message):
            run(args)
    for name, content, message in (("val.bin", b"", "val.bin holds 0 bytes, none: it must be uint16"),
                                   ("train.bin", b"\0" * 1001, "train.bin holds 1001 bytes, an odd number"),
                                   ("meta.pkl", b"garbage", "meta.pkl is unreadable")):
        bad = make_dataset(tmp_path / name)
        with open(os.path.join(bad, name), "wb") as f:
            f.write(content)
        with pytest.raises(UserError, match=message):
            run(tiny_args(bad, tmp_path / "o"))


def test_offline_bpe_and_missing_packages_name_what_to_set_or_install(tmp_path, monkeypatch):
    data = tmp_path / "data"
    (data / "shakespeare").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "data", "shakespeare_text.py"), data)
    shutil.copy(os.path.join(ROOT, "data", "shakespeare", "prepare.py"), data / "shakespeare")
    for part in ("plumbing", "configurator.py"):  # what the scripts import from the repository (cli, disk)
        (tmp_path / part).symlink_to(os.path.join(ROOT, part))
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty"))
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):  # no network: a dead proxy
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    from plumbing import dataset
    from types import SimpleNamespace
    monkeypatch.setattr(dataset, "ROOT", str(tmp_path))  # a copy of the repository's data/: its scripts run
    cfg, _ = load_config(["--dataset=shakespeare"])
    with pytest.raises(UserError, match=r"prepare.py failed: cannot load tiktoken's r50k_base .*TIKTOKEN_CACHE_DIR"):
        load_data(**data_keys(SimpleNamespace(**cfg)))

    (data / "fineweb").mkdir()
    shutil.copy(os.path.join(ROOT, "data", "fineweb", "prepare.py"), data / "fineweb")
    shutil.copy(os.path.join(ROOT, "data", "bpe_docs.py"), data)  # the code it shares with data/corpus
    cfg, _ = load_config(["--dataset=fineweb"])
    with pytest.raises(UserError, match=r"not found .*: pip install datasets && python .*fineweb/prepare.py"):
        load_data(**data_keys(SimpleNamespace(**cfg)))
    try:
        import datasets  # noqa: F401
    except ImportError:
        proc = subprocess.run([sys.executable, str(data / "fineweb" / "prepare.py")], capture_output=True, text=True)
        assert proc.returncode == 1 and proc.stderr.strip() == \
            "error: data/fineweb/prepare.py needs the package 'datasets': pip install datasets"


def test_a_compile_failure_is_one_line_and_moe_with_compile_is_warned(tmp_path, monkeypatch, capsys):
    from torch._inductor.exc import InductorError

    class NoCompiler(torch.nn.Module):  # what torch.compile gives on a machine without a C++ compiler
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, *args):
            raise InductorError(RuntimeError("Compiler: cc is not found.\nmore lines"), None)

    ds = make_dataset(tmp_path / "ds")
    monkeypatch.setattr(torch, "compile", NoCompiler)
    with pytest.raises(UserError, match=r"^torch.compile failed \(InductorError: .*cc is not found.*--compile=False$"):
        run(tiny_args(ds, tmp_path / "o", "--compile=True", "--max_iters=2"))
    monkeypatch.setattr(torch, "compile", lambda model: model)
    run(tiny_args(ds, tmp_path / "p", "--compile=True", "--max_iters=1", "--n_experts=2", "--top_k=1"))
    assert "warning: --compile=True with n_experts > 0" in capsys.readouterr().out


def test_a_kill_between_checkpoint_and_log_row_is_completed_on_resume(tmp_path, capsys):
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=4", "--eval_interval=2"))
    straight = read_log(tmp_path / "o")
    log_path = tmp_path / "o" / "log.jsonl"
    log_path.write_text("".join(json.dumps(r) + "\n" for r in straight[:-1]))  # killed before the last row
    capsys.readouterr()
    result = run(["--init_from=resume", f"--out_dir={tmp_path / 'o'}"])
    assert read_log(tmp_path / "o") == straight[:-1] + [{
        **straight[-1], "val_loss": pytest.approx(straight[-1]["val_loss"], rel=1e-6)}]
    assert result["val_loss"] == pytest.approx(straight[-1]["val_loss"], rel=1e-6)
    out = capsys.readouterr().out
    assert "is finished (4 iterations = max_iters), final val loss" in out and "nan" not in out
    run(["--init_from=resume", f"--out_dir={tmp_path / 'o'}"])  # finished and complete: nothing added
    assert len(read_log(tmp_path / "o")) == len(straight)


def test_progress_lines_come_by_time_with_an_eta_and_a_slow_cpu_run_is_warned(tmp_path, monkeypatch, capsys):
    clock = iter(range(0, 10**9, 2000))  # every reading 2000 s later: a very slow machine
    fake = type("FakeTime", (), {"perf_counter": staticmethod(lambda: next(clock))})
    monkeypatch.setattr(ops, "time", fake)  # Progress's clock
    monkeypatch.setattr(train_mod, "time", fake)
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=3", "--log_interval=100", "--lr_schedule=constant"))
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("iter ")]
    assert [ln.split(" |")[0].split(" (")[0] for ln in lines] == ["iter 1/3", "iter 2/3", "iter 3/3"]
    assert ["s since the last line; log_interval=100)" in ln for ln in lines] == [True, True, False]  # 3: the end
    assert all(" | ETA " in ln for ln in lines)
    # a tiny config on a slow machine: the machine is blamed, not the config
    assert out.count("warning: at the measured") == 1 and "sized for a GPU" not in out and "busy or slow" in out


def test_a_gpu_sized_config_on_a_cpu_is_warned_before_its_first_step(tmp_path, capsys):
    """Judged from the config (FLOPs per iteration x iterations), so a config whose first step alone
    takes minutes is warned before it, and a small one on a busy machine is not called GPU-sized."""
    from types import SimpleNamespace
    cfg, _ = load_config(["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=16", "--vocab_size=40"])
    model = GPT(model_config(cfg))
    flops_per_iter = model.flops_per_token() * 512
    lines = []
    for max_iters in (10, int(2 * 3600 * ops.CPU_FLOPS / flops_per_iter)):  # ~0 s, then ~2 hours
        run = SimpleNamespace(cfg=SimpleNamespace(**{**cfg, "max_iters": max_iters}), log=lines.append,
                              device=torch.device("cpu"), dtype="float32", world=1, ddp=False,
                              tokens_per_iter=512, resumed_from=None, changed={})
        lines.clear()
        ops.describe(run, model, [])
        warned = [ln for ln in lines if "sized for a GPU" in ln]
        assert len(warned) == (max_iters > 10), lines
    assert "2h0" in warned[0] or "1h59" in warned[0]  # the estimate: 2 hours at CPU_FLOPS


@pytest.mark.parametrize("schedule, max_iters, noted", [
    ("cosine", 3, True), ("cosine", 4, False), ("linear", 3, True), ("linear", 4, False),
    ("wsd", 2, True), ("wsd", 3, False), ("constant", 3, False),
])
def test_a_run_that_ends_before_its_lr_decays_is_noted_from_the_schedule_itself(schedule, max_iters, noted):
    """warmup_iters=2: the first decaying step (multiplier < 1) is iteration 3 for cosine and linear
    (their decay starts after warmup), iteration 2 for wsd (its last 20%: at least one step), none for
    a constant LR, which has no decay to miss."""
    from types import SimpleNamespace
    cfg, _ = load_config(["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=16", "--vocab_size=40",
                          "--warmup_iters=2", f"--max_iters={max_iters}", f"--lr_schedule={schedule}"])
    lines = []
    run = SimpleNamespace(cfg=SimpleNamespace(**cfg), log=lines.append, device=torch.device("cpu"), dtype="float32",
                          world=1, ddp=False, tokens_per_iter=512, resumed_from=None, changed={})
    ops.describe(run, GPT(model_config(cfg)), [])
    assert any("ends before the LR decays" in ln for ln in lines) == noted, lines


def test_a_key_changed_on_resume_is_recorded_in_the_log_and_every_later_checkpoint(tmp_path, capsys):
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=2", "--eval_interval=2", "--lr_schedule=constant"))
    capsys.readouterr()
    run(tiny_args(ds, tmp_path / "o", "--init_from=resume", "--max_iters=4", "--lr_schedule=constant",
                  "--learning_rate=1e-3", "--eval_interval=2"))
    out = capsys.readouterr().out
    assert "note: resuming at iteration 2 with learning_rate=0.001 (the checkpoint's: 0.003)" in out
    rows = read_log(tmp_path / "o")
    resume = [r for r in rows if r["kind"] == "resume"]
    assert resume == [{"kind": "resume", "iter": 2, "tokens": 2 * 4 * 16,
                       "changed": {"learning_rate": [0.003, 0.001], "max_iters": [2, 4]}}]
    changes = [{"iter": 2, "changed": {"learning_rate": [0.003, 0.001], "max_iters": [2, 4]}}]
    assert torch.load(tmp_path / "o" / "ckpt.pt", weights_only=True)["changes"] == changes
    run(tiny_args(ds, tmp_path / "o", "--init_from=resume", "--max_iters=6", "--lr_schedule=constant",
                  "--learning_rate=1e-3", "--eval_interval=2"))  # only max_iters changes now
    later = torch.load(tmp_path / "o" / "ckpt.pt", weights_only=True)["changes"]
    assert later == changes + [{"iter": 4, "changed": {"max_iters": [4, 6]}}]
    assert [r["iter"] for r in read_log(tmp_path / "o") if r["kind"] == "resume"] == [2, 4]


def test_a_resume_from_a_log_with_a_gap_says_so(tmp_path, capsys):
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=4", "--eval_interval=4"))
    rows = read_log(tmp_path / "o")
    (tmp_path / "o" / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows
                                                      if not (r["kind"] == "train" and r["iter"] == 2)))
    capsys.readouterr()
    run(tiny_args(ds, tmp_path / "o", "--init_from=resume", "--max_iters=5", "--eval_interval=4"))
    assert "has 3 train rows for the checkpoint's 4 iterations (none for iteration 2): truncated or edited" in \
        capsys.readouterr().out


@pytest.mark.parametrize("extra", [["--eval_iters=100000000"], ["--sample_tokens=10000000000"]])
def test_the_time_warning_counts_evaluation_and_the_sample(extra):
    """A run whose training is seconds but whose evals or end-of-run sample take hours is warned
    at start, naming the part."""
    from types import SimpleNamespace
    cfg, _ = load_config(["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=16", "--vocab_size=40",
                          "--max_iters=10", *extra])
    lines = []
    run = SimpleNamespace(cfg=SimpleNamespace(**cfg), log=lines.append, device=torch.device("cpu"), dtype="float32",
                          world=1, ddp=False, tokens_per_iter=512, resumed_from=None, changed={})
    ops.describe(run, GPT(model_config(cfg)), [])
    warned = [ln for ln in lines if "sized for a GPU" in ln]
    part = "evaluation" if "eval" in extra[0] else "sample"
    assert len(warned) == 1 and f"{part} " in warned[0]
    assert ops.run_flops(run, GPT(model_config(cfg)))[part] > 10 * 3600 * ops.CPU_FLOPS / 10


@pytest.mark.parametrize("config, noted", [([], True), (["configs/unified_bpe_cpu.py"], False)])
def test_a_bpe_vocabulary_on_a_cpu_names_the_cpu_sized_bpe_config(config, noted):
    """The default model on GPT-2 BPE (50,304 rows) spends most of its FLOPs on the logits and takes
    over 5 minutes at CPU_FLOPS: the start names the CPU-sized BPE config, which itself takes less
    and is not told to use itself."""
    from types import SimpleNamespace
    cfg, _ = load_config([os.path.join(ROOT, c) for c in config] + ["--vocab_size=50304"])
    model = GPT(model_config(cfg))
    assert 6 * 50304 * cfg["n_embd"] / model.flops_per_token() > 0.5  # the logits dominate either way
    lines = []
    run = SimpleNamespace(cfg=SimpleNamespace(**cfg), log=lines.append, device=torch.device("cpu"), dtype="float32",
                          world=1, ddp=False, tokens_per_iter=cfg["batch_size"] * cfg["block_size"],
                          resumed_from=None, changed={})
    ops.describe(run, model, [])
    assert any("configs/unified_bpe_cpu.py sizes a BPE run" in ln for ln in lines) == noted, lines
    assert (ops.cpu_seconds(run, model) < 300) != noted


@pytest.mark.parametrize("device, peak", [("cpu", None), ("cuda", 989e12), ("mps", None)])
def test_a_long_evaluation_is_named_at_start_on_every_device_whose_speed_is_known(monkeypatch, device, peak):
    """The evaluations' time from their FLOPs at the device's best (CPU_FLOPS on a CPU, the bf16 peak of
    a known GPU: an H200 here, by a stubbed peak table): named when over a minute, on a GPU too; a
    device of unknown speed (MPS) gets no figure it could not stand behind."""
    from types import SimpleNamespace
    monkeypatch.setattr(ops, "peak_flops", lambda d: peak if d.type == "cuda" else None)
    cfg, _ = load_config(["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=16", "--vocab_size=40",
                          "--max_iters=2", "--eval_iters=100000000000", "--max_estimated_hours=0"])
    lines = []  # (max_estimated_hours=0: the note, not the refusal at a day, test_a_run_past_max_estimated_hours)
    run = SimpleNamespace(cfg=SimpleNamespace(**cfg), log=lines.append, device=torch.device(device),
                          dtype="float32", world=1, ddp=False, tokens_per_iter=512, resumed_from=None, changed={})
    model = GPT(model_config(cfg))
    ops.describe(run, model, [])
    named = [ln for ln in lines if "evaluations of eval_iters=100000000000 batches take at least" in ln]
    speed = {"cpu": ops.CPU_FLOPS, "cuda": peak}[device] if device != "mps" else None
    assert bool(named) == (speed is not None), lines
    if speed:
        seconds = ops.run_flops(run, model)["evaluation"] / speed
        assert seconds > 60 and f"at least {common.fmt_duration(seconds)} ({speed:.2g} FLOP/s" in named[0]


# -----------------------------------------------------------------------------
# cpu_numerics: one kernel level on every x86-64 CPU with AVX2


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"),
                    reason="cpu_numerics='portable' runs AVX2 kernels: this CPU has no AVX2")
@pytest.mark.slow
def test_portable_numerics_train_the_same_whatever_vector_width_the_process_starts_with(tmp_path):
    """Two vector widths on one machine: ATen's kernels at ATEN_CPU_CAPABILITY=default (no AVX) and
    at this CPU's own width give different losses (the widths matter, so the test can fail); under
    --cpu_numerics=portable train.py sets common.PORTABLE_ENV and restarts, so a process started at
    either width trains on the same kernels: the same losses, bit for bit, unlike the native run
    (without the environment the portable runs would be the two native ones), and the run's config
    records the switch. The runs take the formulas (--fused=False): F.rms_norm's CPU kernels differ by
    width, where the fast paths' closed-form norm happens to agree at this size."""
    data = make_dataset(tmp_path / "data", vocab=40)
    clean = {k: v for k, v in os.environ.items() if k not in common.PORTABLE_ENV}

    def losses(name, env, *extra):
        out = tmp_path / name
        proc = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"),
                               *tiny_args(data, out, "--max_iters=6", "--eval_interval=6", "--n_embd=64", "--fused=False",
                                          *extra)],
                              capture_output=True, text=True, cwd=ROOT, timeout=120, env={**clean, **env})
        assert proc.returncode == 0, proc.stderr[-2000:]
        return [r.get("loss", r.get("val_loss")) for r in read_log(out)], out

    narrow, _ = losses("narrow", {"ATEN_CPU_CAPABILITY": "default"})
    native, _ = losses("native", {})
    assert narrow != native
    from_narrow, out = losses("portable_narrow", {"ATEN_CPU_CAPABILITY": "default"}, "--cpu_numerics=portable")
    from_native, _ = losses("portable_native", {}, "--cpu_numerics=portable")
    assert from_narrow == from_native
    assert from_native != native  # the environment took: MKL's COMPATIBLE branch (and AVX2 on a wider CPU) moves them
    assert load_checkpoint(str(out / "ckpt.pt"))["config"]["cpu_numerics"] == "portable"


def test_portable_numerics_without_their_environment_are_one_line(tmp_path, monkeypatch):
    """train() in a process that lacks PORTABLE_ENV (torch loaded without it) refuses the run, naming
    each variable and the fix, before anything is written."""
    for k in common.PORTABLE_ENV:
        monkeypatch.delenv(k, raising=False)
    data = make_dataset(tmp_path / "data")
    with pytest.raises(UserError, match=r"cpu_numerics='portable' needs ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=COMPATIBLE "
                                        r"TORCHINDUCTOR_CPP_MARCH=x86-64-v3 in the environment"):
        run(tiny_args(data, str(tmp_path / "out"), "--max_iters=2", "--cpu_numerics=portable"))
    assert not (tmp_path / "out").exists()


def test_a_run_past_max_estimated_hours_stops_at_start_and_zero_starts_it(tmp_path, monkeypatch):
    """The whole run's FLOPs at the device's best (a lower bound) past max_estimated_hours: one line
    naming the time, the limit and the flag, before any step, and no folder left behind where it made
    one (the next try would find it); --max_estimated_hours=0 starts it (here stopped by a signal at
    its first step, saved)."""
    from test_reliability import signal_at
    ds = make_dataset(tmp_path / "ds")
    args = tiny_args(ds, tmp_path / "o", "--max_iters=10000000000", "--eval_interval=0")
    with pytest.raises(UserError, match=r"at least \d+h\d\dm on this CPU .*past max_estimated_hours=24: it is sized "
                                        r"for GPUs.*--max_estimated_hours=0 to start it anyway") as e:
        run(args)
    assert "\n" not in str(e.value) and not (tmp_path / "o").exists()  # the folder it made is gone
    (tmp_path / "kept").mkdir()
    with pytest.raises(UserError, match="past max_estimated_hours"):
        run(tiny_args(ds, tmp_path / "kept", "--max_iters=10000000000", "--eval_interval=0"))
    assert (tmp_path / "kept").is_dir()  # a folder it did not make stays
    monkeypatch.setattr(train_mod, "get_batch", signal_at(0))
    assert run([*args, "--max_estimated_hours=0"])["stopped"] == "SIGTERM"


def test_the_124m_configs_missing_data_names_the_download_its_size_and_the_cpu_route():
    """configs/unified_124m.py without data/fineweb's files: one line with the prepare command, its
    default size, the small slice, the network need and the route that needs no network."""
    from types import SimpleNamespace
    cfg, _ = load_config([os.path.join(ROOT, "configs", "unified_124m.py")])
    if os.path.exists(os.path.join(ROOT, "data", "fineweb", "train.bin")):
        pytest.skip("data/fineweb is prepared here")
    with pytest.raises(UserError) as e:
        load_data(**data_keys(SimpleNamespace(**cfg)))
    line = str(e.value)
    for words in ("pip install datasets && python data/fineweb/prepare.py", "5.5 GB", "--train_tokens=1e8",
                  "needs the network", "configs/unified_bpe_cpu.py"):
        assert words in line, words
    smoke = next(ln for ln in open(os.path.join(ROOT, "docs", "reference.md")) if "--out_dir=out-smoke-124m" in ln)
    assert smoke.strip().strip("`") in line  # docs/reference.md's two CPU steps of the 124M model, word for word


@pytest.mark.parametrize("rate, shown", [(12.34, "12.3"), (999.4, "999"), (1000.0, "1k"), (12_345.0, "12.3k"),
                                         (1_234_567.0, "1.23M")])
def test_throughput_is_shown_in_a_unit_that_fits_its_size(rate, shown):
    """10-25 tokens/s (a large model on a CPU) was shown as 0.0k tok/s."""
    assert ops.fmt_rate(rate) == shown


def test_an_out_dir_name_past_the_file_systems_limit_is_one_line_and_writes_nothing(tmp_path):
    """A 256-byte folder name was an ENAMETOOLONG traceback; now one line naming the limit, nothing made."""
    long = tmp_path / ("r" * 256)
    done = cli(*tiny_args(make_dataset(tmp_path / "ds"), long, "--max_iters=2"))
    assert done.returncode == 1 and "is 256 bytes, over the 255 a name may have" in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert sorted(os.listdir(tmp_path)) == ["ds"]
