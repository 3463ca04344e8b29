# c8_width_x1's width-64 row, each arm at its own tuned LR. c8_width_x1 ran both arms at the
# base LR (x1, untuned), so its rows say something about that LR, not about the variants.
# Here each arm's LR is chosen on two tuning seeds of its own (101, 102, never in a table) by
# their mean final val loss on the template's grid (x0.5, x1, x2; a best at an edge makes the
# table runs wait); seeds 1-4 then run at it (at x1 they are c8_width_x1's runs).
# Width 64 only: its row was the one that survived the correction; widths 128 and 256 stay
# c8_width_x1's untuned rows (256's runs cost about 8 minutes each on one CPU thread).
#     python -m research.sweep configs/ablations/c8_width_x1_tuned.py --parallel=2
claim = "C8 at width 64, each arm at its tuned LR: the earlier unified (DP on attention, scales around W_o and W_down) beats the baseline"
base = "configs/ablation_base.py"
variants = {
    "baseline": {},
    "unified_dp_all": {"branch_scales": True, "attn_placement": "dual", "mlp_placement": "dual_norm",
                       "dual_sites": "all", "reparam": "or", "scale_wd": "iwd"},
}
expected = {"unified_dp_all": "lower"}
settings = {"adamw_cosine_d64": {"optimizer": "adamw", "lr_schedule": "cosine", "n_embd": 64, "n_head": 2}}
seeds = [1, 2, 3, 4]
tuning_seeds = [101, 102]
lr_multipliers = [0.5, 1.0, 2.0, 4.0, 8.0]  # x4, x8 added before any table run: on seeds 101 and 102 both arms' best was x2, the grid's edge
tune_lr = True
