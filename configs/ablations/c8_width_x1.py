# C8 at three widths, both variants at the base LR (x1), seeds 1-4: the width trend without
# an LR choice. c8_width picks each variant's LR from seed 1's sweep; at width 128 that choice
# (unified at x0.5) did not carry over to seeds 2-4, so this file is its control: no selection,
# every seed in the table. Width 128's runs are c8_unified's, the x1 seed-1 runs c8_width's.
#     python -m research.sweep configs/ablations/c8_width_x1.py --parallel=2
control = "c8_width's LR choice: the same comparison at the base LR, no LR chosen (both arms share it, untuned)"
claim = "C8 vs width at one LR: the unified strategy's gain over the baseline at widths 64, 128, 256"
base = "configs/ablation_base.py"
variants = {
    "baseline": {},
    "unified_dp_all": {"branch_scales": True, "attn_placement": "dual", "mlp_placement": "dual_norm",
                       "dual_sites": "all", "reparam": "or", "scale_wd": "iwd"},
}
expected = {"unified_dp_all": "lower"}
_adamw = {"optimizer": "adamw", "lr_schedule": "cosine"}
settings = {
    "adamw_cosine_d64": {**_adamw, "n_embd": 64, "n_head": 2},
    "adamw_cosine": _adamw,
    "adamw_cosine_d256": {**_adamw, "n_embd": 256, "n_head": 8},
}
seeds = [1, 2, 3, 4]
