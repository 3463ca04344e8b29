# C8 at three widths: does the unified strategy's gap open up with size, as the
# paper's effects (0.12B-2B) suggest? Same depth, tokens and head width (32);
# width 128 is c8_unified's AdamW setting (its runs are shared).
claim = "C8 vs width: the unified strategy's gain over the baseline at widths 64, 128, 256"
base = "configs/ablation_base.py"
variants = {
    "baseline": {},
    "unified": {"branch_scales": True, "attn_placement": "dual", "mlp_placement": "dual_norm",
                "reparam": "or", "scale_wd": "iwd"},
}
expected = {"unified": "lower"}
_adamw = {"optimizer": "adamw", "lr_schedule": "cosine"}
settings = {
    "adamw_cosine_d64": {**_adamw, "n_embd": 64, "n_head": 2},
    "adamw_cosine": _adamw,
    "adamw_cosine_d256": {**_adamw, "n_embd": 256, "n_head": 8},
}
seeds = [1, 2, 3]
