# Where C8's gain comes from. DNP changes more than scale vectors: it normalizes gate
# and up over d_ff (not foldable; it changes the function at init). The control
# norm_only has that normalization without learnable scales on gate and up
# (mlp_placement="in_norm": gate, up = normalize(W x_hat) over d_ff, the shared
# pre-MLP scale kept), so
#   norm_only - baseline   what the normalization alone does
#   dnp - norm_only        the share of DNP's scale vectors (the claim: lower)
#   unified - dnp          what HG + DP attention + OR + IWD add on top of DNP
#   unified - norm_only    every scale-vector change of unified over the normalization alone
#                          (no claim: it answers "does the normalization buy as much?")
# The comparisons table reports the last three; the main table each vs baseline.
# Runs shared with c8_unified.py (baseline, unified) and c6_placement.py (dnp).
claim = "C8 taken apart: DNP's normalization alone (norm_only), DNP and unified, each vs baseline"
base = "configs/ablation_base.py"
variants = {
    "baseline": {},
    "norm_only": {"mlp_placement": "in_norm"},
    "dnp_all": {"attn_placement": "in", "mlp_placement": "dual_norm", "dual_sites": "all"},
    "unified_dp_all": {"branch_scales": True, "attn_placement": "dual", "mlp_placement": "dual_norm",
                       "dual_sites": "all", "reparam": "or", "scale_wd": "iwd"},
}
expected = {"dnp_all": "lower", "unified_dp_all": "lower"}  # norm_only is a control: no claim of its own
comparisons = [("dnp_all", "norm_only", "lower"), ("unified_dp_all", "dnp_all", "lower"),
               ("unified_dp_all", "norm_only", None)]
settings = {  # AdamW first: sweep.py runs the settings in this order
    "adamw_cosine": {"optimizer": "adamw", "lr_schedule": "cosine"},
    "muon_wsd": {"optimizer": "muon", "lr_schedule": "wsd"},
}
seeds = [1, 2, 3, 4, 5]
