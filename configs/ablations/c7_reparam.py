claim = "C7: magnitude-direction reparameterization of the scale vectors (OR, ER) helps"
base = "configs/ablation_base.py"
variants = {
    "baseline": {},
    "or": {"reparam": "or"},
    "er": {"reparam": "er"},
}
expected = {"or": "lower", "er": "lower"}
settings = {"adamw_cosine": {"optimizer": "adamw", "lr_schedule": "cosine"}}
seeds = [1, 2, 3]
lr_multipliers = [0.5, 1.0, 2.0]  # a loss here may be an LR mismatch: compare each variant at its best LR
