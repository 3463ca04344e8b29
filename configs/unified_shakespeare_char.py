# The default run of `python train.py`, written out: the unified strategy on
# character-level Shakespeare, sized for 2 CPU cores (a few minutes).
# Switch one variant at a time on the command line, e.g. --scale=none.
out_dir = "out-shakespeare-char"
dataset = "shakespeare_char"

branch_scales = True
attn_placement = "in"  # the paper's unified: HG + DNP + OR + IWD (no DP on attention)
mlp_placement = "dual_norm"
reparam = "or"
scale_wd = "iwd"
