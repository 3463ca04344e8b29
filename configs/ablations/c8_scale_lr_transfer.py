# Pre-registered (committed before its first record): does the ladder's LR transfer rule keep the
# scale vectors' best LR in place as width grows? configs/ablations/ladder.py scales AdamW's
# learning_rate (matrices, embedding, head) as 1 / width and holds scale_lr, the scale vectors' and
# OR magnitudes' LR, fixed at the smallest rung's learning_rate (muP treats vector-like parameters
# so). Here, in miniature, the same rule at widths 32 and 64: learning_rate 1.2e-2 and 6e-3 (1 / width
# from the base's 3e-3 at width 128), min_lr a tenth; scale_lr held at 1.2e-2 (width 32's
# learning_rate) times 0.25, 1 or 4, the only thing the variants change. Everything else is the
# paper's unified (HG, DNP, OR, IWD) on the CPU base, 600 steps (warmup 60, evals every 120) at
# both widths: equal steps and tokens, so the width contrast is one of size alone (w32 sees ~35
# characters per parameter, w64 ~11: the data per parameter differs with the size).
# Decay: weight_decay 0.1 (the base's) at both widths, on the matrices and (IWD) the input-role
# scales; AdamW's decay per step is lr x weight_decay, so the matrices' halves from w32 to w64 while
# the scales' stays: the ladder's relation, kept here on purpose (the rule under test, whole). The
# same product means the variants' scale_lr x0.25 / x4 also moves the input-role scales' decay per
# step by x0.25 / x4: each arm changes the scales' step and their decay together (said after the
# records; the design is as registered).
# The question (loss_question, a family of its own, BH over its 3 rows): per width, slr_x4 -
# slr_x0.25 of the final val loss, paired by seed: the tilt of the loss across the scale_lr grid,
# negative when a larger scale_lr is better; and w64's tilts minus w32's (Welch): a nonzero
# difference says the best scale_lr moved with width under the rule (negative: to larger values at
# the larger width). No direction is claimed. The table's rows against slr_x1 are descriptive
# (controls, no claim): where each width's best sits on the grid.
# Seeds 41-45, new, planned, none added. AdamW + cosine, compiled, one thread per run.
# Limits, said beside the answer: two widths a factor 2 apart, 600 steps, one base LR (the rule's),
# a 3-point grid a factor 4 apart; a tilt moves with the grid's curvature as well as its optimum.
claim = "The ladder's transfer rule (AdamW's LR as 1 / width, the scale vectors' LR fixed) keeps the scale vectors' best LR in place between widths 32 and 64"
base = "configs/ablation_base.py"
_UNIFIED = {"branch_scales": True, "mlp_placement": "dual_norm", "reparam": "or", "scale_wd": "iwd"}
_SCALE_LR = 1.2e-2  # width 32's learning_rate, held at width 64
variants = {
    "slr_x1": {**_UNIFIED, "scale_lr": _SCALE_LR},
    "slr_x0.25": {**_UNIFIED, "scale_lr": _SCALE_LR / 4},
    "slr_x4": {**_UNIFIED, "scale_lr": _SCALE_LR * 4},
}
_SCHEDULE = {"optimizer": "adamw", "lr_schedule": "cosine", "max_iters": 600, "warmup_iters": 60, "eval_interval": 120}
settings = {
    "w32": {**_SCHEDULE, "n_embd": 32, "n_head": 1, "learning_rate": 1.2e-2, "min_lr": 1.2e-3},
    "w64": {**_SCHEDULE, "n_embd": 64, "n_head": 2, "learning_rate": 6e-3, "min_lr": 6e-4},
}
seeds = [41, 42, 43, 44, 45]
loss_question = {"variant": "slr_x4", "reference": "slr_x0.25", "settings": ["w32", "w64"]}
