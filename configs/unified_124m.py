# GPT-2 small (124M) on FineWeb with the paper's unified scale-vector strategy, on GPUs.
#   python data/fineweb/prepare.py
#   torchrun --standalone --nproc_per_node=8 train.py configs/unified_124m.py
# 524,288 tokens/iter (16 x 1024 x 32), 5000 iters = 2.62B tokens; 123,664,189 parameters: 21.2 tokens
# per parameter (Chinchilla-like ~20). The paper trains at ~100: --max_iters=23600 (12.4B tokens, more than
# the sample-10BT subset holds: prepare --subset=sample-100BT --train_tokens=1.3e10).
out_dir = "out-unified-124m"
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

compile = True
