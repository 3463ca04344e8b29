# C4, both halves, with room for the decay to act. The paper's claim has two parts:
#   wd_iwd vs wd_none   decay helps input-role scales     (main table: expected lower)
#   wd_iwd vs wd_all    decay hurts output-role scales    (comparisons: expected lower)
# Gemma-style (QK-norm + output norms) so that output-role scales exist. Tied, the
# final-norm scale is output-role (it cannot fold); untied, input-role: the second
# setting moves it to the decayed side.
# Room to act (results/README.md, the decay pull): the base run (500 iterations, weight_decay 0.1) pulls
# a scale by only exp(-sum_t lr_t wd) = exp(-0.08). Here 1,000 iterations at
# weight_decay 1.0: exp(-1.65) = 0.19, well below e^-0.5 (plot.py prints the figure
# in the caption). The stronger decay acts on the matrices too, alike in all three
# variants, so the paired differences still isolate the scales' decay; sum_t lr_t wd
# of 1.65 is what long LLM runs reach (e.g. 3e-4 x 0.1 over 50k steps = 1.5).
# About 8 minutes per run on one core: 18 runs, ~75 minutes at --parallel=2.
claim = "C4: weight decay helps input-role scales (iwd vs none) and hurts output-role ones (iwd vs all)"
base = "configs/ablation_base.py"
variants = {
    "wd_none": {"scale_wd": "none"},
    "wd_iwd": {"scale_wd": "iwd"},
    "wd_all": {"scale_wd": "all"},
}
expected = {"wd_iwd": "lower"}
comparisons = [("wd_iwd", "wd_all", "lower")]
_run = {"optimizer": "adamw", "lr_schedule": "cosine", "qk_norm": True, "output_norms": True,
        "max_iters": 1000, "weight_decay": 1.0}
settings = {
    "gemma_tied": _run,
    "gemma_untied": {**_run, "tie_embeddings": False},
}
seeds = [1, 2, 3]
