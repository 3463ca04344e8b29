# C8 headline: unified vs baseline, 5 seeds per setting (DESIGN section 9: at least
# 5 for the headline comparisons). The LR sweep is c8_unified_lr.py.
claim = "C8: the unified strategy (HG + DP attention + DNP MLP + OR + IWD) beats the baseline"
base = "configs/ablation_base.py"
variants = {
    "baseline": {},
    "unified": {"branch_scales": True, "attn_placement": "dual", "mlp_placement": "dual_norm",
                "reparam": "or", "scale_wd": "iwd"},
}
expected = {"unified": "lower"}
settings = {
    "adamw_cosine": {"optimizer": "adamw", "lr_schedule": "cosine"},
    "muon_wsd": {"optimizer": "muon", "lr_schedule": "wsd"},
}
seeds = [1, 2, 3, 4, 5]
