"""A size ladder's plan before anything runs: per setting, what it trains, what it costs, whether it fits.

    python -m research.ladder configs/ablations/ladder.py                    # 80 GB GPUs, MFU 40%
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
               measured value (its protocol stage: the baseline at the smallest rung's own shape, the
               0.12B protocol's; else its 124M training stage; assumed to carry over to the larger
               rungs), else 40%, assumed
  memory/GPU   under DDP, for the variant with the most parameters: float32 weights, gradients
               and DDP's gradient buckets (12 bytes a parameter) and optimizer state (AdamW: 8;
               Muon: 4 for the matrices it steps, AdamW's 8 for the rest, from the model's own
               parameter groups), plus the activations of one micro-batch (configurator.
               estimate_size, a float32 estimate: measured peaks can exceed it, MoE's most).
               "fits?" judges the setting's own optimizer; where it does not fit --gpu_memory_gb:
               the largest micro-batch that does, and for an optimizer that can step shards
               (AdamW) --fsdp=True with the fewest GPUs, a power of two, whose shards (16 bytes a
               parameter over N) fit beside the micro-batch
Totals: every run the file plans (LR sweeps included), in GPU-hours, by tokens per parameter.
"""

import os
import sys

if __package__ in (None, ""):  # run by its path: its imports live at the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import common  # noqa: E402 (from the repository root, the path above)

common.set_omp_env()  # before torch loads: idle OpenMP threads sleep instead of spinning

import argparse
import json
import math

import torch

from checkpoint import atomic_write
from common import cli
from configurator import UserError, folder_problem
from memory import GB, estimate_size
from model import GPT, model_config
from optim import OPTIMIZERS, param_groups
from research.ablation import (claim_rows, load_ablation, plan, power_alpha, run_config, setting_table_seeds,
                               table_seeds, tuning_setting)
from research.stats import ladder_power, paired_power, seeds_for_power
from research.slurm import H100_PEAK_TFLOPS, MFU_ASSUMED
from types import SimpleNamespace

# What the plan's machine figures may be: (lowest, highest, what the value is). Outside these a value
# still computes a table, but one of no machine (--mfu=1e-300: a total of 300 digits; a percentage
# given as --mfu=40 is not a fraction at all).
PLAUSIBLE = {
    "mfu": (0.01, 1.0, "MFU is a fraction such as 0.4 (40%), not a percentage; a real run's is above 0.01"),
    "gpu_memory_gb": (1.0, 2048.0, "one GPU's memory in GB, such as 80 (H100) or 141 (H200)"),
    "peak_tflops": (1.0, 20000.0, f"one GPU's dense bf16 peak in TFLOP/s, such as {H100_PEAK_TFLOPS} (H100/H200)"),
}


def check_plausible(flag, value, where=None):
    """UserError (one line naming the value, its range and an example) unless `value` lies in
    PLAUSIBLE[flag]'s range; where: how the line names the value (default "--<flag>=<value>")."""
    low, high, what = PLAUSIBLE[flag]
    if not (type(value) in (int, float) and math.isfinite(value) and low <= value <= high):
        raise UserError(f"{where or f'--{flag}={value}'}: must be from {low:g} to {high:g}: {what}")


# FineWeb-Edu's sample subsets (GPT-2 tokens, as the dataset card names them), smallest first
FINEWEB_SUBSETS = (("sample-10BT", 10e9), ("sample-100BT", 100e9), ("sample-350BT", 350e9))


def measured_mfu(path):
    """(MFU as a fraction, the stage that measured it) from a gpu_check summary.json: its protocol
    stage (the baseline at the 0.12B protocol's own shape, 16 x 2048 tokens a micro-step) where that
    ran, else its 124M training stage (context 1024); UserError when neither measured one."""
    try:
        with open(path) as f:
            stages = json.load(f)["stages"]
        found = [(name, stages[name].get("mfu_percent")) for name in ("protocol", "train") if name in stages]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UserError(f"--gpu_check={path}: not a gpu_check summary.json ({type(e).__name__}: {e})") from None
    stage, mfu = next(((n, m) for n, m in found if m is not None), (None, None))
    if mfu is None:
        raise UserError(f"--gpu_check={path}: neither its protocol nor its training stage measured an MFU (a CPU "
                        f"run, an unknown GPU, or both stages failed)")
    if type(mfu) not in (int, float) or not 0 < mfu <= 100:
        raise UserError(f"--gpu_check={path}: {stage} stage's mfu_percent={mfu!r} is not a percentage in (0, 100]")
    check_plausible("mfu", mfu / 100, f"--gpu_check={path}: {stage} stage's mfu_percent={mfu!r} (MFU {mfu / 100:g}; "
                                      f"give --mfu instead)")
    return mfu / 100, stage


def subset_for(tokens):
    """The smallest FineWeb-Edu sample subset holding `tokens` training tokens, or None past them all."""
    return next((name for name, size in FINEWEB_SUBSETS if tokens <= size), None)


def rung(cfgs):
    """The figures of one setting from its variants' run configs (dicts with vocab_size set; the first
    one's for all but memory, the largest model's for memory): see the module docstring."""
    models = []
    for cfg in cfgs:
        with torch.device("meta"):
            models.append(GPT(model_config(cfg)))
    model, cfg = models[0], cfgs[0]
    largest = max(range(len(models)), key=lambda i: models[i].num_params())
    total = models[largest].num_params()
    muon_cfg = SimpleNamespace(**{**cfgs[largest], "optimizer": "muon"})
    matrices = sum(p.numel() for g in param_groups(models[largest], muon_cfg) if g["optimizer"] == "muon"
                   for p in g["params"])
    tokens_per_iter = cfg["batch_size"] * cfg["block_size"] * cfg["gradient_accumulation_steps"]
    tokens = cfg["max_iters"] * tokens_per_iter
    _, activations = estimate_size(cfg)
    return dict(total=model.num_params(), embedding=model.wte.weight.numel(), active=model.num_active_params(),
                tokens=tokens, tokens_per_iter=tokens_per_iter, flops_token=model.flops_per_token(),
                causal_token=model.flops_per_token(causal=True),
                flops=model.flops_per_token() * tokens, memory_params=total, activations=activations,
                state={"adamw": 20 * total, "muon": 20 * total - 4 * matrices},
                per_variant_flops_token=[m.flops_per_token() for m in models])


def fits(r, cfg, gpu_bytes, shards):
    """'yes', or 'no: ' and what does fit (module docstring); shards: the optimizer can step FSDP2's shards."""
    state, activations = r["state"][cfg["optimizer"]], r["activations"]
    if state + activations <= gpu_bytes:
        return "yes"
    fixes, sequences = [], cfg["batch_size"] * cfg["gradient_accumulation_steps"]
    per_sequence = activations / cfg["batch_size"]
    micro = int((gpu_bytes - state) / per_sequence) if gpu_bytes > state else 0
    micro = max((b for b in range(1, min(micro, cfg["batch_size"]) + 1) if sequences % b == 0), default=0)
    if micro:
        fixes.append(f"--batch_size={micro} --gradient_accumulation_steps={sequences // micro}")
    if shards and gpu_bytes > activations:
        gpus = 2 ** math.ceil(math.log2(max(2, 16 * r["memory_params"] / (gpu_bytes - activations))))
        if cfg["gradient_accumulation_steps"] % gpus == 0:
            fixes.append(f"--fsdp=True over {gpus} GPUs")
    return "no: " + (" or ".join(fixes) or "a GPU with more memory")


def plan_table(spec, gpu_memory_gb, peak_tflops, mfu, mfu_source):
    """Markdown: one row per setting, then the totals (module docstring)."""
    gpu_bytes = gpu_memory_gb * GB
    hours = lambda flops: flops / (peak_tflops * 1e12 * mfu) / 3600  # noqa: E731
    base = list(spec["variants"])[0]
    out = [f"Plan of `{spec['name']}`: {gpu_memory_gb:g} GB GPUs at {peak_tflops:g} TFLOP/s bf16 peak, MFU "
           f"{mfu:.0%} ({mfu_source}); figures of `{base}` (the other variants differ by their scale vectors "
           f"only), memory of the largest variant. Parameters in millions; memory per GPU under DDP in GB "
           f"(activations: a float32 estimate; measured peaks can exceed it). Tokens per parameter count the tied "
           f"embedding (it is the LM head, so active). Peak LRs before the tuned "
           f"multiplier: the matrices' by the file's width rule, the scale vectors' (and OR/ER magnitudes') "
           f"scale_lr by their own, shown as `scales`. FLOPs: the non-causal count (6 N + the whole T x T "
           f"attention term: MFU's convention, comparable to published MFUs); the causal count, which halves "
           f"that term, is beside it.", "",
           "| setting | params total / no emb. / active | tokens (B) | tokens per active param | iters | batch: "
           "seqs x block = micro x accum | FineWeb-Edu subset | GFLOP/token | GPU-h per run | DDP AdamW GB | "
           "DDP Muon GB | fits? | peak LR x the tuned multiplier |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    per_token = {}  # (setting, variant) -> FLOPs per token, for the totals (the LR and seed change none)
    r_tokens = {}  # setting -> training tokens of a 1x run
    for setting in spec["settings"]:
        cfgs = [run_config(spec, setting, v, spec["seeds"][0])[0] for v in spec["variants"]]
        cfgs = [{**c, "vocab_size": c["vocab_size"] or 50257} for c in cfgs]
        cfg, r = cfgs[0], rung(cfgs)
        per_token |= {(setting, v): f for v, f in zip(spec["variants"], r["per_variant_flops_token"])}
        subset, r_tokens[setting] = subset_for(r["tokens"]), r["tokens"]
        verdict = fits(r, cfg, gpu_bytes, OPTIMIZERS[cfg["optimizer"]].shards)
        out.append(
            f"| `{setting}` | {r['total'] / 1e6:,.0f} / {(r['total'] - r['embedding']) / 1e6:,.0f} / "
            f"{r['active'] / 1e6:,.0f} | {r['tokens'] / 1e9:.3g} | {r['tokens'] / r['active']:.3g} | "
            f"{cfg['max_iters']:,} | {r['tokens_per_iter'] // cfg['block_size']} x {cfg['block_size']} = "
            f"{cfg['batch_size']} x {cfg['gradient_accumulation_steps']} | "
            f"{subset or 'more than ' + FINEWEB_SUBSETS[-1][0]} (--train_tokens={r['tokens']:.3g}) | "
            f"{r['flops_token'] / 1e9:.3g} (causal {r['causal_token'] / 1e9:.3g}) | {fmt_hours(hours(r['flops']))} | "
            f"{(r['state']['adamw'] + r['activations']) / GB:.0f} | {(r['state']['muon'] + r['activations']) / GB:.0f} | "
            f"{verdict} | {lr_text(cfg)} (from `{tuning_setting(spec, setting)}`) |")
    totals, runs = {}, plan(spec, "runs")
    for run in runs:
        cfg = run["config"]
        flops = per_token[(run["setting"], run["variant"])]
        tpp = setting_tpp(run["setting"])
        totals[tpp] = totals.get(tpp, 0) + hours(flops * cfg["max_iters"] * cfg["batch_size"] * cfg["block_size"]
                                                 * cfg["gradient_accumulation_steps"])
    out += ["", f"Every run the file plans ({len(runs)}, LR sweeps on tuning seeds included): "
            + "; ".join(f"{label}: {h:,.0f} GPU-hours" for label, h in totals.items())
            + f"; in all {sum(totals.values()):,.0f} GPU-hours (training FLOPs only; evaluation adds a few %).", ""]
    per_seed = {s: hours(sum(per_token[(s, v)] for v in spec["variants"]) * r_tokens[s]) for s in spec["settings"]}
    return "\n".join(out + power_lines(spec, per_seed, sum(totals.values())))


def fmt_hours(h):
    """GPU-hours as the table shows them: whole hours from 10, two digits below."""
    return f"{h:,.0f}" if h >= 10 else f"{h:.2g}"


def power_lines(spec, per_seed, planned_hours):
    """Markdown: the file's registered power analysis (ablation.py's `power`), what its planned seeds
    reach, and with a pilot what each further seed costs. per_seed: {setting: GPU-hours of one more
    table seed of every variant}; planned_hours: the plan's total."""
    p = spec["power"]
    if not p:
        return []
    alpha, rows = power_alpha(spec), len(spec["ladders"]) or len(claim_rows(spec))
    out = [f"Power analysis (registered in the file): paired SD {p['sd']:g} assumed, smallest gap {p['gap']:g}, "
           f"level {alpha:.3g} (0.05 over its {rows} {'ladders' if spec['ladders'] else 'claim rows'}: BH's strictest "
           f"threshold), power {p['power']:.0%}.", ""]
    for name, ladder in spec["ladders"].items():
        seeds = [len(setting_table_seeds(spec, s)) for s in ladder]
        out.append(f"- ladder `{name}`: seeds per rung {seeds}: power {ladder_power(p['gap'], p['sd'], seeds, alpha):.2f}")
    if spec["ladders"]:
        return out + [""]
    for setting in spec["settings"]:
        if p.get("pilot"):
            most = len(table_seeds(spec))
            n = seeds_for_power(p["gap"], p["sd"], alpha, p["power"], most=most) or most
            extra = per_seed[setting]
            out.append(f"- `{setting}`: a pilot of {p['pilot']} seeds (in the plan above: {planned_hours:,.0f} GPU-hours "
                       f"through it); its largest paired SD then sets the seeds, {p['pilot']} to {most}, at "
                       f"{extra:,.1f} GPU-hours each further seed: at the assumed SD {n} seeds (power "
                       f"{paired_power(p['gap'], p['sd'], n, alpha):.2f}), {planned_hours + (n - p['pilot']) * extra:,.0f} "
                       f"GPU-hours in all; at the cap {planned_hours + (most - p['pilot']) * extra:,.0f}")
        else:
            n = len(setting_table_seeds(spec, setting))
            out.append(f"- `{setting}`: {n} planned seeds: power {paired_power(p['gap'], p['sd'], n, alpha):.2f}")
    return out + [""]


def lr_text(cfg):
    """The peak LRs a run config gives before the tuned multiplier scales them: AdamW's, Muon's, and
    the scale vectors' (scale_lr; 0: AdamW's)."""
    return (f"AdamW {cfg['learning_rate']:.3g}" + (f", Muon {cfg['muon_lr']:.3g}" if cfg["optimizer"] == "muon" else "")
            + f", scales {cfg.get('scale_lr') or cfg['learning_rate']:.3g}")


def setting_tpp(setting):
    """'tpp100' from 'adamw_d1_tpp100': the settings' own label of their tokens per parameter."""
    return next((part for part in setting.split("_") if part.startswith("tpp")), "other")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ablation", help="a ladder ablation file (configs/ablations/ladder.py)")
    p.add_argument("--gpu_memory_gb", type=float, default=80, help="memory of one GPU (H100: 80, H200: 141)")
    p.add_argument("--peak_tflops", type=float, default=H100_PEAK_TFLOPS,
                   help=f"its dense bf16 peak (H100/H200 SXM: {H100_PEAK_TFLOPS})")
    p.add_argument("--mfu", type=float, default=None, help=f"model FLOPs utilization, a fraction from "
                   f"{PLAUSIBLE['mfu'][0]:g} to 1 (default: --gpu_check's, else {MFU_ASSUMED:g} assumed)")
    p.add_argument("--gpu_check", default="", help="a tools/gpu_check summary.json: its measured MFU")
    p.add_argument("--out", default="", help="also write the table to this markdown file")
    args = p.parse_args(argv)
    for flag in PLAUSIBLE:
        if getattr(args, flag) is not None:
            check_plausible(flag, getattr(args, flag))
    problem = args.out and (folder_problem(os.path.dirname(os.path.abspath(args.out))) or
                            (os.path.isdir(args.out) and "a folder: name a markdown file"))
    if problem:  # said before the plan is computed
        raise UserError(f"--out={args.out}: {problem}")
    if args.mfu is not None:
        mfu, source = args.mfu, "--mfu"
    elif args.gpu_check:
        mfu, stage = measured_mfu(args.gpu_check)
        source = f"measured by gpu_check's {stage} stage ({args.gpu_check}), assumed to carry over to every rung"
    else:
        mfu, source = MFU_ASSUMED, "assumed until gpu_check measures it"
    table = plan_table(load_ablation(args.ablation), args.gpu_memory_gb, args.peak_tflops, mfu, source)
    print(table)
    if args.out:
        with atomic_write(args.out) as f:  # a kill leaves the old table or the new one
            f.write(table + "\n")
    return 0


if __name__ == "__main__":
    cli(main)
