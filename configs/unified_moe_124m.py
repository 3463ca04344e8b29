# A top-2 MoE with the active parameters of GPT-2 small (124M): 8 experts of
# width 1024 (2 x 1024 = the dense d_ff of 2048) in every block, 294M
# parameters in all. Unified scale vectors; otherwise as configs/unified_124m.py.
#   torchrun --standalone --nproc_per_node=8 train.py configs/unified_moe_124m.py
out_dir = "out-unified-moe-124m"
dataset = "fineweb"
eval_interval = 250
eval_iters = 100
log_interval = 10
sample_tokens = 0

n_layer = 12
n_head = 12
n_embd = 768
block_size = 1024
batch_size = 16
gradient_accumulation_steps = 32

n_experts = 8
top_k = 2
expert_d_ff = 1024
aux_loss_coef = 0.01
z_loss_coef = 0.001

# the paper's unified strategy: HG + DNP + OR + IWD (attention's scales before q, k, v only)
scale = "vector"
branch_scales = True
attn_placement = "in"
mlp_placement = "dual_norm"
reparam = "or"
scale_wd = "iwd"

optimizer = "adamw"
learning_rate = 6e-4
min_lr = 6e-5
weight_decay = 0.1
lr_schedule = "cosine"
warmup_iters = 250
max_iters = 5000

# The expert loop has data-dependent shapes (tokens per expert), which torch.compile
# would recompile for; the dense configs compile.
compile = False
