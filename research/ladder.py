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
Totals: every run the file plans (LR sweeps included), in GPU-hours, by tokens per parameter; the
hours on one node at 30, 40 and 50% MFU with each run's start-up counted (RUN_OVERHEAD_MIN); and the
registered power analysis per row (ablation.py's `power`): by formula, a pilot's design simulated
(research/power.py pilot_design), a ladder's gaps shrinking with compute (power.ladder_gaps).
"""

import os
import sys

if __package__ in (None, ""):  # run by its path: its imports live at the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from plumbing import common  # noqa: E402 (from the repository root, the path above)

common.set_omp_env()  # before torch loads: idle OpenMP threads sleep instead of spinning

import argparse
import json
import math

import torch

from plumbing.checkpoint import atomic_write
from plumbing.common import cli, open_checked
from configurator import UserError, folder_problem
from plumbing.memory import GB, estimate_size
from model import GPT, model_config
from optim import OPTIMIZERS, param_groups
from research.ablation import (claim_rows, is_exploratory, ladder_gaps_of, load_ablation, plan, power_alpha, power_rows,
                               powered_rows, row_gaps, run_config, setting_table_seeds, table_seeds, tuning_setting)
from research.power import cheapest_seeds, pilot_design
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
        with open_checked(path, links=True) as f:  # a FIFO or a device: one line, never a wait
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
           f"scale_lr by their own, shown as `scales`; and each one's weight decay per step at its peak LR. "
           f"FLOPs: the non-causal count (6 N + the whole T x T "
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
    totals, runs, run_flops = {}, plan(spec, "runs"), {}
    for run in runs:
        cfg = run["config"]
        flops = per_token[(run["setting"], run["variant"])] * cfg["max_iters"] * cfg["batch_size"] * \
            cfg["block_size"] * cfg["gradient_accumulation_steps"]
        tpp = setting_tpp(run["setting"])
        totals[tpp] = totals.get(tpp, 0) + hours(flops)
        run_flops.setdefault(tpp, []).append(flops)
    out += ["", f"Every run the file plans ({len(runs)}, LR sweeps on tuning seeds included): "
            + "; ".join(f"{label}: {h:,.0f} GPU-hours" for label, h in totals.items())
            + f"; in all {sum(totals.values()):,.0f} GPU-hours (training FLOPs only; evaluation adds a few %).", ""]
    seed_flops = {s: sum(per_token[(s, v)] for v in spec["variants"]) * r_tokens[s] for s in spec["settings"]}
    planned_n = {s: len(setting_table_seeds(spec, s)) for s in spec["settings"]}  # a pilot's: its k
    done, gpus = sum(sum(f) for f in run_flops.values()), spec["slurm"].get("gpus_per_node", 8)

    def stage(setting, n):  # (runs, FLOPs) of every planned run with `setting` at n table seeds
        return len(runs) + (n - planned_n[setting]) * len(spec["variants"]), done + (n - planned_n[setting]) * seed_flops[setting]

    designs = pilot_designs(spec) if spec["power"].get("pilot") else {}
    stages = [(f"{label} runs" if len(run_flops) > 1 else "every planned run", len(f), sum(f))
              for label, f in run_flops.items()]
    for setting, d in designs.items():  # a pilot: its further seeds, expected and at the cap
        stages = [("through the pilot", len(runs), done)] + [
            (f"`{setting}` at {label} {n:.3g} seeds", *stage(setting, n))
            for label, n in (("the expected", d["low"]["seeds"]), ("its cap of", d["cap"]))]
    per_seed = {s: hours(f) for s, f in seed_flops.items()}
    cost = lambda setting, n: node_hours(*stage(setting, n)[::-1], gpus, peak_tflops, mfu)  # noqa: E731
    return "\n".join(out + node_lines(spec, stages, peak_tflops)
                     + power_lines(spec, per_seed, sum(totals.values()), designs, cost))


def fmt_hours(h):
    """GPU-hours as the table shows them: whole hours from 10, two digits below."""
    return f"{h:,.0f}" if h >= 10 else f"{h:.2g}"


# What a run costs on the node beyond its training FLOPs, in minutes: start-up (processes, NCCL's
# rendezvous: under a minute), torch.compile's first steps (1-3 minutes at 0.12B, more for the larger
# rungs and MoE's recompiles), the first reads of the token files, and the evaluations and checkpoints
# (eval_iters=100 micro-batches every 250 steps: about 1% of a 0.12B run's FLOPs, about a minute).
# Assumed, not measured on a node yet; runs on one node go one after another, so each pays it.
RUN_OVERHEAD_MIN = 5
NODE_MFUS = (0.3, 0.4, 0.5)  # the MFUs the node's hours are stated at: 40% assumed, +-10 points
NIGHT_HOURS = 12  # "overnight" on a node: an evening's submission to the next morning's look
NOISIER = (1.2, 1.4)  # a pilot design is also simulated at these multiples of its assumed SD (an extrapolation)


def node_hours(flops, runs, gpus, peak_tflops, mfu):
    """(GPU-hours, wall-clock hours on one node of `gpus` GPUs) of `runs` runs of `flops` training FLOPs
    in all, run one after another, each on every GPU of the node: FLOPs over (peak x MFU), plus
    RUN_OVERHEAD_MIN a run."""
    gpu_hours = flops / (peak_tflops * 1e12 * mfu) / 3600
    return gpu_hours, gpu_hours / gpus + runs * RUN_OVERHEAD_MIN / 60


def node_lines(spec, stages, peak_tflops):
    """Markdown: each stage's GPU-hours and hours on one node (node_hours; the file's slurm
    gpus_per_node, else 8) at each of NODE_MFUS. stages: [(label, runs, training FLOPs)]."""
    gpus = spec["slurm"].get("gpus_per_node", 8)
    out = [f"On one node of {gpus} GPUs, runs one after another, each with {RUN_OVERHEAD_MIN} minutes of start-up, "
           f"compilation and evaluation (assumed): GPU-hours and hours on the node at MFU "
           f"{' / '.join(f'{m:.0%}' for m in NODE_MFUS)}:", ""]
    for label, runs, flops in stages:
        h = [node_hours(flops, runs, gpus, peak_tflops, m) for m in NODE_MFUS]
        out.append(f"- {label} ({runs:,.3g} runs): {' / '.join(fmt_hours(g) for g, _ in h)} GPU-hours, "
                   f"{' / '.join(f'{w:,.1f}' for _, w in h)} hours")
    return out + [""]


def claim_directions(spec):
    """[(variant, reference, direction)] of the file's claim rows (ablation.claim_rows, with the claim's
    direction: 'lower' or 'higher')."""
    return [(v, r, spec["expected"].get(v) if r == list(spec["variants"])[0] else
             next(d for a, b, d in spec["comparisons"] if (a, b) == (v, r))) for v, r in claim_rows(spec)]


def pilot_designs(spec):
    """{setting: {case: power.pilot_design result}} of a pilot file's design at its assumed SD, one
    per distinct cap of seeds: "low" (every row at its low gap, row_gaps), "high" (at its high
    gap), "none" (no effect anywhere), "fixed" (no effect, a fixed design of the seeds the formula
    gives the powered rows at the assumed SD; its "n"), "noisier" (as "low" at each NOISIER multiple
    of the assumed SD); and "cap", the setting's most seeds."""
    p, rows = spec["power"], claim_directions(spec)
    alpha, names = power_alpha(spec), power_rows(spec)
    rule_gap = min(row_gaps(spec, r)[0] for r in powered_rows(spec))
    out, done = {}, {}
    for setting in spec["settings"]:
        cap = len(table_seeds(spec)[:spec["setting_seeds"].get(setting, len(table_seeds(spec)))])
        if cap not in done:
            run = lambda gaps, pilot, most: pilot_design(rows, gaps, p["sd"], alpha, p["power"], pilot, most,  # noqa: E731
                                                         rule_gap)
            fixed = max(2, min(cap, seeds_for_power(rule_gap, p["sd"], alpha, p["power"], most=cap) or cap))
            low = [row_gaps(spec, r)[0] for r in names]
            done[cap] = {"low": run(low, p["pilot"], cap), "high": run([row_gaps(spec, r)[1] for r in names], p["pilot"], cap),
                         "none": run([0.0] * len(rows), p["pilot"], cap), "fixed": run([0.0] * len(rows), 0, fixed),
                         "noisier": [pilot_design(rows, low, p["sd"] * k, alpha, p["power"], p["pilot"], cap, rule_gap)
                                     for k in NOISIER]}
            done[cap]["fixed"]["n"], done[cap]["cap"] = fixed, cap
        out[setting] = done[cap]
    return out


def power_lines(spec, per_seed, planned_hours, designs, cost):
    """Markdown: the file's registered power analysis (ablation.py's `power`): per row the gap it
    must detect, what the planned seeds give it by formula, and with a pilot the design simulated
    (pilot_designs) and what each further seed costs; a ladder's rows by ladder_lines. per_seed:
    {setting: GPU-hours of one more table seed of every variant}; planned_hours: the plan's total;
    designs: pilot_designs' ({} without a pilot); cost(setting, n): node_hours of the plan with n
    table seeds in that setting, at the plan's MFU."""
    p = spec["power"]
    if not p:
        return []
    alpha, rows = power_alpha(spec), len(spec["ladders"]) or len(claim_rows(spec))
    gap_text = lambda row: " to ".join(f"{g:g}" for g in dict.fromkeys(row_gaps(spec, row)))  # noqa: E731
    out = [f"Power analysis (registered in the file): paired SD {p['sd']:g} assumed, level {alpha:.3g} (0.05 over its "
           f"{rows} {'ladders' if spec['ladders'] else 'claim rows'}: BH's strictest threshold), power {p['power']:.0%}; "
           + (ladder_head(spec) if spec["ladders"] else "the gap each row must detect: " + "; ".join(
               f"`{row}` {gap_text(row)}" + (" (exploratory: a lead at most)" if is_exploratory(spec, row) else "")
               for row in power_rows(spec))) + ".", ""]
    if spec["ladders"]:
        return out + ladder_lines(spec, per_seed, alpha) + [""]
    for setting in spec["settings"]:
        d = designs.get(setting)
        n = d["fixed"]["n"] if d else len(setting_table_seeds(spec, setting))
        formula = "; ".join(row_formula(spec, row, n, alpha, lambda k: cost(setting, k)) for row in power_rows(spec))
        if not d:
            out.append(f"- `{setting}`: {n} planned seeds, by formula at the assumed SD: {formula}")
            continue
        out += [f"- `{setting}`: a pilot of {p['pilot']} seeds (in the plan above: {planned_hours:,.0f} GPU-hours "
                f"through it); the largest paired SD of the claim rows over it then sets the seeds, {p['pilot']} to "
                f"{d['cap']}, at the smallest gap of the rows not exploratory, at {per_seed[setting]:,.1f} GPU-hours "
                f"each further seed ({cost(setting, d['cap'])[0]:,.0f} GPU-hours at the cap)",
                f"  - by formula at the assumed SD the rule plans {n} seeds: {formula}",
                "  - " + pilot_text(spec, d, cost(setting, d["low"]["seeds"])[0])]
    return out + [""]


def row_formula(spec, row, n, alpha, cost):
    """One row's power by formula (stats.paired_power at the assumed SD) over n seeds at each of its
    gaps; where that is below the registered power, the seeds a fixed design needs for it and what
    they cost (cost(k): node_hours of the plan at k seeds), with whether the node does it in a night."""
    p, parts = spec["power"], []
    for gap in dict.fromkeys(row_gaps(spec, row)):
        got, need = paired_power(gap, p["sd"], n, alpha), seeds_for_power(gap, p["sd"], alpha, p["power"], most=100)
        text = f"power {got:.2f} at {gap:g}"
        if got < p["power"]:
            gpu_h, wall = cost(need) if need else (None, None)
            text += (f" ({need} seeds for {p['power']:.0%}: {gpu_h:,.0f} GPU-hours, {wall:,.1f} hours on the node, "
                     f"{'within' if wall <= NIGHT_HOURS else 'more than'} a night of {NIGHT_HOURS})" if need else
                     f" (more than 100 seeds for {p['power']:.0%})")
        parts.append(text)
    return f"`{row}` " + ", ".join(parts)


def pilot_text(spec, d, expected_hours):
    """The simulated pilot design in words (pilot_designs' cases of one setting); expected_hours: the
    plan's GPU-hours at the expected seeds."""
    rows = power_rows(spec)
    low, high, none, fixed = d["low"], d["high"], d["none"], d["fixed"]
    share = ", ".join(f"{n}: {s:.0%}" for n, s in low["seeds_share"].items())
    found = "; ".join(f"`{row}` {low['findings'][i]:.2f} at {row_gaps(spec, row)[0]:g}" + (
        f", {high['findings'][i]:.2f} at {row_gaps(spec, row)[1]:g}" if row_gaps(spec, row)[1] > row_gaps(spec, row)[0]
        else "") for i, row in enumerate(rows))
    return (f"simulated ({low['sims']:,} designs at the assumed SD, numpy seed 0, Monte Carlo SE at most "
            f"{0.5 / math.sqrt(low['sims']):.4f}; each arm's final loss with its own noise, so two rows that share an "
            f"arm correlate 0.5): expected seeds {low['seeds']:.2f} ({share}), "
            f"{expected_hours:,.0f} GPU-hours expected; each row a finding (BH over the claim rows, on the claimed "
            f"side) in: {found}; with no effect anywhere, in {' and '.join(f'{x:.4f}' for x in none['findings'])} "
            f"of designs (a fixed design of {fixed['n']} seeds: {' and '.join(f'{x:.4f}' for x in fixed['findings'])}; "
            f"the level's own claimed side {power_alpha(spec) / 2:.4f}); " + noisier_text(spec, d["noisier"]))


def noisier_text(spec, designs):
    """The pilot design at NOISIER multiples of the assumed SD in words (its powered rows' findings)."""
    sds = " and ".join(f"{spec['power']['sd'] * k:g}" for k in NOISIER)
    seeds = " and ".join(f"{x['seeds']:.2f}" for x in designs)
    found = "; ".join(f"`{row}` a finding in " + " and ".join(f"{x['findings'][i]:.2f}" for x in designs)
                      for i, row in enumerate(power_rows(spec)) if not is_exploratory(spec, row))
    return f"at {' and '.join(f'{k:g}x' for k in NOISIER)} the assumed SD ({sds}): expected seeds {seeds}, {found}"


def ladder_head(spec):
    """The ladder's registered gaps in words (the head of power_lines)."""
    p = spec["power"]
    explored = [name for name in spec["ladders"] if is_exploratory(spec, name)]
    shape = (f"shrinking with compute as a constant multiplier's does on L(C) = E + A C^-{p['exponent']:g} "
             f"(research/power.py ladder_gaps)" if p.get("exponent") else "the same at every rung")
    return (f"a gap of {p['gap']:g} at each ladder's smallest rung, {shape}"
            + (f"; exploratory (a lead at most): {'every ladder' if len(explored) == len(spec['ladders']) else ', '.join(explored)}"
               if explored else ""))


def ladder_lines(spec, per_seed, alpha):
    """One line per ladder: its seeds and gaps per rung, stats.ladder_power at them, at a constant gap
    (what the gap's shrinking costs), and the seeds that would reach the registered power
    (power.cheapest_seeds, per_seed the GPU-hours of a seed at each rung)."""
    p, out = spec["power"], []
    for name, ladder in spec["ladders"].items():
        seeds, gaps = [len(setting_table_seeds(spec, s)) for s in ladder], ladder_gaps_of(spec, name)
        got = ladder_power(gaps, p["sd"], seeds, alpha)
        text = (f"- ladder `{name}`: seeds per rung {seeds}, gaps {', '.join(f'{g:.2g}' for g in gaps)}: power {got:.2f}"
                + (" (exploratory)" if is_exploratory(spec, name) else ""))
        if p.get("exponent"):
            text += f"; at {p['gap']:g} at every rung it would be {ladder_power(p['gap'], p['sd'], seeds, alpha):.2f}"
        if got < p["power"]:
            more = cheapest_seeds(gaps, p["sd"], seeds, [per_seed[s] for s in ladder], alpha, p["power"])
            text += (f"; {p['power']:.0%} needs {more[0]} seeds per rung, {more[1]:,.0f} GPU-hours more (seeds added "
                     f"where they buy the most power per GPU-hour)" if more else f"; {p['power']:.0%} is out of reach")
        out.append(text)
    return out


def lr_text(cfg):
    """The peak LRs a run config gives before the tuned multiplier scales them: AdamW's (the embedding's
    too), Muon's, and the scale vectors' (scale_lr; 0: AdamW's); then the decay per step at those peaks
    (torch's decoupled decay multiplies a parameter by 1 - lr x weight_decay): the hidden matrices'
    (by the optimizer that steps them) and the input-role scales' under IWD."""
    scale_lr = cfg.get("scale_lr") or cfg["learning_rate"]
    matrix_lr = cfg["muon_lr"] if cfg["optimizer"] == "muon" else cfg["learning_rate"]
    return (f"AdamW {cfg['learning_rate']:.3g}" + (f", Muon {cfg['muon_lr']:.3g}" if cfg["optimizer"] == "muon" else "")
            + f", scales {scale_lr:.3g}; decay per step: matrices {matrix_lr * cfg['weight_decay']:.3g}, "
            f"input scales (IWD) {scale_lr * cfg['weight_decay']:.3g}")


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
