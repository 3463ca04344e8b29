# C7. Theorem 3.2 reads OR as about d-fold LR on the magnitude; under Adam the
# magnitude scalar moves about lr per step, as a plain vector's mean can. So OR is
# also run with its magnitude's LR raised on its own (magnitude_lr_mult, the
# magnitude_input / magnitude_output optimizer groups); the LR sweep scales every LR.
claim = "C7: magnitude-direction reparameterization of the scale vectors (OR, ER) helps"
base = "configs/ablation_base.py"
variants = {
    "baseline": {},
    "or": {"reparam": "or"},
    "or_mag4": {"reparam": "or", "magnitude_lr_mult": 4.0},
    "or_mag16": {"reparam": "or", "magnitude_lr_mult": 16.0},
    "er": {"reparam": "er"},
}
expected = {"or": "lower", "or_mag4": "lower", "or_mag16": "lower", "er": "lower"}
settings = {"adamw_cosine": {"optimizer": "adamw", "lr_schedule": "cosine"}}
seeds = [1, 2, 3]
lr_multipliers = [0.5, 1.0, 2.0]  # a loss here may be an LR mismatch: compare each variant at its best LR
