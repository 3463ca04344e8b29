claim = "C4: weight decay helps input-role scales and hurts output-role scales (IWD), Gemma-style"
base = "configs/ablation_base.py"
_gemma = {"qk_norm": True, "output_norms": True}
variants = {
    "gemma_wd_none": {**_gemma, "scale_wd": "none"},
    "gemma_wd_iwd": {**_gemma, "scale_wd": "iwd"},
    "gemma_wd_all": {**_gemma, "scale_wd": "all"},
}
expected = {"gemma_wd_iwd": "lower"}
settings = {"adamw_cosine": {"optimizer": "adamw", "lr_schedule": "cosine"}}
seeds = [1, 2, 3]
