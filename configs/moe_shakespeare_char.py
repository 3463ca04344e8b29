# The default run with top-2 mixture-of-experts MLPs: 8 experts of width 192,
# so each token uses 2 x 192 = 384 = the dense d_ff (equal active parameters),
# with 4x the MLP parameters in total. Unified scale vectors, as the default.
out_dir = "out-shakespeare-char-moe"
dataset = "shakespeare_char"

n_experts = 8
top_k = 2
expert_d_ff = 192
aux_loss_coef = 0.01
z_loss_coef = 0.001
