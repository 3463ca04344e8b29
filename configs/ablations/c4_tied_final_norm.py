# The role rule for the tied final-norm scale (norms.py, roles): with tied embeddings it
# cannot fold into the head without changing the embedding, so it is output-role and
# IWD leaves it undecayed. unified_dp_all_final decays it anyway (scale_wd="iwd_final", the
# behaviour before the rule); C4 says decay on an output-role scale hurts: "higher".
# unified_dp_all is the earlier definition of unified (DP on attention, dual_sites="all"); its runs are shared with c8_unified.py and c8_dnp_control.py.
claim = "C4 for the tied final-norm scale: decaying it (an output-role scale while tied) hurts"
base = "configs/ablation_base.py"
_unified = {"branch_scales": True, "attn_placement": "dual", "mlp_placement": "dual_norm", "dual_sites": "all",
            "reparam": "or"}
variants = {
    "unified_dp_all": {**_unified, "scale_wd": "iwd"},
    "unified_dp_all_final": {**_unified, "scale_wd": "iwd_final"},
}
expected = {"unified_dp_all_final": "higher"}
settings = {"adamw_cosine": {"optimizer": "adamw", "lr_schedule": "cosine"}}
seeds = [1, 2, 3, 4, 5]
