"""The GPU check's numbers read against what they aim at: the goals (GOALS, judged from
summary.json's stages), the paper's Table 3 and public anchors (comparison), and the closing table
(report). tools/gpu_check.py runs the stages and calls these; nothing here runs a stage."""

import os

# The figures the product must reach: name -> (what it measures, "<=" or ">=", the bound, the stage whose result
# holds it under that name). Benchmarks, not tests: judged on CUDA only.
GOALS = {
    "step_time_ratio": ("unified / baseline step time, 124M", "<=", 1.02, "bench"),  # both with the fast paths
    "memory_ratio": ("unified / baseline peak memory, 124M", "<=", 1.01, "bench"),
    "step_time_ratio_1b": ("unified / baseline step time, 1B width", "<=", 1.02, "bench_1b"),
    "baseline_vs_gpt2": ("baseline / GPT-2 step time per FLOP", "<=", 1.00, "profile"),
    "baseline_mfu": ("baseline MFU %, 124M", ">=", 45.0, "bench"),
    "loop_vs_bench": ("training loop / the bench's step", "<=", 1.03, "train"),
    "mechanism_percent": ("mechanism statistics, % of a step", "<=", 2.0, "bench"),
}
# What a user compares the numbers with: the paper's Table 3 (unified vs baseline at 1B), and two
# public anchors for GPT-2 124M on one GPU (llm.c's training throughput per H100, nanoGPT's MFU).
PAPER_TABLE3_1B = {"step_time_ratio": 1.04, "memory_ratio": 1.01}
ANCHORS = {"llm.c 124M tokens/s per H100": 460_000, "nanoGPT 124M MFU %": 33}


def loop_vs_bench(train, bench):
    """(the train stage's ms per iteration over the bench's unified step, None) when both ran one model
    (its parameters) on one batch (tokens a step) in one dtype, compiled alike; else (None, why)."""
    row = bench.get("variants", {}).get("unified")
    if row is None or train.get("ms_per_iter") is None:
        return None, "not measured: the bench or the train stage gave no time"
    pairs = {"parameters": (train["params"], row["params"]), "tokens a step": (train["tokens_per_iter"],
             bench.get("tokens_per_step")), "dtype": (train["dtype"], bench.get("dtype")),
             "compile": (train["compile"], bench.get("compile"))}
    differ = [f"{k} {a} vs the bench's {b}" for k, (a, b) in pairs.items() if a != b]
    return (None, "not compared: " + ", ".join(differ)) if differ else (train["ms_per_iter"] / row["ms_per_step"], None)


def bench_config(argv):
    """The training config a bench.py argv describes: its config files and config keys (bench.py's own
    flags, whatever they are, are no key of configurator.DEFAULTS and are left out)."""
    from configurator import DEFAULTS, load_config
    return load_config([a for a in argv if not a.startswith("--") or a[2:].split("=")[0] in DEFAULTS])[0]


def comparison(summary, train_cmd, protocol_argv, vocab_size):
    """summary's numbers beside what a user compares them with: the FLOPs per token of the train
    stage's model in MFU's convention (model.GPT.flops_per_token: 6 N + 12 L n_head head_dim T, the
    T x T attention term counted whole) and causal (that term halved: the work a causal mask does),
    the train stage's tokens/s per GPU and MFU in both counts, the same at the protocol's shape
    (protocol_argv: its bench.py argv; its own FLOP counts: the attention term is a larger share at
    context 2048), the bench's ratios like for like (the fast paths on both; the formulas alone on both)
    beside the paper's Table 3 (at 1B; ours at the bench's size),
    and the anchors."""
    import torch

    from configurator import load_config
    from model import GPT, model_config
    cfg, _ = load_config(train_cmd[train_cmd.index("train.py") + 1:])
    with torch.device("meta"):
        model = GPT(model_config({**cfg, "vocab_size": vocab_size}))
    conventional, causal = model.flops_per_token(), model.flops_per_token(causal=True)
    train, bench = summary["stages"].get("train", {}), summary["stages"].get("bench", {})
    protocol = summary["stages"].get("protocol", {})
    mfu, protocol_mfu = train.get("mfu_percent"), protocol.get("mfu_percent")
    with torch.device("meta"):
        at_shape = GPT(model_config({**bench_config(protocol_argv), "vocab_size": vocab_size}))
    p_conv, p_causal = at_shape.flops_per_token(), at_shape.flops_per_token(causal=True)
    return {"flops_per_token": {"conventional": conventional, "causal": causal, "causal_share": causal / conventional},
            "train": {"tokens_per_s_per_gpu": train.get("tokens_per_s"), "mfu_percent": mfu,  # one process
                      "mfu_percent_causal": None if mfu is None else mfu * causal / conventional},
            "protocol_shape": {"tokens_per_s_per_gpu": protocol.get("tokens_per_s"), "mfu_percent": protocol_mfu,
                               "mfu_percent_causal": None if protocol_mfu is None else protocol_mfu * p_causal / p_conv,
                               "causal_share": p_causal / p_conv},
            "unified_vs_baseline": {"ours": {k: bench.get(k) for k in PAPER_TABLE3_1B},
                                    "formulas": {k: bench.get(f"formulas_{k}") for k in PAPER_TABLE3_1B},
                                    "paper_table3_1B": PAPER_TABLE3_1B},
            "anchors": ANCHORS}


def judge_goals(summary, judged):
    """[{name, what, value, goal, pass}] of GOALS, each value read from its stage's result in summary;
    pass None when not judged (judged False: the CPU) or when the stage gave no value."""
    goals = []
    for name, (what, op, bound, stage) in GOALS.items():
        value = summary["stages"].get(stage, {}).get(name)
        ok = None if value is None or not judged else (value <= bound if op == "<=" else value >= bound)
        goals.append({"name": name, "what": what, "value": value, "goal": f"{op} {bound}", "pass": ok})
    return goals


def report(summary, judged, entropy, out):
    """The closing table: each stage, each goal, the training run's val losses."""
    print(f"\n{'stage':<8} {'result':<8} {'s':>6}  detail")
    for name, s in summary["stages"].items():
        print(f"{name:<8} {'ok' if s['ok'] else 'FAILED':<8} {s.get('seconds', 0):>6}  "
              f"{s.get('error', s.get('not_run', ''))[:100]}")
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    print(f"\n{'goal':<38} {'value':>8}  {'goal':<8} result")
    for g in summary["goals"]:
        verdict = {True: "pass", False: "FAIL", None: "no value" if judged else "not judged (CPU)"}[g["pass"]]
        print(f"{g['what']:<38} {fmt(g['value'], '.4g'):>8}  {g['goal']:<8} {verdict}")
    report_time(summary["stages"], fmt)
    cmp = summary.get("compare")
    if cmp:
        t, f, u = cmp["train"], cmp["flops_per_token"], cmp["unified_vs_baseline"]
        print(f"\ntrain: {fmt(t['tokens_per_s_per_gpu'], ',.0f')} tokens/s per GPU (llm.c at 124M: "
              f"{ANCHORS['llm.c 124M tokens/s per H100']:,} per H100), MFU {fmt(t['mfu_percent'], '.1f')}% in the "
              f"conventional count, {fmt(t['mfu_percent_causal'], '.1f')}% causal (nanoGPT: ~{ANCHORS['nanoGPT 124M MFU %']}%); "
              f"causal FLOPs are {f['causal_share']:.0%} of the conventional ones here")
        pr = cmp["protocol_shape"]
        print(f"at the 0.12B protocol's shape (16 x 2048): {fmt(pr['tokens_per_s_per_gpu'], ',.0f')} tokens/s per GPU, "
              f"MFU {fmt(pr['mfu_percent'], '.1f')}% conventional, {fmt(pr['mfu_percent_causal'], '.1f')}% causal "
              f"(research.ladder --gpu_check turns it into GPU-hours)")
        print(f"unified / baseline, like for like at the bench's shape: step time {fmt(u['ours']['step_time_ratio'], '.3f')}x, peak "
              f"memory {fmt(u['ours']['memory_ratio'], '.3f')}x with the fast paths on both; "
              f"{fmt(u['formulas']['step_time_ratio'], '.3f')}x, {fmt(u['formulas']['memory_ratio'], '.3f')}x with the "
              f"formulas alone on both (the paper's Table 3 at 1B: {PAPER_TABLE3_1B['step_time_ratio']}x, "
              f"{PAPER_TABLE3_1B['memory_ratio']}x)")
    train_result = summary["stages"]["train"]
    if "val_loss" in train_result:
        print(f"val loss by iteration {train_result['val_loss']} (entropy-rate floor {entropy:.3f})")
    skipped = ", ".join(name for name, s in summary["stages"].items() if s["ok"] is None)
    done = ("all stages ok" if summary["ok"] else "SOME STAGES FAILED") + (f" (skipped: {skipped})" if skipped else "")
    print(f"\n{done} in {summary['total_s']} s; "
          f"{os.path.join(out, 'summary.json')}")


def report_time(stages, fmt):
    """The closing table's lines on where the time goes: the profile's kernel time by kind, the training
    loop against the bench's step with its host syncs, the 1B width's ratio."""
    prof = stages.get("profile", {})
    if prof.get("variants"):
        print(f"\nprofile: ms a step by kind ({prof['unit']}), kernels a step (CPU: ATen ops), wall ms a step (median)")
        print(f"{'variant':<10} {'gemm':>8} {'attention':>10} {'generated':>10} {'other':>8} {'total':>8} {'kernels':>8} "
              f"{'wall':>8}")
        for n, r in prof["variants"].items():
            ms = r["ms"]
            print(f"{n:<10} {ms['gemm']:>8.2f} {ms['attention']:>10.2f} {ms['generated']:>10.2f} {ms['other']:>8.2f} "
                  f"{r['ms_total']:>8.2f} {r['kernels']:>8.0f} {r['ms_per_step']:>8.2f}")
        print(f"baseline / GPT-2 step time per FLOP: {fmt(prof.get('baseline_vs_gpt2'), '.3f')}x (profile.json: the "
              f"costliest kernels of each)")
    train, resume, wide = stages.get("train", {}), stages.get("resume", {}), stages.get("bench_1b", {})
    if train.get("ms_per_iter"):
        ratio = train.get("loop_vs_bench")
        print(f"training loop: {train['ms_per_iter']:.1f} ms/iter, " + (f"{ratio:.3f}x the bench's step (same model and "
              "batch)" if ratio else train.get("loop_vs_bench_note", "")))
    if "sync_iters" in resume:
        syncs = resume["host_syncs_per_iter"]
        print(f"host syncs per iteration: {'not measured (no GPU)' if syncs is None else f'{syncs:.2f}'}, scalars read "
              f"back {fmt(resume['scalar_reads_per_iter'], '.2f')}, over {resume['sync_iters']} iterations of the resume"
              + (f"; {resume['syncs_note']}" if "syncs_note" in resume else ""))
    if "step_time_ratio_1b" in wide:
        print(f"1B width ({wide['shape']}): unified / baseline step time {wide['step_time_ratio_1b']:.3f}x, baseline "
              f"{wide['ms_per_step']:.1f} ms" + (f", MFU {wide['baseline_mfu']:.1f}%" if wide["baseline_mfu"] else ""))
