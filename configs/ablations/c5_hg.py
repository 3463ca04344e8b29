claim = "C5: branch-specific scale vectors (HG: gamma_q, gamma_k, gamma_v, gamma_gate, gamma_up) help"
base = "configs/ablation_base.py"
variants = {
    "baseline": {},
    "hg": {"branch_scales": True},
}
expected = {"hg": "lower"}
settings = {"adamw_cosine": {"optimizer": "adamw", "lr_schedule": "cosine"}}
seeds = [1, 2, 3]
