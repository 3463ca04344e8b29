# The baseline of the default run: Llama-style shared scale vectors, no weight
# decay on them; everything else as `python train.py`.
out_dir = "out-shakespeare-char-baseline"
dataset = "shakespeare_char"

branch_scales = False
attn_placement = "in"
mlp_placement = "in"
reparam = "plain"
scale_wd = "none"
