"""A GPU ablation file at CPU-miniature size (research.sweep / research.plot --scale_down): the same
code end to end, every rule of the file kept, the shapes shrunk. A run at this size says the file
runs, never what its claim is (the plots say so and give no verdict)."""


# What --scale_down sets in every setting: character-level Shakespeare (prepared by train.py on
# its first run), a CPU in float32, uncompiled, a few iterations of 2 x 32 characters.
MINIATURE = {"dataset": "shakespeare_char", "device": "cpu", "dtype": "float32", "compile": False, "vocab_size": 0,
             "block_size": 32, "batch_size": 4, "gradient_accumulation_steps": 1, "max_iters": 50,
             "warmup_iters": 5, "eval_interval": 50, "eval_iters": 8, "log_interval": 50, "sample_tokens": 0}
MINIATURE_LR = 24  # AdamW's LRs (scale_lr too) times this: the 1/width rule from width 768 to the miniature's 32
MINIATURE_GRID = [0.25, 0.5, 1.0, 2.0, 4.0]  # its LR grid: wider than a 0.12B file's, so its best is interior


def scaled_down(overrides):
    """A setting's overrides at miniature size, for running a GPU file end to end on a CPU through
    the same code (sweep.py / plot.py --scale_down): MINIATURE, and the shape shrunk with its
    proportions kept (width / 384 heads of 16, at least one; layers / 6; experts' d_ff / 24), so
    a ladder's rungs still grow. Everything else is the file's: variants, seeds per setting, the
    LR grid and tuning seeds, the LRs themselves (scale_lr's rule included), the pilot rule."""
    out = {**overrides, **MINIATURE}
    out |= {k: overrides[k] * MINIATURE_LR for k in ("learning_rate", "min_lr", "scale_lr") if k in overrides}
    if "n_embd" in overrides:
        heads = max(1, round(overrides["n_embd"] / 384))
        out |= {"n_embd": 16 * heads, "n_head": heads}
    if "n_layer" in overrides:
        out["n_layer"] = max(1, overrides["n_layer"] // 6)
    if overrides.get("expert_d_ff"):
        out["expert_d_ff"] = max(16, overrides["expert_d_ff"] // 24)
    return out
