# GPT-2 small (124M) on FineWeb with the baseline (Llama-style shared) scale vectors, on GPUs.
#   python data/fineweb/prepare.py
#   torchrun --standalone --nproc_per_node=8 train.py configs/baseline_124m.py
# 524,288 tokens/iter (16 x 1024 x 32), 5000 iters = 2.62B tokens; 123,587,328 parameters: 21.2 tokens
# per parameter (Chinchilla-like ~20). The paper trains at ~100: --max_iters=23600 (12.4B tokens, more than
# the sample-10BT subset holds: prepare --subset=sample-100BT --train_tokens=1.3e10).
out_dir = "out-baseline-124m"
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

# baseline = one shared scale per pre-norm, no extra placements, no decay on scales
scale = "vector"
branch_scales = False
attn_placement = "in"
mlp_placement = "in"
reparam = "plain"
scale_wd = "none"

optimizer = "adamw"
learning_rate = 6e-4
min_lr = 6e-5
weight_decay = 0.1
lr_schedule = "cosine"
warmup_iters = 250
max_iters = 5000

compile = True
