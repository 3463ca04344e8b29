"""gpu_check.py: its CPU-sized run end to end (what CI can keep working), and its synthetic data."""

import json
import math
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from conftest import ROOT
from tools import gpu_check, gpu_report
from tools.gpu_check import read_bench, stage_commands, write_markov_dataset
from tools.step_profile import classify
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
    cfg["bench"] = gpu_report.bench_config(cmds["bench"][cmds["bench"].index("tools.bench") + 1:])
    assert "--nproc_per_node=1" in cmds["ddp"] and cfg["ddp"]["device"] == "cuda" and cfg["ddp"]["compile"]
    for name in ("bench", "train"):  # GPT-2 small, unified, compiled, 16 x 1024 tokens per micro-step
        c = cfg[name]
        assert (c["n_layer"], c["n_embd"], c["batch_size"], c["block_size"]) == (12, 768, 16, 1024), name
        assert c["compile"] and c["branch_scales"] and c["mlp_placement"] == "dual_norm", name
    assert cfg["bench"]["dtype"] == "bfloat16" and "--variants=baseline,unified,baseline:formulas,unified:formulas" in cmds["bench"]
    # the protocol stage times the baseline at configs/ablations/c8_d012.py's own shape
    from research.ablation import load_ablation, run_config
    proto = gpu_report.bench_config(cmds["protocol"][cmds["protocol"].index("tools.bench") + 1:])
    spec = load_ablation(os.path.join(ROOT, "configs", "ablations", "c8_d012.py"))
    want = run_config(spec, "adamw_d012_tpp20", "baseline", 1)[0]
    keys = ("n_layer", "n_embd", "n_head", "block_size", "batch_size", "mlp_placement", "branch_scales", "compile")
    assert {k: proto[k] for k in keys} == {k: want[k] for k in keys} and proto["dtype"] == "bfloat16"
    assert "--variants=baseline" in cmds["protocol"]
    assert cfg["train"]["max_iters"] == 200 and cfg["train"]["gradient_accumulation_steps"] == 1
    assert cfg["train"]["vocab_size"] == 50257 and cfg["train"]["sample_tokens"] == 0  # no tokenizer files needed
    assert cfg["resume"]["init_from"] == "resume" and cfg["resume"]["max_iters"] == 220
    assert cmds["resume"][cmds["resume"].index("--") + 1] == "train.py" and "--syncs=2:15" in cmds["resume"]
    assert cmds["tests"][-2:] == ["-k", "cuda"]  # the CUDA cases (the CPU ones run in this suite)
    # the profile at the bench's shape; the 1B width at the ladder's d1 rung (its width, heads and context)
    profile = gpu_report.bench_config([a for a in cmds["profile"][cmds["profile"].index("tools.step_profile") + 1:]
                                       if not a.startswith("--profile_steps=")])  # its one flag bench.py lacks
    assert {k: profile[k] for k in keys + ("dtype",)} == {k: cfg["bench"][k] for k in keys + ("dtype",)}
    assert "--variants=baseline,unified,gpt2" in cmds["profile"]
    wide = gpu_report.bench_config(cmds["bench_1b"][cmds["bench_1b"].index("tools.bench") + 1:])
    d1 = run_config(load_ablation(os.path.join(ROOT, "configs", "ablations", "ladder.py")), "adamw_d1_tpp20", "baseline",
                    1)[0]
    assert {k: wide[k] for k in ("n_embd", "n_head", "block_size")} == {k: d1[k] for k in ("n_embd", "n_head", "block_size")}
    assert wide["n_layer"] == 4 < d1["n_layer"] and wide["compile"] and wide["dtype"] == "bfloat16"


def test_the_train_stage_runs_the_benchs_model_and_batch(tmp_path, monkeypatch):
    """The loop/bench goal compares like with like: the train stage's model (its parameters, on the
    meta device) and tokens a step equal the bench's unified variant's, on CUDA and on the CPU."""
    from tools.variants import BASELINE, variants
    from model import GPT, model_config
    monkeypatch.chdir(ROOT)
    for device in ("cuda", "cpu"):
        cmds = stage_commands(device, str(tmp_path), str(tmp_path))
        train = load_config(cmds["train"][cmds["train"].index("train.py") + 1:])[0]
        bench = gpu_report.bench_config(cmds["bench"][cmds["bench"].index("tools.bench") + 1:])
        bench["vocab_size"] = bench["vocab_size"] or 50257  # as bench.py resolves it at this width
        with torch.device("meta"):
            n_train = GPT(model_config(train)).num_params()
            n_bench = GPT(model_config({**bench, **BASELINE, **variants()["unified"]})).num_params()
        assert n_train == n_bench, device
        assert train["batch_size"] * train["block_size"] * train["gradient_accumulation_steps"] == \
            bench["batch_size"] * bench["block_size"], device
        assert train["compile"] == bench["compile"], device
        assert {train["dtype"], bench["dtype"]} <= {"auto", "bfloat16" if device == "cuda" else "float32"}, device


@pytest.mark.slow
def test_cpu_run_passes_every_stage_and_says_cuda_is_not_used(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "tools.gpu_check", f"--out={out}", "--device=cpu"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    summary = json.loads((out / "summary.json").read_text())
    assert proc.returncode == 0, (proc.stdout[-3000:], summary)
    assert summary["device"] == "cpu" and "goals not judged" in summary["note"]
    assert summary["note"] in proc.stdout
    assert list(summary["stages"]) == list(gpu_check.STAGES)
    slowdown = summary["cpu_slowdown"]  # a busy machine gets longer limits, in proportion
    assert slowdown >= 1.0 and summary["budget_s"] == round(240 * slowdown)
    assert summary["stages"]["tests"]["timeout_s"] == round(60 * slowdown)
    assert all(s["ok"] for s in summary["stages"].values())
    assert summary["stages"]["tests"]["passed"] >= 1 and summary["stages"]["ddp"]["backend_seen"]
    assert summary["stages"]["fsdp"]["backend_seen"] and set(summary["stages"]["fsdp"]["val_loss"]) == {"0", "5", "10", "15"}
    bench = summary["stages"]["bench"]  # four legs: the fast paths and the formulas alone, each ratio like for like
    assert set(bench["variants"]) == set(gpu_check.BENCH_LEGS) and bench["variants"]["baseline"]["ratio"] == 1.0
    assert bench["formulas_step_time_ratio"] == pytest.approx(bench["variants"]["unified:formulas"]["ms_per_step"]
                                                              / bench["variants"]["baseline:formulas"]["ms_per_step"])
    assert bench["formulas_memory_ratio"] > 0
    assert sum(s["seconds"] for s in summary["stages"].values()) <= summary["budget_s"]  # every stage within the budget
    val = summary["stages"]["train"]["val_loss"]
    assert val["0"] - 1.0 > val["30"] > summary["dataset"]["entropy_rate"] - 0.1  # no model beats the floor
    assert [g["name"] for g in summary["goals"]] == list(gpu_report.GOALS)
    assert all(g["pass"] is None for g in summary["goals"]) and proc.stdout.count("not judged (CPU)") == len(gpu_report.GOALS)
    assert all((g["value"] is None) == (g["name"] == "baseline_mfu") for g in summary["goals"])  # no CPU peak FLOP/s
    profile = summary["stages"]["profile"]  # CPU ops by self time: the tiny models' matmuls, SDPA, the rest
    assert set(profile["variants"]) == {"baseline", "unified", "gpt2"} and profile["unit"] == "CPU ops (self time)"
    for row in profile["variants"].values():
        assert row["ms"]["gemm"] > 0 and row["ms"]["attention"] > 0 and row["kernels"] > 100
        assert row["ms_total"] == pytest.approx(sum(row["ms"].values()))
    assert "profile: ms a step by kind (CPU ops (self time))" in proc.stdout and "baseline / GPT-2 step time per FLOP" in proc.stdout
    train, resume = summary["stages"]["train"], summary["stages"]["resume"]
    assert train["loop_vs_bench"] > 0 and "loop_vs_bench_note" not in train  # the same model and batch as the bench
    assert resume["sync_iters"] == 3 and resume["host_syncs_per_iter"] is None  # no GPU to wait for
    assert summary["stages"]["bench_1b"]["step_time_ratio_1b"] > 0
    for name in ("tests", "ddp", "fsdp", "fsdp_resume", "bench", "profile", "train", "resume", "bench_1b", "protocol"):
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
                                            "bench": {"step_time_ratio": 1.03, "memory_ratio": 1.005,
                                                      "formulas_step_time_ratio": 1.2, "formulas_memory_ratio": 1.15},
                                            "protocol": {"tokens_per_s": 350_000.0, "mfu_percent": 38.0}}}
    cmd = ["python", "train.py", "configs/unified_124m.py", "--gradient_accumulation_steps=1"]
    cmp = gpu_report.comparison(summary, cmd, gpu_check.PROTOCOL["cuda"], 50257)
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
                                          "formulas": {"step_time_ratio": 1.2, "memory_ratio": 1.15},
                                          "paper_table3_1B": {"step_time_ratio": 1.04, "memory_ratio": 1.01}}
    assert cmp["anchors"] == {"llm.c 124M tokens/s per H100": 460_000, "nanoGPT 124M MFU %": 33}


@pytest.mark.parametrize("name, kind", [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off", "gemm"),
    ("nvjet_tst_128x256_64x4_2x1_v_bz_coopB_TNT", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>(Params)", "gemm"),
    ("aten::mm", "gemm"), ("aten::addmm", "gemm"), ("aten::bmm", "gemm"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4>, true>(Flash_fwd_params)", "attention"),
    ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>::Params)", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x64_4x1x1_cga1x1x1", "attention"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "generated"),
    ("triton_poi_fused_addmm_gelu_3", "generated"),  # a fused epilogue: inductor's kernel, whatever it fuses
    ("cpp_fused_add_mul_0", "generated"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, ...)", "other"),
    ("Memcpy HtoD (Pageable -> Device)", "other"), ("aten::mul", "other"), ("a kernel nobody named", "other"),
])
def test_kernels_and_ops_are_classified_by_name(name, kind):
    assert classify(name) == kind


def test_kernel_time_by_kind_counts_kernels_once_and_leaves_annotations_out():
    """step_profile.by_kind on a CUDA profile's rows (key_averages(): one row per name and device):
    kernels by device time, per step; a user annotation (a CPU range drawn on the GPU) and the CPU
    side are not kernels, though a Triton kernel's launch range on the CPU bears its name; copies
    take time but are not counted as kernels."""
    from tools.step_profile import by_kind
    cpu, cuda = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA

    def row(key, device, us, count, annotation=False):
        return SimpleNamespace(key=key, device_type=device, self_device_time_total=us if device == cuda else 0,
                               self_cpu_time_total=us if device == cpu else 0, count=count, is_user_annotation=annotation)

    rows = [row("aten::mm", cpu, 900, 8), row("nvjet_tst_128x256", cuda, 8000, 8), row("triton_poi_fused_mul_0", cuda, 2000, 20),
            row("pytorch_flash::flash_fwd_kernel", cuda, 1000, 4), row("Memcpy DtoH (Device -> Pinned)", cuda, 400, 2),
            row("ProfilerStep#3", cuda, 99_000, 2, annotation=True), row("## Call CompiledFxGraph ##", cpu, 50, 2),
            row("## Call CompiledFxGraph ##", cuda, 90_000, 2, annotation=True), row("triton_poi_fused_mul_0", cpu, 30, 20)]
    found = by_kind(rows, on_device=True, steps=2)
    assert found["ms"] == {"gemm": 4.0, "attention": 0.5, "generated": 1.0, "other": 0.2}
    assert found["ms_total"] == 5.7 and found["kernels"] == (8 + 20 + 4) / 2
    assert found["top"][0] == ["nvjet_tst_128x256", "gemm", 4.0]
    on_cpu = by_kind([row("aten::mm", cpu, 900, 8), row("aten::mul", cpu, 100, 4), row("Optimizer.step#AdamW.step", cpu, 60, 2)],
                     on_device=False, steps=2)
    assert on_cpu["ms"] == {"gemm": 0.45, "attention": 0.0, "generated": 0.0, "other": 0.08} and on_cpu["kernels"] == 6


def goal_summary(**values):
    """A summary whose stages hold the given goal values (the rest absent)."""
    stages = {}
    for name, value in values.items():
        stages.setdefault(gpu_report.GOALS[name][3], {"ok": True})[name] = value
    return {"stages": stages}


def test_a_goal_met_reads_pass_a_goal_missed_reads_fail_and_the_cpu_judges_none(capsys):
    """GOALS judged from their stages on CUDA: at the bound passes, past it fails, by its own direction
    (a ratio at most, an MFU at least); a goal whose stage gave nothing has no value; on the CPU none is
    judged. The closing table says each differently."""
    summary = goal_summary(step_time_ratio=1.02, memory_ratio=1.111, baseline_mfu=36.9, mechanism_percent=1.5,
                           loop_vs_bench=1.12, baseline_vs_gpt2=0.99)
    judged = {g["name"]: g for g in gpu_report.judge_goals(summary, judged=True)}
    assert {n: g["pass"] for n, g in judged.items()} == {
        "step_time_ratio": True, "memory_ratio": False, "step_time_ratio_1b": None, "baseline_vs_gpt2": True,
        "baseline_mfu": False, "loop_vs_bench": False, "mechanism_percent": True}
    assert judged["baseline_mfu"]["goal"] == ">= 45.0" and judged["memory_ratio"]["value"] == 1.111
    assert all(g["pass"] is None for g in gpu_report.judge_goals(summary, judged=False))

    def closing(judged):
        summary["goals"] = gpu_report.judge_goals(summary, judged)
        summary.update(ok=True, total_s=1.0)
        summary["stages"].setdefault("train", {"ok": True})
        gpu_report.report(summary, judged, 1.0, "out")
        return {line.split("  ")[0].strip(): line for line in capsys.readouterr().out.splitlines()}

    lines = closing(True)
    assert lines["unified / baseline step time, 124M"].endswith("pass")
    assert lines["unified / baseline peak memory, 124M"].endswith("FAIL")
    assert lines["unified / baseline step time, 1B width"].endswith("no value")
    assert all(closing(False)[g[0]].endswith("not judged (CPU)") for g in gpu_report.GOALS.values())


def test_the_loop_is_compared_with_the_bench_only_on_the_same_model_and_batch():
    bench = {"tokens_per_step": 16384, "dtype": "bfloat16", "compile": True,
             "variants": {"unified": {"params": 123_664_189, "ms_per_step": 40.0}}}
    train = {"ms_per_iter": 44.8, "params": 123_664_189, "tokens_per_iter": 16384, "dtype": "bfloat16", "compile": True}
    assert gpu_report.loop_vs_bench(train, bench) == (pytest.approx(1.12), None)
    ratio, why = gpu_report.loop_vs_bench({**train, "tokens_per_iter": 8192, "compile": False}, bench)
    assert ratio is None and why == "not compared: tokens a step 8192 vs the bench's 16384, compile False vs the bench's True"
    assert gpu_report.loop_vs_bench({**train, "ms_per_iter": None}, bench)[0] is None
    assert gpu_report.loop_vs_bench(train, {})[1].startswith("not measured")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_budget_that_is_not_a_number_of_seconds_is_one_line(tmp_path, value, capsys):
    with pytest.raises(SystemExit) as e:
        gpu_check.main([f"--out={tmp_path / 'g'}", "--device=cpu", f"--budget_s={value}"])
    message = str(e.value.code)
    assert "\n" not in message and f"--budget_s={float(value)}" in message and "0 for the default" in message
    assert not math.isfinite(float(value)) and not (tmp_path / "g").exists()


def test_step_profile_refuses_bad_options_in_one_line(tmp_path):
    from configurator import UserError
    from tools.step_profile import parse
    for argv, words in ((["--steps=0"], "--steps=0: expected a whole number"),
                        ([f"--json={tmp_path}"], "a folder, not a file"),
                        (["--syncs=0:5", "--", "train.py"], "START in [1, 1e6]"),
                        (["--syncs=2:5"], "give it after `--`"),
                        (["--", "train.py"], "only with --syncs")):
        with pytest.raises(UserError, match=words.replace("[", "\\[").replace("(", "\\(")):
            parse(argv)


def test_a_stage_the_budget_no_longer_covers_is_skipped_not_failed(tmp_path, capsys):
    """Stages run in order within the budget: once it is spent the rest are recorded as skipped (ok None,
    with what runs them), which is no failure; a stage that ran and failed still is one."""
    ran = []

    def stage(ok):
        def fn(check, timeout):
            ran.append(timeout)
            return {"rc": 0 if ok else 1, "seconds": 0}
        return fn

    stages = {"first": stage(True), "second": stage(False), "third": stage(True)}
    check = SimpleNamespace(out=str(tmp_path))
    summary = {"stages": {}}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gpu_check, "STAGES", stages)
        t0 = gpu_check.time.perf_counter()
        gpu_check.run_stages(check, summary, {name: 60 for name in stages}, budget=62, t_start=t0 - 58)
    assert len(ran) == 0  # 4 s left: under the 5 s a stage needs
    assert all(s["ok"] is None and "budget" in s["skipped"] for s in summary["stages"].values())
    assert "skipped: the 62 s budget is spent" in capsys.readouterr().out
    summary = {"stages": {}}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gpu_check, "STAGES", stages)
        gpu_check.run_stages(check, summary, {name: 60 for name in stages}, budget=1000, t_start=gpu_check.time.perf_counter())
    assert [s["ok"] for s in summary["stages"].values()] == [True, False, True]
