claim = "C1: removing every scale vector hurts pre-training"
base = "configs/ablation_base.py"
variants = {
    "baseline": {},
    "none": {"scale": "none"},
}
expected = {"none": "higher"}
settings = {
    "adamw_cosine": {"optimizer": "adamw", "lr_schedule": "cosine"},
    "muon_wsd": {"optimizer": "muon", "lr_schedule": "wsd"},
}
seeds = [1, 2, 3, 4, 5]  # a headline comparison: at least 5 (results/README.md)
lr_multipliers = [0.5, 1.0, 2.0]  # the paper re-tunes the LR for C1: compare each at its best
