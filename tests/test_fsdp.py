"""FSDP2 (--fsdp=True) on CPU with gloo: the same run as one process and as DDP, a sharded
checkpoint (ckpt.dcp) that resumes exactly, into another mode or number of processes, and that
sample.py and export read; and the refusals and the crash-safe save around it.

The torchrun cases are marked slow (about a minute on 2 cores)."""

import os
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

import configurator
from plumbing.checkpoint import checkpoint_path, clean_stale, load_checkpoint, load_model, save_checkpoint
from configurator import UserError
from conftest import ROOT
from plumbing.ops import check_config
from test_ddp import torchrun
import train as train_mod
from test_train import cli, make_dataset, read_log, run, tiny_args

K = 4  # optimizer steps
# a constant LR after warmup: a run stopped at K / 2 and resumed to K is the run of K from the start
COMMON = [f"--max_iters={K}", f"--eval_interval={K // 2}", "--gradient_accumulation_steps=2", "--n_layer=2",
          "--eval_iters=3", "--lr_schedule=constant"]  # 3 val batches: one rank runs an extra, uncounted forward


def common(*extra):
    """COMMON with extra's keys given as extra says."""
    keys = {a.split("=", 1)[0] for a in extra}
    return [a for a in COMMON if a.split("=", 1)[0] not in keys] + list(extra)


def weights(out_dir):
    """The final weights of the run in out_dir, whole, from ckpt.pt or ckpt.dcp (load_model)."""
    model, _ = load_model(os.path.join(out_dir, "ckpt.dcp" if os.path.exists(os.path.join(out_dir, "ckpt.dcp"))
                                       else "ckpt.pt"))
    return model.state_dict()


def assert_close_weights(a, b, rtol=1e-4):
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=rtol, atol=1e-5, msg=name)


def evals(out_dir):
    return [(r["iter"], r["val_loss"]) for r in read_log(out_dir) if r["kind"] == "eval"]


def train_in_one_process(*args):
    proc = cli(*map(str, args))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def train_in_two(*args):
    proc = torchrun(2, "train.py", *args)
    assert proc.returncode == 0, f"stdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-6000:]}"
    return proc


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """K steps of the same run: FSDP2 over 2 processes, 1 process, DDP over 2; and FSDP2 stopped
    at K / 2 then resumed to K."""
    tmp = tmp_path_factory.mktemp("fsdp")
    ds = make_dataset(tmp / "ds")
    out = {name: tmp / name for name in ("fsdp", "one", "ddp", "fsdp_resumed")}
    train_in_two(*tiny_args(ds, out["fsdp"], *COMMON, "--fsdp=True"))
    train_in_one_process(*tiny_args(ds, out["one"], *COMMON))
    train_in_two(*tiny_args(ds, out["ddp"], *COMMON))
    train_in_two(*tiny_args(ds, out["fsdp_resumed"], *common("--fsdp=True", f"--max_iters={K // 2}")))
    train_in_two("--init_from=resume", f"--out_dir={out['fsdp_resumed']}", f"--max_iters={K}")
    return SimpleNamespace(ds=ds, out=out, tmp=tmp)


@pytest.mark.slow
def test_fsdp_writes_a_sharded_checkpoint_and_no_ckpt_pt(runs):
    folder = runs.out["fsdp"] / "ckpt.dcp"
    assert sorted(os.listdir(folder)) == [".metadata", "__0_0.distcp", "__1_0.distcp", "run.pt"]
    assert not (runs.out["fsdp"] / "ckpt.pt").exists()
    ckpt = load_checkpoint(str(folder))
    assert ckpt["iter"] == K and ckpt["config"]["fsdp"] is True


@pytest.mark.slow
def test_two_fsdp_processes_match_one_process_and_ddp(runs):
    fsdp = weights(runs.out["fsdp"])
    assert_close_weights(fsdp, weights(runs.out["one"]))
    assert_close_weights(fsdp, weights(runs.out["ddp"]))
    for ours, theirs in zip(evals(runs.out["fsdp"]), evals(runs.out["one"])):
        assert ours[0] == theirs[0] and ours[1] == pytest.approx(theirs[1], rel=1e-5)
    assert len(evals(runs.out["fsdp"])) == 3  # iterations 0, K/2, K


@pytest.mark.slow
def test_a_resumed_fsdp_run_is_the_uninterrupted_one(runs):
    straight, resumed = read_log(runs.out["fsdp"]), read_log(runs.out["fsdp_resumed"])
    trained = [r for r in resumed if r["kind"] != "resume"]  # the resume row records the new max_iters
    assert [(r["kind"], r["iter"], r.get("loss"), r.get("val_loss")) for r in trained] == \
        [(r["kind"], r["iter"], r.get("loss"), r.get("val_loss")) for r in straight]
    a, b = weights(runs.out["fsdp"]), weights(runs.out["fsdp_resumed"])
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_checkpoints_resume_across_modes_and_process_counts(runs):
    """FSDP2's ckpt.dcp resumed in one process without FSDP, and one process's ckpt.pt resumed by
    FSDP2 over 2 processes, each K more steps: both equal the one-process run resumed the same way."""
    copies = {name: runs.tmp / f"{name}_more" for name in ("fsdp", "one", "one_to_fsdp")}
    for name, source in (("fsdp", "fsdp"), ("one", "one"), ("one_to_fsdp", "one")):
        shutil.copytree(runs.out[source], copies[name])
    more = [f"--max_iters={2 * K}", "--init_from=resume"]
    train_in_one_process(*more, f"--out_dir={copies['fsdp']}", "--fsdp=False")
    train_in_one_process(*more, f"--out_dir={copies['one']}")
    train_in_two(*more, f"--out_dir={copies['one_to_fsdp']}", "--fsdp=True")
    reference = weights(copies["one"])
    for name in ("fsdp", "one_to_fsdp"):
        assert_close_weights(weights(copies[name]), reference)
        assert [i for i, _ in evals(copies[name])] == [0, K // 2, K, K + K // 2, 2 * K]
    # a save removes the other form: one checkpoint per out_dir
    assert os.listdir(copies["fsdp"]).count("ckpt.dcp") == 0 and (copies["fsdp"] / "ckpt.pt").exists()
    assert not (copies["one_to_fsdp"] / "ckpt.pt").exists() and (copies["one_to_fsdp"] / "ckpt.dcp").is_dir()


@pytest.mark.slow
def test_sample_and_export_read_a_sharded_checkpoint(runs, tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "sample.py"), f"--out_dir={runs.out['fsdp']}",
                           "--max_new_tokens=5", "--num_samples=1", "--start=a"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("a"), proc.stderr[-2000:]
    pytest.importorskip("transformers", reason="the export: pip install -e '.[export]'")
    export_dir = tmp_path / "hf"
    proc = subprocess.run([sys.executable, "-m", "tools.export", f"--out_dir={runs.out['fsdp']}",
                           f"--export_dir={export_dir}"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "largest logit difference" in proc.stdout and (export_dir / "config.json").exists()


@pytest.mark.slow
def test_a_damaged_sharded_checkpoint_is_one_line(runs, tmp_path):
    damaged = tmp_path / "damaged"
    shutil.copytree(runs.out["fsdp"], damaged)
    os.remove(damaged / "ckpt.dcp" / "__1_0.distcp")
    for args in ([sys.executable, os.path.join(ROOT, "sample.py"), f"--out_dir={damaged}"],
                 [sys.executable, os.path.join(ROOT, "train.py"), "--init_from=resume", f"--out_dir={damaged}",
                  "--fsdp=False", f"--max_iters={2 * K}"]):
        proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
        assert "ckpt.dcp cannot be read into the model" in proc.stderr and "__1_0.distcp" in proc.stderr


@pytest.mark.slow
def test_moe_under_fsdp_matches_one_process(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    # the formulas, which give one process's weights bit for bit here. The chunked head's op is not bitwise
    # equal across the two layouts (dense, one step: 1.4e-6 apart, within the dense runs' 1e-4 above); in
    # MoE, one step: 5.4e-5 in one expert's down weight, past this comparison's atol of 1e-5 (likely AdamW's
    # first step, which divides each gradient by its own size, at a near-zero gradient of an expert few tokens reach)
    moe = [*COMMON, "--n_experts=4", "--top_k=2", "--fused=False"]
    train_in_two(*tiny_args(ds, tmp_path / "fsdp", *moe, "--fsdp=True"))
    train_in_one_process(*tiny_args(ds, tmp_path / "one", *moe))
    assert_close_weights(weights(tmp_path / "fsdp"), weights(tmp_path / "one"))


# -----------------------------------------------------------------------------
# Without torchrun


def test_fsdp_without_torchrun_is_one_line(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    proc = cli(*tiny_args(ds, tmp_path / "out", "--fsdp=True"))
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: fsdp=True (given, or a resumed run's own) shards the model over torchrun's "
                                  "processes: launch with `torchrun")
    assert proc.stderr.count("\n") == 1 and not (tmp_path / "out").exists()


def test_fsdp_refuses_an_optimizer_that_needs_whole_matrices():
    cfg = {**configurator.DEFAULTS, "vocab_size": 65, "fsdp": True, "optimizer": "muon"}
    with pytest.raises(UserError, match=r"optimizer='muon' cannot step FSDP2's sharded parameters .* "
                                        r"use --optimizer=adamw with --fsdp=True, or DDP \(--fsdp=False\)"):
        check_config(cfg)
    check_config({**cfg, "optimizer": "adamw"})  # AdamW's update is per element: accepted


def test_a_save_cut_between_its_renames_keeps_the_old_checkpoint(tmp_path):
    """The sharded save swaps folders in two renames (old -> .old, tmp -> ckpt.dcp): a kill between
    them leaves ckpt.dcp.old and a finished ckpt.dcp.tmp; the next start takes the old one back (the
    new one was never confirmed), and a kill during the write leaves only a .tmp, which goes."""
    dcp = checkpoint_path(str(tmp_path), fsdp=True)
    for folder, it in ((dcp + ".old", 2), (dcp + ".tmp", 4)):
        os.makedirs(folder)
        save_checkpoint(os.path.join(folder, "run.pt"), {"config": {}, "iter": it, "layout": []})
    clean_stale(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["ckpt.dcp"] and load_checkpoint(dcp)["iter"] == 2
    os.makedirs(dcp + ".tmp")
    clean_stale(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["ckpt.dcp"]


def test_a_sharded_folder_without_its_run_file_is_one_line(tmp_path):
    os.makedirs(tmp_path / "ckpt.dcp")
    with pytest.raises(UserError, match=r"no checkpoint at .*ckpt.dcp/run.pt"):
        load_checkpoint(str(tmp_path / "ckpt.dcp"))


def test_a_checkpoint_from_before_the_magnitude_was_a_vector_resumes_exactly(tmp_path):
    """OR/ER magnitudes were 0-d tensors until FSDP2 (which shards no 0-d tensor) made them (1,):
    an older checkpoint, its magnitudes and their AdamW moments 0-d, resumes to the same run."""
    ds = make_dataset(tmp_path / "ds")
    straight, cut = tmp_path / "straight", tmp_path / "cut"
    run(tiny_args(ds, straight, *COMMON))  # in this process: no start-up to pay
    run(tiny_args(ds, cut, *common(f"--max_iters={K // 2}")))
    path = str(cut / "ckpt.pt")
    ckpt = torch.load(path, weights_only=True)
    names = [k for k in ckpt["model"] if k.endswith("magnitude")]
    assert names, "the default run has OR magnitudes"
    for k in names:
        ckpt["model"][k] = ckpt["model"][k].reshape(())
    scalars = 0
    for state in ckpt["optimizers"]:
        for moments in state["state"].values():
            for key in ("exp_avg", "exp_avg_sq"):
                if moments[key].shape == (1,):
                    moments[key], scalars = moments[key].reshape(()), scalars + 1
    assert scalars == 2 * len(names)
    save_checkpoint(path, ckpt)
    run(["--init_from=resume", f"--out_dir={cut}", f"--max_iters={K}"])
    a, b = weights(straight), weights(cut)
    assert all(torch.equal(a[k], b[k]) for k in a)


def as_sharded(pt_dir, dcp_dir):
    """pt_dir's ckpt.pt written as a sharded ckpt.dcp in dcp_dir (one process: torch.distributed.checkpoint
    without a process group), as an fsdp=True run would have saved it."""
    import warnings

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    from plumbing.checkpoint import optimizer_layout, restore
    from model import GPT, model_config
    from optim import build_optimizers
    ckpt = load_checkpoint(os.path.join(pt_dir, "ckpt.pt"))
    cfg = SimpleNamespace(**configurator.complete(ckpt["config"]))
    model = GPT(model_config(vars(cfg)))
    optimizers, _ = build_optimizers(model, cfg, "cpu")
    restore(ckpt, model, optimizers, cfg)
    path = checkpoint_path(str(dcp_dir), fsdp=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": get_model_state_dict(model), "optimizers": get_optimizer_state_dict(model, optimizers)},
                 checkpoint_id=path, no_dist=True)
    state = {k: v for k, v in ckpt.items() if k not in ("model", "optimizers")}
    save_checkpoint(os.path.join(path, "run.pt"), {**state, "layout": optimizer_layout(o.param_groups for o in optimizers)})
    return path


def test_resume_takes_the_newest_whole_checkpoint_of_either_form_and_names_the_other(tmp_path, capsys):
    """Both forms sit in out_dir when a kill falls between a save and the removal of the other form: the
    resume takes the one that holds more iterations, names the one it passes over (older, or damaged:
    a shard removed or cut short by a half-done removal), and continues the run exactly; it never
    refuses while a whole checkpoint exists. Each state the save of a ckpt.pt over a ckpt.dcp can be
    cut in: before the rename (the old ckpt.dcp alone: iteration 2), after it (both whole: 4 wins),
    during the removal (a damaged ckpt.dcp beside ckpt.pt: 4)."""
    from plumbing.checkpoint import newest_checkpoint
    ds = make_dataset(tmp_path / "ds")
    args = common("--max_iters=6", "--eval_interval=2")
    run(tiny_args(ds, tmp_path / "straight", *args))
    run(tiny_args(ds, tmp_path / "two", *common("--max_iters=2", "--eval_interval=2")))
    run(tiny_args(ds, tmp_path / "four", *common("--max_iters=4", "--eval_interval=2")))
    states = {"cut before the rename": (None, 2), "both whole": ("whole", 4), "cut during the removal": ("cut", 4),
              "a shard missing": ("missing", 4)}
    for name, (pt, expected) in states.items():
        out = tmp_path / name.replace(" ", "_")
        shutil.copytree(tmp_path / ("four" if pt else "two"), out)  # the log, and ckpt.pt at 4 when saved
        dcp_path = as_sharded(tmp_path / "two", out)  # the older sharded checkpoint, iteration 2
        if pt is None:
            os.remove(out / "ckpt.pt")
        shards = sorted(f for f in os.listdir(dcp_path) if f.endswith(".distcp"))
        if pt == "cut":
            with open(os.path.join(dcp_path, shards[0]), "r+b") as f:
                f.truncate(10)
        if pt == "missing":
            os.remove(os.path.join(dcp_path, shards[0]))
        path, passed = newest_checkpoint(str(out))
        assert load_checkpoint(path)["iter"] == expected, name
        assert [why.split(" ")[0].rstrip(":") for _, why in passed] == \
            ([] if pt is None else ["older"] if pt == "whole" else ["damaged"]), (name, passed)
        capsys.readouterr()
        run(tiny_args(ds, out, *args, "--init_from=auto"))
        said = capsys.readouterr().out
        assert ("is passed over" in said) == (pt is not None), name
        got, want = evals(out), evals(tmp_path / "straight")
        assert [i for i, _ in got] == [i for i, _ in want], name
        assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-6), name


def assert_same_mechanism(a, b):
    """The eval rows' mechanism statistics of two runs of the same training, key by key (float
    rounding apart: FSDP2 sums each norm over shards, then all-reduces)."""
    rows_a = [r["mechanism"] for r in read_log(a) if r["kind"] == "eval"]
    rows_b = [r["mechanism"] for r in read_log(b) if r["kind"] == "eval"]
    assert len(rows_a) == len(rows_b) > 1 and "since" in rows_a[-1]
    for ours, theirs in zip(rows_a, rows_b):
        assert ours.keys() == theirs.keys()
        for key, value in ours.items():
            assert value == pytest.approx(theirs[key], rel=1e-4, abs=1e-7), key


@pytest.mark.slow
def test_fsdp_logs_the_mechanism_statistics_of_one_process(runs):
    """The default (unified) model: columns of sharded rows, DNP's u_up into W_down's columns."""
    assert_same_mechanism(runs.out["fsdp"], runs.out["one"])


@pytest.mark.slow
def test_fsdp_logs_the_mechanism_statistics_of_one_process_for_scales_folded_into_rows(tmp_path):
    """DP on attention: u_q, u_k, u_v fold into the rows FSDP2 shards, each rank its own chunk of gamma."""
    ds = make_dataset(tmp_path / "ds")
    args = common("--attn_placement=dual", "--n_embd=24", "--n_head=2", f"--max_iters={K // 2}",
                  "--eval_interval=1")  # W_q: 24 rows, 12 on each rank
    train_in_two(*tiny_args(ds, tmp_path / "fsdp", *args, "--fsdp=True"))
    train_in_one_process(*tiny_args(ds, tmp_path / "one", *args))
    assert_same_mechanism(tmp_path / "fsdp", tmp_path / "one")


# train.py, sending itself SIGTERM while it reads batch index STOP_IN's second micro-batch (as
# test_reliability.signal_at does in one process): every rank stops after iteration STOP_IN
STOP_IN = 3
STOP_TRAIN = f"""
import signal, sys
sys.path.insert(0, {ROOT!r})
from plumbing import common
import train
real = train.get_batch
def get_batch(data, split, index, j, *rest):
    if split == "train" and index == {STOP_IN} and j == 1:
        signal.raise_signal(signal.SIGTERM)
    return real(data, split, index, j, *rest)
train.get_batch = get_batch
common.cli(train.main)
"""


def mechanism_rows(out_dir):
    return {r["iter"]: r["mechanism"] for r in read_log(out_dir) if r["kind"] == "eval"}


@pytest.mark.slow
def test_a_run_stopped_between_evals_under_fsdp_resumes_the_open_mechanism_interval(runs, tmp_path, monkeypatch):
    """A stop after iteration 3, between the evals at 2 and 4: ckpt.dcp keeps each rank's shards of the
    open interval (since 2), so the eval at 4 after a resume measures since 2 as the uninterrupted run
    does: under FSDP2 over 2 processes bit for bit (and so its record's mechanism), in one process
    without FSDP2 as the one-process run; one process's ckpt.pt stopped there resumes under FSDP2 the
    same. Without the kept interval (run.pt's removed) the row says since 3 and moves less."""
    from research.records import mechanism_record
    from test_reliability import signal_at

    script = tmp_path / "stop_train.py"
    script.write_text(STOP_TRAIN)
    stopped = {name: tmp_path / name for name in ("fsdp", "to_one", "cut", "pt")}
    proc = torchrun(2, script, *tiny_args(runs.ds, stopped["fsdp"], *COMMON, "--fsdp=True"))
    assert f"stopped by SIGTERM after iteration {STOP_IN}/{K}" in proc.stdout, \
        proc.stdout[-2000:] + proc.stderr[-3000:]
    ckpt = load_checkpoint(str(stopped["fsdp"] / "ckpt.dcp"))
    assert (ckpt["iter"], ckpt["mechanism"]["since"], ckpt["mechanism"]["sharded"]) == (STOP_IN, K // 2, True)
    assert "copy" not in ckpt["mechanism"]  # the tensors are the folder's, each rank's shards
    for name in ("to_one", "cut"):
        shutil.copytree(stopped["fsdp"], stopped[name])
    run_pt = stopped["cut"] / "ckpt.dcp" / "run.pt"
    save_checkpoint(str(run_pt), {k: v for k, v in torch.load(run_pt, weights_only=True).items() if k != "mechanism"})
    monkeypatch.setattr(train_mod, "get_batch", signal_at(STOP_IN - 1, micro_step=1))  # (it reads a batch ahead)
    assert run(tiny_args(runs.ds, stopped["pt"], *COMMON))["stopped"] == "SIGTERM"
    monkeypatch.undo()
    pt = torch.load(stopped["pt"] / "ckpt.pt", weights_only=True)
    assert (pt["iter"], pt["mechanism"]["since"]) == (STOP_IN, K // 2)

    train_in_two("--init_from=resume", f"--out_dir={stopped['fsdp']}")
    train_in_two("--init_from=resume", f"--out_dir={stopped['pt']}", "--fsdp=True")
    for name in ("to_one", "cut"):
        train_in_one_process("--init_from=resume", f"--out_dir={stopped[name]}", "--fsdp=False")
    straight = mechanism_rows(runs.out["fsdp"])
    assert straight[K]["since"] == K // 2
    assert mechanism_rows(stopped["fsdp"]) == straight
    evals_of = lambda d: [r for r in read_log(d) if r["kind"] == "eval"]  # noqa: E731
    assert mechanism_record(evals_of(stopped["fsdp"])) == mechanism_record(evals_of(runs.out["fsdp"]))
    assert_same_mechanism(stopped["to_one"], runs.out["one"])
    assert_same_mechanism(stopped["pt"], runs.out["one"])
    assert "cut" not in mechanism_record(evals_of(stopped["fsdp"]))["mechanism"]
    assert mechanism_record(evals_of(stopped["cut"]))["mechanism"]["cut"] == [K]  # said in the record
    cut = mechanism_rows(stopped["cut"])[K]
    assert cut["since"] == STOP_IN
    site = "blocks.0.attn.q.in_scale/move_plain"
    assert cut[site] < straight[K][site] * 0.9  # one step's move against two
