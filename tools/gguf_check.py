"""Convert an export to GGUF with llama.cpp's own converter, then check the file by reading it back.

    pip download --no-deps --no-binary :all: llama-cpp-python && tar xzf llama_cpp_python-*.tar.gz
    pip install gguf sentencepiece accelerate         # the converter's imports; transformers' GGUF loader
    python -m tools.gguf_check --export_dir=out-x/hf --llama_cpp=llama_cpp_python-0.3.36/vendor/llama.cpp

llama.cpp is not built: its convert_hf_to_gguf.py (with its gguf-py) runs
under --python (default: this interpreter; the converter pins other versions
of torch and transformers, which a separate environment can hold) and writes
<export_dir>.f32.gguf (float32: no quantization, so the check is exact). The
file is then read back twice: its metadata with the gguf package, checked
against config.json (architecture, layers, heads, key/value heads, head width,
RoPE base, experts, the tokenizer model and its end-of-text id), and its
weights with transformers' GGUF loader (gguf_file=), whose logits on a random
batch must equal the export's own. Prints one line per check; exit status 1
when one fails.
"""

import os
import sys

if __package__ in (None, ""):  # run by its path: imports live at the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from plumbing import common  # noqa: E402 (from the repository root, the path above)

common.set_omp_env()  # before torch loads: idle OpenMP threads sleep instead of spinning

import argparse
import subprocess

from plumbing.common import cli
from configurator import UserError

# transformers architecture -> llama.cpp's architecture name (Mixtral is llama with experts there)
GGUF_ARCH = {"LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3", "MixtralForCausalLM": "llama",
             "Qwen2MoeForCausalLM": "qwen2moe", "Qwen3MoeForCausalLM": "qwen3moe"}
TOLERANCE = 1e-4  # largest logit difference, relative to the largest logit


def convert(export_dir, llama_cpp, python, outfile):
    """Run llama.cpp's convert_hf_to_gguf.py on export_dir (float32); UserError with its last line."""
    script = os.path.join(llama_cpp, "convert_hf_to_gguf.py")
    if not os.path.isfile(script):
        raise UserError(f"--llama_cpp={llama_cpp}: no convert_hf_to_gguf.py there (the llama.cpp folder; in the "
                        f"llama-cpp-python source archive: vendor/llama.cpp)")
    env = {**os.environ, "PYTHONPATH": os.path.join(llama_cpp, "gguf-py")}
    done = subprocess.run([python, script, export_dir, "--outfile", outfile, "--outtype", "f32"], env=env,
                          capture_output=True, text=True)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        raise UserError(f"convert_hf_to_gguf.py failed on {export_dir}: {last}")


def metadata(path):
    """{key: value} of the GGUF file's scalar and string fields (gguf's reader)."""
    import gguf
    reader, out = gguf.GGUFReader(path), {}
    for name, f in reader.fields.items():
        if len(f.data) != 1:
            continue  # arrays (the vocabulary, merges)
        value = f.parts[f.data[0]]
        out[name] = bytes(value).decode() if f.types[0] == gguf.GGUFValueType.STRING else value.tolist()[0]
    return out


def expected(config):
    """What the GGUF file's metadata must say, from the export's config.json."""
    arch = GGUF_ARCH[config["architectures"][0]]
    want = {"general.architecture": arch, f"{arch}.block_count": config["num_hidden_layers"],
            f"{arch}.attention.head_count": config["num_attention_heads"],
            f"{arch}.attention.head_count_kv": config["num_key_value_heads"],
            f"{arch}.attention.key_length": config["head_dim"],
            f"{arch}.rope.freq_base": float(config["rope_theta"]),
            "tokenizer.ggml.model": "gpt2"}
    if config.get("eos_token_id") is not None:
        want["tokenizer.ggml.eos_token_id"] = config["eos_token_id"]
    experts = config.get("num_local_experts") or config.get("num_experts")
    if experts:
        want[f"{arch}.expert_count"] = experts
        want[f"{arch}.expert_used_count"] = config["num_experts_per_tok"]
    return want


def logit_difference(export_dir, path):
    """The largest logit difference between the export and its GGUF file loaded by transformers, over
    the export's largest logit, on a random batch. Both are loaded locally and without running any
    folder's code (trust_remote_code=False); UserError when the GGUF's folder names code
    (refuse_code) or its sizes are not its tensors' (tools.gguf_to_hf.check_gguf)."""
    import torch
    from transformers import AutoModelForCausalLM
    from plumbing.hf_code import refuse_code
    from tools.gguf_to_hf import check_gguf
    refuse_code(os.path.dirname(path), model_folder=False)  # transformers reads the JSON files beside the .gguf
    check_gguf(path)  # its sizes are its tensors' before transformers builds a model of them
    local = dict(dtype=torch.float32, trust_remote_code=False, local_files_only=True)
    a = AutoModelForCausalLM.from_pretrained(export_dir, **local).eval()
    b = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path), **local).eval()
    idx = torch.randint(0, a.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        x, y = a(idx).logits, b(idx).logits
    return ((x - y).abs().max() / x.abs().max()).item()


EXPORT_FIELDS = ("architectures", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                 "rope_theta")  # what expected() reads


def read_export_config(export_dir):
    """export_dir/config.json, checked to be an export's: UserError (one line naming what is wrong) when
    the folder or file is missing, the file is not a JSON object (common.read_json) or lacks an
    EXPORT_FIELDS field."""
    fix = "point --export_dir at a folder python -m tools.export wrote (a run's out_dir/hf)"
    path = os.path.join(export_dir, "config.json")
    if not os.path.isdir(export_dir):
        what = "a file, not a folder" if os.path.exists(export_dir) else "no such folder"
        raise UserError(f"--export_dir={export_dir}: {what}: {fix}")
    if not os.path.isfile(path):
        what = "a run's folder (its export is in hf/)" if os.path.exists(os.path.join(export_dir, "ckpt.pt")) or \
            os.path.exists(os.path.join(export_dir, "ckpt.dcp")) else "not an export"
        raise UserError(f"--export_dir={export_dir} has no config.json: {what}: {fix}")
    from plumbing.common import read_json
    config = read_json(path)  # one line for every way it is not a JSON object (too deep, not UTF-8, ...)
    missing = [k for k in EXPORT_FIELDS if k not in config]
    if missing or not isinstance(config["architectures"], list) or not config["architectures"]:
        raise UserError(f"{path} lacks {missing or 'a list of architectures'}: it is damaged or not an export's: "
                        f"export again")
    return config


def check(export_dir, llama_cpp, python=sys.executable):
    """Convert and check one export; returns [(check, ok, detail)]. UserError (one line) when export_dir
    is not an export: missing, not a folder, or its config.json missing, not JSON or without the
    fields an export writes; or when it holds code (plumbing.hf_code.refuse_code), checked before the
    converter or transformers reads it."""
    config = read_export_config(export_dir)
    arch = config["architectures"][0]
    if arch not in GGUF_ARCH:
        raise UserError(f"{export_dir} is a {arch}: llama.cpp has no architecture for it (only {', '.join(GGUF_ARCH)})")
    from plumbing.hf_code import refuse_code
    refuse_code(export_dir)  # before llama.cpp's converter (it loads some tokenizers with trust_remote_code=True)
    path = os.path.abspath(export_dir.rstrip(os.sep)) + ".f32.gguf"
    convert(export_dir, llama_cpp, python, path)
    meta = metadata(path)
    rows = [(key, meta.get(key) == value, f"{meta.get(key)!r} (config.json: {value!r})")
            for key, value in expected(config).items()]
    try:
        diff = logit_difference(export_dir, path)
        rows.append(("transformers gguf_file= logits", diff <= TOLERANCE, f"largest difference {diff:.2e}"))
    except Exception as e:  # transformers' loader refuses an architecture or a tensor: say which
        rows.append(("transformers gguf_file= logits", False, f"{type(e).__name__}: {str(e)[:160]}"))
    return rows


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--export_dir", required=True, help="a folder tools/export.py wrote")
    p.add_argument("--llama_cpp", required=True, help="llama.cpp's source folder (convert_hf_to_gguf.py, gguf-py)")
    p.add_argument("--python", default=sys.executable, help="the interpreter that runs the converter")
    args = p.parse_args(argv)
    rows = check(args.export_dir, args.llama_cpp, args.python)
    for name, ok, detail in rows:
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
    return 0 if all(ok for _, ok, _ in rows) else 1


if __name__ == "__main__":
    cli(main)
