"""gpu_check.py: its CPU-sized run end to end (what CI can keep working), and its synthetic data."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT
from tools import gpu_check
from tools.gpu_check import read_bench, stage_commands, write_markov_dataset
from configurator import load_config


def test_markov_entropy_rate_matches_the_sampled_transitions(tmp_path):
    """The entropy rate from the chain's matrix equals the conditional entropy of the sampled
    bigrams (a plug-in estimate from 400k tokens: its bias is about states*branching/2n)."""
    h = write_markov_dataset(tmp_path, n_states=16, n_train=400_000, n_val=1000, vocab_size=512)
    x = np.fromfile(tmp_path / "train.bin", dtype=np.uint16).astype(np.int64)
    pairs = np.bincount(x[:-1] * 512 + x[1:], minlength=512 * 512).reshape(512, 512).astype(float)
    rows = pairs.sum(axis=1, keepdims=True)
    cond = np.where(pairs > 0, pairs / np.maximum(rows, 1), 1.0)
    empirical = -(pairs * np.log(cond)).sum() / pairs.sum()
    assert len(np.unique(x)) == 16 and 0 < h < np.log(4)
    assert empirical == pytest.approx(h, abs=0.02)


def test_read_bench_names_a_missing_variant(tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"variants": {"baseline": {"ratio": 1.0}}}))
    assert read_bench(path, ["baseline"])["baseline"]["ratio"] == 1.0
    with pytest.raises(ValueError, match="no row for \\['unified'\\]"):
        read_bench(path, ["baseline", "unified"])


def test_cuda_stage_commands_are_valid_configs(tmp_path, monkeypatch):
    """The GPU-only commands, checked here so that a typo cannot wait for a GPU to show."""
    monkeypatch.chdir(ROOT)
    cmds = stage_commands("cuda", str(tmp_path), str(tmp_path), gpus=4)
    cfg = {name: load_config(cmds[name][cmds[name].index("train.py") + 1:])[0] for name in ("ddp", "train", "resume")}
    fsdp, fsdp_resume = (load_config(c[c.index("train.py") + 1:])[0] for c in cmds["fsdp"])
    assert "--nproc_per_node=4" in cmds["fsdp"][0] and fsdp["fsdp"] and fsdp["device"] == "cuda"
    assert fsdp_resume["init_from"] == "resume" and fsdp_resume["out_dir"] == fsdp["out_dir"]
    cfg["bench"] = gpu_check.bench_config(cmds["bench"][cmds["bench"].index("tools.bench") + 1:])
    assert "--nproc_per_node=1" in cmds["ddp"] and cfg["ddp"]["device"] == "cuda" and cfg["ddp"]["compile"]
    for name in ("bench", "train"):  # GPT-2 small, unified, compiled, 16 x 1024 tokens per micro-step
        c = cfg[name]
        assert (c["n_layer"], c["n_embd"], c["batch_size"], c["block_size"]) == (12, 768, 16, 1024), name
        assert c["compile"] and c["branch_scales"] and c["mlp_placement"] == "dual_norm", name
    assert cfg["bench"]["dtype"] == "bfloat16" and "--variants=baseline,unified" in cmds["bench"]
    # the protocol stage times the baseline at configs/ablations/c8_d012.py's own shape
    from research.ablation import load_ablation, run_config
    proto = gpu_check.bench_config(cmds["protocol"][cmds["protocol"].index("tools.bench") + 1:])
    spec = load_ablation(os.path.join(ROOT, "configs", "ablations", "c8_d012.py"))
    want = run_config(spec, "adamw_d012_tpp20", "baseline", 1)[0]
    keys = ("n_layer", "n_embd", "n_head", "block_size", "batch_size", "mlp_placement", "branch_scales", "compile")
    assert {k: proto[k] for k in keys} == {k: want[k] for k in keys} and proto["dtype"] == "bfloat16"
    assert "--variants=baseline" in cmds["protocol"]
    assert cfg["train"]["max_iters"] == 200 and cfg["train"]["gradient_accumulation_steps"] == 1
    assert cfg["train"]["vocab_size"] == 50257 and cfg["train"]["sample_tokens"] == 0  # no tokenizer files needed
    assert cfg["resume"]["init_from"] == "resume" and cfg["resume"]["max_iters"] == 220
    assert cmds["tests"][-2:] == ["-k", "cuda"]  # the CUDA cases (the CPU ones run in this suite)


def test_cpu_run_passes_every_stage_and_says_cuda_is_not_used(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "tools.gpu_check", f"--out={out}", "--device=cpu"],
                          capture_output=True, text=True, cwd=ROOT, timeout=240)
    summary = json.loads((out / "summary.json").read_text())
    assert proc.returncode == 0, (proc.stdout[-3000:], summary)
    assert summary["device"] == "cpu" and "goals not judged" in summary["note"]
    assert summary["note"] in proc.stdout
    assert set(summary["stages"]) == {"tests", "ddp", "fsdp", "bench", "protocol", "train", "resume"}
    slowdown = summary["cpu_slowdown"]  # a busy machine gets longer limits, in proportion
    assert slowdown >= 1.0 and summary["budget_s"] == round(205 * slowdown)
    assert summary["stages"]["tests"]["timeout_s"] == round(60 * slowdown)
    assert all(s["ok"] for s in summary["stages"].values())
    assert summary["stages"]["tests"]["passed"] >= 1 and summary["stages"]["ddp"]["backend_seen"]
    assert summary["stages"]["fsdp"]["backend_seen"] and set(summary["stages"]["fsdp"]["val_loss"]) == {"0", "5", "10", "15"}
    assert summary["stages"]["bench"]["variants"]["baseline"]["ratio"] == 1.0
    val = summary["stages"]["train"]["val_loss"]
    assert val["0"] - 1.0 > val["30"] > summary["dataset"]["entropy_rate"] - 0.1  # no model beats the floor
    assert [g["pass"] for g in summary["goals"]] == [None, None, None]
    for name in ("tests", "ddp", "fsdp", "fsdp_resume", "bench", "protocol", "train", "resume"):
        assert (out / f"{name}.log").stat().st_size > 0
    assert (out / "train_log.jsonl").exists()
    cmp = summary["compare"]
    assert cmp["train"]["tokens_per_s_per_gpu"] == summary["stages"]["train"]["tokens_per_s"]
    assert cmp["unified_vs_baseline"]["ours"]["step_time_ratio"] == summary["stages"]["bench"]["step_time_ratio"]
    assert summary["stages"]["protocol"]["tokens_per_s"] > 0
    assert cmp["protocol_shape"]["tokens_per_s_per_gpu"] == summary["stages"]["protocol"]["tokens_per_s"]


def test_cpu_slowdown_is_the_probe_time_over_the_reference_and_never_below_one():
    from tools.gpu_check import cpu_slowdown
    assert cpu_slowdown(reference_s=1e9, repeats=1) == 1.0  # a faster machine keeps the sized limits
    assert cpu_slowdown(reference_s=1e-6, repeats=1) > 1e3  # 10 GFLOP take more than 1 ms on any CPU


def test_the_fsdp_stage_is_skipped_on_one_gpu_and_says_why(tmp_path):
    from tools.gpu_check import Check, stage_fsdp
    check = Check("cuda", {}, stage_commands("cuda", str(tmp_path), str(tmp_path), gpus=1), str(tmp_path),
                  str(tmp_path / "train"), 0.0, gpus=1)
    result = stage_fsdp(check, 60)
    assert result["rc"] == 0 and "error" not in result and "has 1" in result["not_run"]


def test_the_comparison_states_both_flop_counts_the_papers_table_and_the_anchors():
    """At 124M (configs/unified_124m.py: 12 layers of 12 heads of 64, context 1024) the causal count
    drops half the attention term, 6 x 12 x 768 x 1024 FLOPs a token, and the MFU scales by the same
    ratio; the bench's ratios sit beside the paper's Table 3 (1.04x, 1.01x at 1B) and the anchors."""
    from model import GPT, model_config
    summary = {"device": "cuda", "stages": {"train": {"tokens_per_s": 400_000.0, "mfu_percent": 40.0},
                                            "bench": {"step_time_ratio": 1.03, "memory_ratio": 1.005},
                                            "protocol": {"tokens_per_s": 350_000.0, "mfu_percent": 38.0}}}
    cmd = ["python", "train.py", "configs/unified_124m.py", "--gradient_accumulation_steps=1"]
    cmp = gpu_check.comparison(summary, cmd, 50257)
    cfg, _ = load_config(cmd[2:])
    with torch.device("meta"):
        conventional = GPT(model_config({**cfg, "vocab_size": 50257})).flops_per_token()
    causal = conventional - 6 * 12 * 768 * 1024
    assert cmp["flops_per_token"] == {"conventional": conventional, "causal": causal,
                                      "causal_share": causal / conventional}
    assert cmp["train"] == {"tokens_per_s_per_gpu": 400_000.0, "mfu_percent": 40.0,
                            "mfu_percent_causal": pytest.approx(40.0 * causal / conventional)}
    assert 0.9 < causal / conventional < 0.97  # attention's share at 124M and context 1024: a few percent
    # the protocol's shape (the baseline at context 2048): the attention term doubles and is halved away
    base, _ = load_config(["configs/baseline_124m.py", "--block_size=2048"])
    with torch.device("meta"):
        n = GPT(model_config({**base, "vocab_size": 50257})).num_active_params()
    at_2048 = 6 * n + 12 * 12 * 768 * 2048
    share = (at_2048 - 6 * 12 * 768 * 2048) / at_2048
    assert cmp["protocol_shape"] == {"tokens_per_s_per_gpu": 350_000.0, "mfu_percent": 38.0,
                                     "mfu_percent_causal": pytest.approx(38.0 * share),
                                     "causal_share": pytest.approx(share)}
    assert share < causal / conventional
    assert cmp["unified_vs_baseline"] == {"ours": {"step_time_ratio": 1.03, "memory_ratio": 1.005},
                                          "paper_table3_1B": {"step_time_ratio": 1.04, "memory_ratio": 1.01}}
    assert cmp["anchors"] == {"llm.c 124M tokens/s per H100": 460_000, "nanoGPT 124M MFU %": 33}
