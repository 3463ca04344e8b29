# Pre-registered: C6 under the paper's sites (committed before its first run). DP and DNP
# with dual_sites="prenorm" (extra scales only on the maps that read the normalized input:
# q, k, v; gate, up), beside the earlier reading (dual_sites="all": also around W_o and
# W_down), in the regime study's setting: width 64, AdamW + cosine, 20 characters per
# parameter (4.44M characters). norm_only (DNP's normalization over d_ff without scales) is
# DNP's control. LRs: per variant, the multiplier with the lowest mean final val loss over
# tuning seeds 101, 102 (never in a table) on a grid whose best must be interior (an edge
# best: the grid is extended by a factor of 2 on that side before any table run); the
# baseline's and norm_only's tuning runs are c8_regime's. Table seeds 7-12, all planned.
# Rows: dp, dnp, dp_all, dnp_all - baseline (lower); dnp - norm_only and dnp_all - norm_only
# (lower: DNP's scale vectors' own share). Replicated: the 95% t interval over seeds 7-12
# wholly on the claimed side and p_BH < 0.05 over every claim row (a finding); excluding 0
# only uncorrected is a lead.
claim = "C6 at the paper's sites: dual placements (DP, DNP) help, width 64, 20 characters per parameter"
base = "configs/ablation_base.py"
variants = {
    "baseline": {},
    "dp": {"attn_placement": "dual", "mlp_placement": "dual", "dual_sites": "prenorm"},
    "dnp": {"attn_placement": "in", "mlp_placement": "dual_norm", "dual_sites": "prenorm"},
    "dp_all": {"attn_placement": "dual", "mlp_placement": "dual", "dual_sites": "all"},
    "dnp_all": {"attn_placement": "in", "mlp_placement": "dual_norm", "dual_sites": "all"},
    "norm_only": {"mlp_placement": "in_norm"},
}
expected = {"dp": "lower", "dnp": "lower", "dp_all": "lower", "dnp_all": "lower"}
comparisons = [("dnp", "norm_only", "lower"), ("dnp_all", "norm_only", "lower")]
settings = {"tpp20": {"optimizer": "adamw", "lr_schedule": "cosine", "n_embd": 64, "n_head": 2,
                      "max_iters": 1083, "warmup_iters": 108, "eval_interval": 200}}
seeds = [7, 8, 9, 10, 11, 12]
tuning_seeds = [101, 102]
lr_multipliers = [1.0, 2.0, 4.0, 8.0]
tune_lr = True
