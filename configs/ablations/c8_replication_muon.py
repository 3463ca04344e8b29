# Pre-registered: the regime study's arms under Muon + WSD (the paper's 0.5B headline setting)
# at 20 characters per parameter, width 64 (committed before its first run). Muon for the
# hidden matrices (muon_lr), AdamW for the rest (learning_rate); all LR keys scaled together.
# LRs: per arm, the multiplier with the lowest mean final val loss over tuning seeds 101, 102
# (never in a table), on a grid whose best must be interior: a best at an edge makes the
# table runs wait, and the grid is then extended by a factor of 2 on that side before any
# table run. Table seeds 7-12, all planned.
# Rows: unified - baseline (lower), unified - norm_only (lower; the scale vectors' share).
# Replicated: the 95% t interval over seeds 7-12 wholly on the claimed side and p_BH < 0.05
# over every claim row (a finding); excluding 0 only uncorrected is a lead.
claim = "C8 under Muon + WSD at 20 characters per parameter: the paper's unified beats the baseline at width 64"
base = "configs/ablation_base.py"
variants = {
    "baseline": {},
    "unified": {"branch_scales": True, "mlp_placement": "dual_norm", "reparam": "or", "scale_wd": "iwd"},
    "norm_only": {"mlp_placement": "in_norm"},
}
expected = {"unified": "lower"}
comparisons = [("unified", "norm_only", "lower")]
settings = {"muon_wsd_tpp20": {"optimizer": "muon", "lr_schedule": "wsd", "n_embd": 64, "n_head": 2,
                               "max_iters": 1083, "warmup_iters": 108, "eval_interval": 200}}
seeds = [7, 8, 9, 10, 11, 12]
tuning_seeds = [101, 102]
lr_multipliers = [0.25, 0.5, 1.0, 2.0, 4.0]
tune_lr = True
