# The unified strategy on GPT-2 BPE text, sized for 2 CPU cores:
#   python train.py configs/unified_bpe_cpu.py                   # BPE Shakespeare, prepared on first use
#   python train.py configs/unified_bpe_cpu.py --dataset=mine    # your text (data/corpus/prepare.py)
# With a 50,257-token vocabulary the embedding (6.4M of 7.2M parameters at width 128) and the
# logits (batch x block x 50,304 per micro-batch) dominate a small model's time and memory, so
# this config keeps the default model and halves the context and the batch: 1,024 tokens per
# iteration, ~40 GFLOP each, about a quarter of the default model's cost on BPE.
out_dir = "out-bpe-cpu"
dataset = "shakespeare"
block_size = 64
batch_size = 16
max_iters = 500
eval_interval = 100

branch_scales = True
attn_placement = "in"  # the paper's unified: HG + DNP + OR + IWD (no DP on attention)
mlp_placement = "dual_norm"
reparam = "or"
scale_wd = "iwd"
