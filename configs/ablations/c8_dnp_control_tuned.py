# c8_dnp_control's Muon row "unified_dp_all - dnp_all", each arm at its own tuned LR.
# c8_dnp_control ran every arm at the base LRs (learning_rate 3e-3, muon_lr 0.02, untuned),
# so its rows say something about those LRs, not about the variants. Here each arm's LR
# (learning_rate, min_lr and muon_lr scaled together) is chosen on two tuning seeds of its
# own (101, 102, never in a table) by their mean final val loss on the template's grid (x0.5,
# x1, x2; a best at an edge makes the table runs wait); seeds 1-5 then run at it (at x1 they
# are c8_dnp_control's runs).
#     python -m research.sweep configs/ablations/c8_dnp_control_tuned.py --parallel=2
claim = "C8 under Muon + WSD, each arm at its tuned LR: what HG + DP attention + OR + IWD add on top of DNP (the earlier unified)"
base = "configs/ablation_base.py"
variants = {
    "dnp_all": {"attn_placement": "in", "mlp_placement": "dual_norm", "dual_sites": "all"},
    "unified_dp_all": {"branch_scales": True, "attn_placement": "dual", "mlp_placement": "dual_norm",
                       "dual_sites": "all", "reparam": "or", "scale_wd": "iwd"},
}
expected = {"unified_dp_all": "lower"}
settings = {"muon_wsd": {"optimizer": "muon", "lr_schedule": "wsd"}}
seeds = [1, 2, 3, 4, 5]
tuning_seeds = [101, 102]
lr_multipliers = [0.25, 0.5, 1.0, 2.0]  # x0.25 added before any table run: on seeds 101 and 102 both arms' best was x0.5, the grid's edge
tune_lr = True
