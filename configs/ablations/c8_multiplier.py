# C8's headline metric, the compute multiplier (the paper: 1.22-1.25x). The baseline
# trains at 0.5x, 1x, 1.5x and 2x the ablation's tokens, each a full schedule
# (max_iters, warmup_iters and eval_interval scaled together); plot.py fits its final
# loss L(D) = E + A D^-alpha per seed and reports, per seed and as a 95% t interval,
# the tokens the baseline needs to reach unified's (and norm_only's) final loss over
# the 1x tokens. norm_only (DNP's normalization over d_ff without its scales, see
# c8_dnp_control.py) shows how much of the multiplier the normalization alone buys.
# Cost per seed: 5 baseline-run units (0.5 + 1 + 1.5 + 2) + 2: about 30 minutes of one
# core per seed; the 1x runs are shared with c8_unified.py and c8_dnp_control.py.
claim = "C8, compute multiplier: tokens the baseline needs to match unified's (norm_only's) final loss"
base = "configs/ablation_base.py"
variants = {
    "baseline": {},
    "unified_dp_all": {"branch_scales": True, "attn_placement": "dual", "mlp_placement": "dual_norm",
                       "dual_sites": "all", "reparam": "or", "scale_wd": "iwd"},
    "norm_only": {"mlp_placement": "in_norm"},
}
expected = {"unified_dp_all": "lower"}
settings = {"adamw_cosine": {"optimizer": "adamw", "lr_schedule": "cosine"}}
seeds = [1, 2, 3, 4, 5]
iter_multipliers = {"baseline": [0.5, 1.0, 1.5, 2.0]}
