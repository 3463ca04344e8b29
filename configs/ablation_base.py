# The CPU miniature every ablation in configs/ablations/ starts from: the
# baseline (shared scale vectors, no decay on them) at the default run's size,
# 0.87M parameters (4 layers, width 128), on character-level Shakespeare,
# 500 iterations x 4,096 tokens = 2.05M tokens. About 3 minutes per run on one
# CPU thread, compiled; sweep.py runs two at a time on 2 cores.
# Compiled (torch.compile, inductor): about 1.3-1.6x faster per step on the CPU than eager
# once compiled (tens of seconds the first time per variant, seconds from the cache after).
# Every run of an ablation trains in this one mode: never compare eager with compiled runs.
compile = True
dataset = "shakespeare_char"
sample_tokens = 0
eval_interval = 100
eval_iters = 40  # 164k validation characters, the same batches for every run
log_interval = 100
# The mechanism statistics (claim C3) in every eval row, so that every ablation's records carry them and
# research/plot.py can draw its mechanism figure (off by default: a plain run's step does none of that work).
mechanism_stats = "on"

max_iters = 500
warmup_iters = 50
learning_rate = 3e-3
min_lr = 3e-4
muon_lr = 0.02
wsd_decay_frac = 0.2

scale = "vector"
reparam = "plain"
branch_scales = False
attn_placement = "in"
mlp_placement = "in"
qk_norm = False
output_norms = False
scale_wd = "none"
