# C8's LR sweep, one seed: is unified's gain an LR mismatch? A choice of LR, not
# evidence (no verdict); its x1 runs are c8_unified's seed-1 runs.
claim = "C8, LR sweep: unified vs baseline at learning rates x0.5, x1, x2 (seed 1)"
base = "configs/ablation_base.py"
variants = {
    "baseline": {},
    "unified_dp_all": {"branch_scales": True, "attn_placement": "dual", "mlp_placement": "dual_norm",
                       "dual_sites": "all", "reparam": "or", "scale_wd": "iwd"},
}
settings = {
    "adamw_cosine": {"optimizer": "adamw", "lr_schedule": "cosine"},
    "muon_wsd": {"optimizer": "muon", "lr_schedule": "wsd"},
}
seeds = [1]
lr_multipliers = [0.5, 1.0, 2.0]
