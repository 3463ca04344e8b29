"""Sample text from a checkpoint written by train.py.

    python sample.py --out_dir=out-shakespeare-char --start="ROMEO:" --max_new_tokens=300
    python sample.py --out_dir=out-shakespeare-char --fold    # fold the scales first: same text
    python sample.py --out_dir=out-shakespeare-char --start=FILE:prompt.txt  # the prompt from a file (nanoGPT's form)

Works for char-level and GPT-2 BPE checkpoints, saved with or without
compile/DDP (their "_orig_mod." / "module." prefixes are stripped). --fold
multiplies every input-role scale vector into its linear map before sampling
(claim C2): with the same --seed the text is the same.
"""

import argparse
import math
import sys
import warnings

from plumbing import common

common.set_omp_env()  # before torch loads: idle OpenMP threads sleep instead of spinning

import torch  # noqa: E402

from plumbing.checkpoint import checkpoint_in, load_model
from plumbing.common import cli, resolve_device
from configurator import UserError
from plumbing.dataset import make_codec


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out_dir", default="out-shakespeare-char", help="the run's folder (its ckpt.pt or ckpt.dcp)")
    p.add_argument("--start", default="\n", help="prompt text, or FILE:path to read it from a file (as nanoGPT)")
    p.add_argument("--num_samples", type=int, default=1)
    p.add_argument("--max_new_tokens", type=int, default=300)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top_k", type=int, default=200, help="sample from the k most likely tokens; 0: all")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--device", default="auto",
                   help='"auto" (CUDA, else MPS, else CPU, as train.py), "cpu", "cuda", "cuda:N" or "mps"')
    p.add_argument("--fold", action="store_true", help="fold input-role scales into the weights first")
    args = p.parse_args(argv)
    for name, ok in (("max_new_tokens", 1 <= args.max_new_tokens <= 10**7), ("num_samples", 1 <= args.num_samples <= 10**6),
                     ("top_k", 0 <= args.top_k < 2**31), ("temperature", 0 < args.temperature < math.inf),
                     ("seed", 0 <= args.seed < 2**63)):
        if not ok:
            raise UserError(f"--{name}={getattr(args, name)}: need 1 <= --max_new_tokens <= 1e7, 1 <= --num_samples "
                            f"<= 1e6, --top_k >= 0 (0: all), a finite --temperature > 0 and 0 <= --seed < 2**63")
    args.device, _ = resolve_device(args.device)  # UserError for a device this machine lacks
    model, ckpt = load_model(checkpoint_in(args.out_dir), args.device)
    if args.fold:
        with warnings.catch_warnings(record=True) as caught:  # the untying warning, said as one line here
            warnings.simplefilter("always")
            model.fold_scales()
        if caught:
            print("note: the LM head was untied from the embedding so that the final-norm scale folds into it "
                  "(same outputs)", file=sys.stderr)
    codec = make_codec(ckpt.get("meta"), model.config.vocab_size)
    if codec is None:
        raise UserError(f"{checkpoint_in(args.out_dir)} has no vocabulary to decode (its dataset had no meta.pkl)")
    encode, decode = codec
    ids = encode(prompt(args.start))
    if not ids:
        raise UserError(f"--start={args.start!r} has no token of this checkpoint's vocabulary")
    torch.manual_seed(args.seed)
    x = torch.tensor([ids], dtype=torch.long, device=args.device)
    for _ in range(args.num_samples):
        y = model.generate(x, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k or None)
        print(decode(y[0].tolist()))
        print("---")


def prompt(start):
    """The prompt --start gives: its text, or with nanoGPT's "FILE:path" the UTF-8 text of that file (read
    through common.open_checked, a link to a file followed). UserError, one line, for a path that is no
    readable UTF-8 file (a missing file, a folder, a FIFO: never waited on)."""
    if not start.startswith("FILE:"):
        return start
    path = start[len("FILE:"):]
    try:
        with common.open_checked(path, links=True) as f:
            return f.read().decode("utf-8")
    except FileNotFoundError:
        raise UserError(f"--start=FILE:{path}: no such file; give the prompt's file, or the prompt itself") from None
    except UnicodeDecodeError as e:
        raise UserError(f"--start=FILE:{path} is not UTF-8 text ({e.reason} at byte {e.start}): save it as UTF-8") from None


if __name__ == "__main__":
    cli(main)
