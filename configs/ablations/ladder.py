# The paper's size ladder on GPUs: baseline vs the paper's unified at 4 dense sizes (0.12B,
# 0.5B, 1B, 2B) and 3 MoE sizes of the same active parameters, under AdamW + cosine and Muon
# + WSD, each at about 100 tokens per parameter (the paper's regime) and at 20 (a cheaper
# first pass). Not for a CPU: `python -m research.ladder configs/ablations/ladder.py` prints
# every rung's parameters, tokens, iterations, FineWeb subset, FLOPs, GPU-hours and memory
# per GPU; `python -m research.sweep configs/ablations/ladder.py --settings='*_tpp20' --slurm
# ...` runs the first pass, `--settings='*_tpp100'` the ladder; plot.py then fits each ladder
# (the `ladders` below) for the compute multiplier.
# Shapes: ours (the paper does not give its own), Llama-style: head width 64 (d012, d05) or
# 128 (d1, d2), SwiGLU at 8/3 n_embd, GPT-2 BPE (50,257 tokens), tied embeddings, context
# 2048. MoE rungs: the dense rung's layers and width, 8 experts of half its d_ff, top-2, so
# a token uses the dense rung's parameters (active) out of 2.4-2.8x as many.
# Memory: research/ladder.py's estimate per GPU under DDP is at most 58 GB of 80 for every rung
# but m1 (68 GB, 57 of them the weights, gradients and AdamW state of its 2.8B parameters):
# should m1's first steps run out of memory on 80 GB GPUs (MoE activations can exceed the
# estimate), its AdamW settings take --fsdp=True and its Muon settings a larger GPU.
# Tokens per parameter count the parameters a token uses (model.GPT.num_active_params: all
# of a dense tied model's; for MoE the active ones).
# Learning rates: tuned on seeds 101 and 102 (never in a table) at the smallest rung and 20
# tokens per parameter, per optimizer and family (dense, MoE), on a grid whose best must be
# interior (an edge best makes the table runs wait: extend lr_multipliers); the chosen
# multiplier then serves every rung of that optimizer and family through the transfer rule:
# AdamW's LR (learning_rate, also Muon's AdamW part) scales as 1 / n_embd from 6e-4 at width
# 768 (close to published ladders: Pythia's 6e-4 at 768, 3e-4 at 2048, 1.6e-4 at 2560), with
# min_lr a tenth of it; Muon's LR (muon_lr) stays 0.02 at every width (its update is scaled
# to the matrix's shape). The scale vectors and OR/ER magnitudes keep their own LR, scale_lr:
# 6e-4, the smallest rung's, unchanged with width under both optimizers (as muP treats
# vector-like parameters), so size and the scale vectors' LR do not change together; the tuned
# multiplier scales it with the others. Two rungs tune (the smallest and 0.5B, at 20 tokens per
# parameter, per optimizer and family) so the transfer from 0.12B to 0.5B is checked by data, and
# the smallest rung tunes at 100 tokens per parameter too (the 20 -> 100 transfer): each
# setting takes the choice of the largest tuned rung at or below its size, at its own budget
# where that rung tuned at it, else at 20.
# The embedding follows learning_rate (1 / width): it is tied, so it is also the LM head, whose
# muP rule under Adam is 1 / width (an untied input embedding would keep a width-free LR), and
# published ladders train it at the model's LR. Weight decay stays 0.1 at every rung, decoupled
# as torch's AdamW and Muon apply it (a step multiplies a decayed parameter by 1 - lr x
# weight_decay): the matrices' decay per step is learning_rate x 0.1 under AdamW, 1 / width like
# their LR (6e-5 at d012, 1.8e-5 at d2), and muon_lr x 0.1 = 2e-3 at every width under Muon; the
# input-role scales' under IWD is scale_lr x 0.1 = 6e-5 at every width. So under AdamW the
# matrices' decay per step falls against the scales' as 768 / n_embd (as their LRs do: each
# group's decay stays a fixed 0.1 of its own LR, the relation the ablation's tuned multiplier
# scales alike); under Muon both stay fixed. research.ladder prints each rung's. Whether the
# scale vectors' fixed LR keeps their best LR in place across widths is tested in miniature by
# c8_scale_lr_transfer.py.
# Seeds and power: each ladder's compute multiplier comes with a 95% t interval over seeds
# (research/stats.py ladder_multiplier: the seed spreads pooled over the rungs that have several,
# since a costly rung runs once) and a p value; its strength words are the summary's, BH over the
# file's 8 ladders. Power analysis (stats.ladder_power, at level 0.05 / 8 and 80% power; the plan
# prints it per ladder): paired SD 0.005 nats per token at every rung, c8_d012.py's at 0.12B (seed
# spreads likely shrink with size, so the larger rungs' is cautious), and a constant multiplier of
# 1.22. On the reference's own curve L(C) = E + A C^-a, a constant multiplier m moves the loss at
# rung r by A C_r^-a (1 - m^-a): the gap shrinks with compute as C^-a (research/power.py
# ladder_gaps). No GPU record exists yet, so a comes from a published law at the ladder's own
# rungs: Chinchilla's L(N, D) = 1.69 + 406.4 N^-0.34 + 410.7 D^-0.28 (Hoffmann et al. 2022,
# approach 3) at each rung's active parameters and tokens, fitted by stats.fit_power_law against
# the rungs' FLOPs, gives a = 0.154 and 0.158 (dense, 20 and 100 tokens per parameter), 0.141 and
# 0.144 (MoE by its active parameters, which a dense law does not know): 0.15 registered
# (`exponent`). The gap at the smallest rung is the design's 0.009 (c8_d012.py's derivation at
# 0.12B and 20 tokens per parameter; by Chinchilla's law the 100 ladders' would be 0.8x that,
# power 0.11 dense, 0.17 MoE). So the gaps are 0.009, 0.0058, 0.0049, 0.0040 (d012 to d2), and
# with the ladder's estimator weighting rungs equally, the one-seed large rungs, whose gaps are the
# smallest, carry most of the variance: the planned seeds (dense 8, 3, 1, 1; MoE 10, 3, 1) give
# power 0.20 (dense) and 0.29 (MoE; 0.18-0.22 and 0.26-0.32 at a = 0.16-0.14), not the 0.81 and 0.84
# a gap of 0.009 at every rung gave. tests/test_power.py checks the formula against the estimator
# itself on simulated ladders. Every ladder is therefore exploratory (`exploratory`: a lead at
# most): 80% would take 16, 6, 4, 3 seeds (dense) and 12, 5, 3 (MoE), about 2,350 and 530 GPU-hours
# more at 20 tokens per parameter, 5x that at 100 (the plan prints each). A paired SD that shrinks
# with size would not change this for the registered estimator: were it to shrink as
# parameters^-0.31, the CPU records' slope (c8_d012.py; a long extrapolation), the formula with each
# rung's SD known would give power 0.85 dense, 0.87 MoE, but ladder_multiplier pools one SD over the
# rungs that have seeds (d012's 7 df and d05's 2) and applies it to the one-seed rungs, so it never
# credits their smaller spread: simulated with SDs shrinking at that rate (tests/test_power.py), its
# power stays about the plan's 0.20 and 0.29. An estimator weighting each rung by its own SD would need
# seeds at every rung; this registration does not lean on the slope.
claim = "C8 across sizes: the paper's unified is more compute-efficient than the baseline (0.12B-2B, dense and MoE)"
base = "configs/baseline_124m.py"
variants = {
    "baseline": {},
    "unified": {"branch_scales": True, "mlp_placement": "dual_norm", "reparam": "or", "scale_wd": "iwd"},
}
expected = {"unified": "lower"}

_BLOCK = 2048
# name: (shape, parameters a token uses (checked against the model by tests/test_ladder.py),
#        sequences per iteration, sequences per micro-step (a GPU's micro-batch; see Memory above))
_RUNGS = {
    "d012": ({"n_layer": 12, "n_embd": 768, "n_head": 12}, 123_587_328, 256, 16),
    "d05": ({"n_layer": 24, "n_embd": 1280, "n_head": 20}, 540_243_200, 512, 8),
    "d1": ({"n_layer": 18, "n_embd": 2048, "n_head": 16}, 1_013_786_624, 1024, 4),
    "d2": ({"n_layer": 24, "n_embd": 2560, "n_head": 20}, 2_020_272_640, 1024, 2),
    "m012": ({"n_layer": 12, "n_embd": 768, "n_head": 12, "n_experts": 8, "top_k": 2, "expert_d_ff": 1024},
             123_661_056, 256, 8),
    "m05": ({"n_layer": 24, "n_embd": 1280, "n_head": 20, "n_experts": 8, "top_k": 2, "expert_d_ff": 1728},
            540_488_960, 512, 4),
    "m1": ({"n_layer": 18, "n_embd": 2048, "n_head": 16, "n_experts": 8, "top_k": 2, "expert_d_ff": 2752},
           1_014_081_536, 1024, 2),
}
_SCALE_LR = 6e-4  # the scale vectors' LR at every rung: the smallest rung's learning_rate
_OPTIMIZERS = {"adamw": {"optimizer": "adamw", "lr_schedule": "cosine"},
               "muon": {"optimizer": "muon", "lr_schedule": "wsd", "muon_lr": 0.02}}


def _setting(optimizer, rung, tpp):
    shape, active, sequences, micro = _RUNGS[rung]
    iters = round(tpp * active / (sequences * _BLOCK))
    lr = 6e-4 * 768 / shape["n_embd"]
    return {**_OPTIMIZERS[optimizer], **shape, "device": "cuda", "block_size": _BLOCK, "batch_size": micro,
            "gradient_accumulation_steps": sequences // micro, "max_iters": iters,
            "warmup_iters": max(250, iters // 100), "eval_interval": max(250, iters // 20),
            "learning_rate": lr, "min_lr": lr / 10, "scale_lr": _SCALE_LR,
            "compile": "n_experts" not in shape}  # MoE: recompiles


settings = {f"{o}_{r}_tpp{t}": _setting(o, r, t) for o in _OPTIMIZERS for t in (20, 100) for r in _RUNGS}
ladders = {f"{o} {family} {t} tokens/parameter": [f"{o}_{r}_tpp{t}" for r in _RUNGS if r[0] == family[0]]
           for o in _OPTIMIZERS for family in ("dense", "moe") for t in (20, 100)}
seeds = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
setting_seeds = {f"{o}_{r}_tpp{t}": n for o in _OPTIMIZERS for t in (20, 100)
                 for r, n in {"d012": 8, "d05": 3, "d1": 1, "d2": 1, "m012": 10, "m05": 3, "m1": 1}.items()}
power = {"sd": 0.005, "gap": 0.009, "power": 0.8, "exponent": 0.15, "exploratory": list(ladders)}
tuning_seeds = [101, 102]
lr_multipliers = [0.25, 0.5, 1.0, 2.0, 4.0]
tune_lr = True
_TUNED = {("d012", 20), ("d05", 20), ("d012", 100), ("m012", 20), ("m05", 20), ("m012", 100)}


def _tuner(optimizer, rung, tpp):
    """The setting whose LR sweep chooses this one's: the largest tuned rung of its family at or below
    its size, at its own budget where that rung tuned at it, else at 20 tokens per parameter."""
    family = [r for r in _RUNGS if r[0] == rung[0]]
    tuned = max((r for r in family[:family.index(rung) + 1] if (r, 20) in _TUNED), key=family.index)
    return f"{optimizer}_{tuned}_tpp{tpp if (tuned, tpp) in _TUNED else 20}"


tune_setting = {f"{o}_{r}_tpp{t}": _tuner(o, r, t) for o in _OPTIMIZERS for t in (20, 100) for r in _RUNGS}
slurm = {"gpus_per_node": 8}  # one node of 8 GPUs a run (--nodes=2 on the command line for more)
