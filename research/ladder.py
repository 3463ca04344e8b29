"""A size ladder's plan before anything runs: per setting, what it trains, what it costs, whether it fits.

    python -m research.ladder configs/ablations/ladder.py                    # 80 GB GPUs, 8 a job, MFU 40%
    python -m research.ladder configs/ablations/ladder.py --gpu_check=gpu_check_out/summary.json  # measured MFU
    python -m research.ladder configs/ablations/ladder.py --gpu_memory_gb=141 --out=plan.md

Per setting of the ablation file (each rung x optimizer x tokens per parameter), from its run
configs and the model itself (built on the meta device, nothing allocated):
  parameters   total, without the token embedding, and active per token (GPT.num_active_params:
               all of a dense model with a tied head; an MoE's top-k experts), in millions
  tokens       max_iters x tokens per iteration, in billions, and per active parameter
  batch        sequences x block per iteration = micro-batch x accumulation (global micro-steps)
  FineWeb-Edu  the smallest sample subset that holds the training tokens (data/fineweb/prepare.py
               --subset, with --train_tokens)
  FLOPs        per token (GPT.flops_per_token: 6 N_active + attention), and per run
  GPU-hours    a run's training FLOPs over (peak bf16 FLOP/s x MFU); MFU: the --gpu_check summary's
               measured value (its 124M training stage, assumed to carry over), else 40%, assumed
  memory/GPU   under DDP: float32 weights and gradients (8 bytes a parameter) and optimizer state
               (AdamW: 8; Muon: 4 for the matrices it steps, AdamW's 8 for the rest, from the
               model's own parameter groups), plus the activations of one micro-batch
               (configurator.estimate_size: a float32 estimate, an upper bound under bf16);
               when AdamW's does not fit --gpu_memory_gb, the --fsdp=True switch and the GPUs
               it needs (16 bytes a parameter over N), as train.py's check says at launch
Totals: every run the file plans (LR sweeps included), in GPU-hours, by tokens per parameter.
"""

import os
import sys

if __package__ in (None, ""):  # run by its path: its imports live at the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import argparse
import json
import math

import torch

from configurator import GB, UserError, cli, estimate_size
from model import GPT, model_config
from optim import param_groups
from research.ablation import load_ablation, plan, run_config, tuning_setting
from types import SimpleNamespace

MFU_ASSUMED = 0.40
# FineWeb-Edu's sample subsets (GPT-2 tokens, as the dataset card names them), smallest first
FINEWEB_SUBSETS = (("sample-10BT", 10e9), ("sample-100BT", 100e9), ("sample-350BT", 350e9))


def measured_mfu(path):
    """The MFU (a fraction) of gpu_check's training stage from its summary.json; UserError when it has none."""
    try:
        with open(path) as f:
            mfu = json.load(f)["stages"]["train"].get("mfu_percent")
    except (OSError, ValueError, KeyError) as e:
        raise UserError(f"--gpu_check={path}: not a gpu_check summary.json ({type(e).__name__}: {e})") from None
    if not mfu:
        raise UserError(f"--gpu_check={path}: its training stage measured no MFU (a CPU run, or an unknown GPU)")
    return mfu / 100


def subset_for(tokens):
    """The smallest FineWeb-Edu sample subset holding `tokens` training tokens, or None past them all."""
    return next((name for name, size in FINEWEB_SUBSETS if tokens <= size), None)


def rung(cfg, gpu_bytes):
    """The figures of one run config (a dict with vocab_size set): see the module docstring."""
    with torch.device("meta"):
        model = GPT(model_config(cfg))
    total, active = model.num_params(), model.num_active_params()
    tokens_per_iter = cfg["batch_size"] * cfg["block_size"] * cfg["gradient_accumulation_steps"]
    tokens = cfg["max_iters"] * tokens_per_iter
    flops_token = model.flops_per_token()
    steps_matrices = {"muon": sum(p.numel() for g in param_groups(model, SimpleNamespace(**{**cfg, "optimizer": "muon"}))
                                  if g["optimizer"] == "muon" for p in g["params"])}
    _, activations = estimate_size(cfg)
    adamw = 16 * total + activations
    muon = 16 * total - 4 * steps_matrices["muon"] + activations
    fsdp = math.ceil(16 * total / (gpu_bytes - activations)) if gpu_bytes > activations else None
    return dict(total=total, embedding=model.wte.weight.numel(), active=active, tokens=tokens,
                tokens_per_iter=tokens_per_iter, flops_token=flops_token, flops=flops_token * tokens,
                adamw_bytes=adamw, muon_bytes=muon, activations=activations, fsdp_gpus=fsdp)


def plan_table(spec, gpu_memory_gb, peak_tflops, mfu, mfu_source):
    """Markdown: one row per setting, then the totals (module docstring)."""
    gpu_bytes = gpu_memory_gb * GB
    hours = lambda flops: flops / (peak_tflops * 1e12 * mfu) / 3600  # noqa: E731
    base = list(spec["variants"])[0]
    out = [f"Plan of `{spec['name']}`: {gpu_memory_gb:g} GB GPUs at {peak_tflops:g} TFLOP/s bf16 peak, MFU "
           f"{mfu:.0%} ({mfu_source}); figures of `{base}` (the other variants differ by their scale vectors "
           f"only). Parameters in millions; memory per GPU under DDP in GB (activations: a float32 estimate).", "",
           "| setting | params total / no emb. / active | tokens (B) | tokens per active param | iters | batch: "
           "seqs x block = micro x accum | FineWeb-Edu subset | GFLOP/token | GPU-h per run | DDP AdamW GB | "
           "DDP Muon GB | fits? | peak LR x the tuned multiplier |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for setting in spec["settings"]:
        cfg, _ = run_config(spec, setting, base, spec["seeds"][0])
        cfg = {**cfg, "vocab_size": cfg["vocab_size"] or 50257}
        r = rung(cfg, gpu_bytes)
        subset = subset_for(r["tokens"])
        fits = "yes" if r["adamw_bytes"] <= gpu_bytes else \
            f"no: --fsdp=True over >= {r['fsdp_gpus']} GPUs" if r["fsdp_gpus"] else "no: a smaller micro-batch"
        out.append(
            f"| `{setting}` | {r['total'] / 1e6:,.0f} / {(r['total'] - r['embedding']) / 1e6:,.0f} / "
            f"{r['active'] / 1e6:,.0f} | {r['tokens'] / 1e9:.3g} | {r['tokens'] / r['active']:.3g} | "
            f"{cfg['max_iters']:,} | {r['tokens_per_iter'] // cfg['block_size']} x {cfg['block_size']} = "
            f"{cfg['batch_size']} x {cfg['gradient_accumulation_steps']} | "
            f"{subset or 'more than ' + FINEWEB_SUBSETS[-1][0]} (--train_tokens={r['tokens']:.3g}) | "
            f"{r['flops_token'] / 1e9:.3g} | {hours(r['flops']):,.0f} | {r['adamw_bytes'] / GB:.0f} | "
            f"{r['muon_bytes'] / GB:.0f} | {fits} | {lr_text(cfg)} (from `{tuning_setting(spec, setting)}`) |")
    totals, per_token = {}, {}
    for run in plan(spec, "runs"):
        cfg = {**run["config"], "vocab_size": run["config"]["vocab_size"] or 50257}
        key = (run["setting"], run["variant"])  # the LR and the seed change no FLOPs
        if key not in per_token:
            with torch.device("meta"):
                per_token[key] = GPT(model_config(cfg)).flops_per_token()
        flops = per_token[key]
        tpp = setting_tpp(run["setting"])
        totals[tpp] = totals.get(tpp, 0) + hours(flops * cfg["max_iters"] * cfg["batch_size"] * cfg["block_size"]
                                                 * cfg["gradient_accumulation_steps"])
    out += ["", f"Every run the file plans ({len(plan(spec, 'runs'))}, LR sweeps on tuning seeds included): "
            + "; ".join(f"{label}: {h:,.0f} GPU-hours" for label, h in totals.items())
            + f"; in all {sum(totals.values()):,.0f} GPU-hours (training FLOPs only; evaluation adds a few %).", ""]
    return "\n".join(out)


def lr_text(cfg):
    """The peak LRs a run config gives before the tuned multiplier scales them: AdamW's, and Muon's."""
    return f"AdamW {cfg['learning_rate']:.3g}" + (f", Muon {cfg['muon_lr']:.3g}" if cfg["optimizer"] == "muon" else "")


def setting_tpp(setting):
    """'tpp100' from 'adamw_d1_tpp100': the settings' own label of their tokens per parameter."""
    return next((part for part in setting.split("_") if part.startswith("tpp")), "other")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ablation", help="a ladder ablation file (configs/ablations/ladder.py)")
    p.add_argument("--gpu_memory_gb", type=float, default=80, help="memory of one GPU (H100: 80, H200: 141)")
    p.add_argument("--peak_tflops", type=float, default=989, help="its dense bf16 peak (H100/H200 SXM: 989)")
    p.add_argument("--mfu", type=float, default=0, help=f"model FLOPs utilization, 0-1 (default: --gpu_check's, "
                   f"else {MFU_ASSUMED:.0%} assumed)")
    p.add_argument("--gpu_check", default="", help="a tools/gpu_check summary.json: its measured MFU")
    p.add_argument("--out", default="", help="also write the table to this markdown file")
    args = p.parse_args(argv)
    if not 0 <= args.mfu <= 1 or args.gpu_memory_gb <= 0 or args.peak_tflops <= 0:
        raise UserError(f"--mfu={args.mfu} must be in (0, 1], --gpu_memory_gb and --peak_tflops > 0")
    if args.mfu:
        mfu, source = args.mfu, "--mfu"
    elif args.gpu_check:
        mfu, source = measured_mfu(args.gpu_check), f"measured by gpu_check: {args.gpu_check}"
    else:
        mfu, source = MFU_ASSUMED, "assumed until gpu_check measures it"
    table = plan_table(load_ablation(args.ablation), args.gpu_memory_gb, args.peak_tflops, mfu, source)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")
    return 0


if __name__ == "__main__":
    cli(main)
