"""Check a Hugging Face Llama or Qwen3 folder the way train.py --hf_model does at start, without training.

    python -m tools.hf_check PATH                 # one line: the folder's shape, and that it agrees
    python -m tools.hf_check PATH --tokens=128    # a longer check batch (per sequence; 2 sequences)

Reads config.json into our model keys (every field type-checked; a quantized,
RoPE-scaled, biased or otherwise foreign folder refused naming the field),
checks every weight file and tensor (dtype, damage), and, with transformers
installed, runs our reading of the folder beside transformers' own, block by
block on a fixed batch, each model built on the meta device and filled one
block at a time: no more than a block of each is held, so a folder far larger
than this machine's memory for training is checked here. Exit status 1 with
one line naming the first disagreement. No code of the folder is ever run: a
folder that could lead transformers to it (an auto_map, a model_type
transformers lacks, a .py file) is refused, one line, before transformers is
asked (plumbing.hf_code.refuse_code), and transformers reads it with
trust_remote_code=False.
"""

import os
import sys

if __package__ in (None, ""):  # run by its path: imports live at the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from plumbing import common  # noqa: E402 (from the repository root, the path above)

common.set_omp_env()  # before torch loads: idle OpenMP threads sleep instead of spinning

import argparse
from types import SimpleNamespace

from plumbing.common import cli
from configurator import DEFAULTS, UserError


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", help="a Hugging Face model folder, as save_pretrained writes it")
    p.add_argument("--tokens", type=int, default=64, help="tokens per sequence of the check batch (2 sequences)")
    args = p.parse_args(argv)
    if not 1 <= args.tokens <= 1 << 16:
        raise UserError(f"--tokens={args.tokens}: give a count from 1 to 65536")
    import plumbing.hf_folder as folder_io
    cfg = folder_io.merged_config({**DEFAULTS, "hf_model": args.folder, "n_experts": 0}, set())
    cfg = SimpleNamespace(**{**cfg, "block_size": args.tokens})
    print(f"{args.folder}: {cfg.n_layer} blocks, width {cfg.n_embd}, {cfg.n_head} heads ({cfg.n_kv_head} key/value) "
          f"of {cfg.head_dim}, d_ff {cfg.d_ff}, vocabulary {cfg.vocab_size}, "
          f"{'tied' if cfg.tie_embeddings else 'untied'} head{', QK-norm' if cfg.qk_norm else ''}", flush=True)
    folder_io.check_folder(cfg, lambda line: print(line, flush=True), tokens=args.tokens)
    return 0


if __name__ == "__main__":
    cli(main)
