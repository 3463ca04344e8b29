"""A Hugging Face folder read into our GPT: continued pre-training with scale vectors on top.

    python data/corpus/prepare.py 'texts/*.txt' --out=data/mine --tokenizer=PATH   # its own token ids
    python train.py --hf_model=PATH --dataset=mine --branch_scales=True --reparam=or --mlp_placement=in ...

merged_config puts the folder's config.json into the run's config as our model keys
(model_keys: layers, widths, heads, key/value heads, head width, d_ff, RoPE base, norm eps,
tied head, vocabulary; Qwen3 adds QK-norm); check_data checks that the dataset was encoded with
the folder's tokenizer; load_folder copies the weights into the GPT those keys build (load: the
inverse of tools/export.py's map) and says what changed. No code of a folder is ever run:
plumbing/hf_code.py's refuse_code refuses a folder that could lead transformers to it (an auto_map, a
model_type transformers lacks, a .py file) before transformers is asked, and every JSON file of a
folder is read through read_json (a damaged one is one line).

The checkpoint's RMSNorm weights become the scale vectors' start, so the loaded function is
unchanged under every switch that only adds or reparameterizes scales: a shared scale takes gamma
as it is; HG gives each of q, k, v (gate, up) a copy; OR and ER set their magnitude and direction
to reproduce gamma exactly (ScaleVector.set_); DP's extra scales start at 1. With scale="none" a
pre-norm's gamma folds into the maps that read it (exact), the final norm's into an untied LM
head. What the checkpoint never had changes the function and is said at start with how far the
logits moved: DNP and in_norm (a normalization over d_ff), output norms, a QK-norm gamma or a
tied final-norm gamma with scale="none" (nothing to hold it).
"""

import math
import os
import re
from types import SimpleNamespace
from dataclasses import replace

import torch

from plumbing.checkpoint import is_sharded, load_weights
from plumbing.common import checked_stat, read_json
from configurator import MOST_BITS, UserError
from plumbing.dataset import read_meta
from plumbing.disk import present
from plumbing.hf_code import refuse_code, short
from model import BASELINE, BRANCHES, CHOICES, GPT, model_config, rope_tables


ARCHITECTURES = {"LlamaForCausalLM": False, "Qwen3ForCausalLM": True}  # name -> QK-norm
HF_TOLERANCE = 1e-4  # float32: our reading vs transformers', largest difference over the layer's largest value
HF_CHECK_TOKENS = 64  # the check's batch: 2 sequences of at most this many tokens (a 7B folder: ~30 s on 2 cores)
FLOAT_DTYPES = {"F64", "F32", "F16", "BF16"}  # safetensors' dtype names that load as the float they store
# Every config.json field the import reads or refuses, and what it must be (a "?" kind: absent or
# null is allowed). A field of another type is one line naming it, never a traceback or a cast.
FIELD_KINDS = {
    "count": (lambda v: type(v) is int and 0 < v <= 2**MOST_BITS, f"a positive int of a real size (at most 2**{MOST_BITS})"),
    "positive": (lambda v: type(v) in (int, float) and 0 < v <= 2**MOST_BITS and math.isfinite(v), "a positive number"),
    "bool": (lambda v: type(v) is bool, "true or false"),
    "str": (lambda v: type(v) is str, "a string"),
    "dict": (lambda v: type(v) is dict, "an object"),
    "names": (lambda v: type(v) is list and v and all(type(x) is str for x in v), "a list of class names"),
}
CONFIG_FIELDS = {
    "architectures": "names", "num_hidden_layers": "count", "hidden_size": "count", "num_attention_heads": "count",
    "num_key_value_heads": "count?", "head_dim": "count?", "intermediate_size": "count", "vocab_size": "count",
    "rms_norm_eps": "positive", "rope_theta": "positive?", "rope_parameters": "dict?", "rope_scaling": "dict?",
    "tie_word_embeddings": "bool?", "attention_bias": "bool?", "mlp_bias": "bool?", "hidden_act": "str?",
    "use_sliding_window": "bool?", "quantization_config": "dict?",
}

# Fields transformers reads as a composite model's nested text config (PretrainedConfig.get_text_config):
# a Llama or Qwen3 config holds none, and transformers fails building one that does.
SUB_CONFIGS = ("text_config", "decoder", "generator", "text_encoder")


def read_config(folder):
    """folder/config.json as a dict, every field of CONFIG_FIELDS checked. UserError (one line) when
    the folder or file is missing, the folder holds code transformers could be led to run
    (refuse_code), the file is not a JSON object (read_json), or a field is of another type."""
    path = os.path.join(folder, "config.json")
    if os.path.isfile(folder):
        raise UserError(f"hf_model={folder!r} is a file, not a folder: point --hf_model at the folder that holds "
                        f"config.json and the weights")
    if not os.path.isdir(folder):
        raise UserError(f"hf_model={folder!r}: no such folder (point --hf_model at a Hugging Face model folder, as "
                        f"save_pretrained writes it)")
    if not (present(path) and os.path.isfile(path)):  # (present: a folder this user may not look inside is said so)
        raise UserError(f"hf_model={folder!r}: no config.json there (point --hf_model at a Hugging Face model "
                        f"folder, as save_pretrained writes it)")
    refuse_code(folder)
    c = read_json(path)
    for field, kind in CONFIG_FIELDS.items():
        optional, (ok, what) = kind.endswith("?"), FIELD_KINDS[kind.rstrip("?")]
        if field not in c and not optional:
            raise UserError(f"hf_model={folder!r}: config.json lacks {field!r}, which a Llama or Qwen3 config has: "
                            f"it is incomplete (save the model with save_pretrained)")
        if field in c and not (ok(c[field]) or optional and c[field] is None):
            raise UserError(f"{path}: {field}={short(c[field])} is not {what}: the file is damaged or hand-edited")
    for field in SUB_CONFIGS:
        if c.get(field) is not None:
            raise UserError(f"{path}: {field}={short(c[field])} is a nested model's config, which a Llama or Qwen3 "
                            f"config does not hold (transformers fails building this one): point --hf_model at a "
                            f"plain Llama or Qwen3 folder")
    theta = (c.get("rope_parameters") or {}).get("rope_theta")
    if theta is not None and not FIELD_KINDS["positive"][0](theta):
        raise UserError(f"{path}: rope_parameters.rope_theta={theta!r} is not a positive number")
    return c


def model_keys(folder):
    """Our model keys from folder/config.json: {n_layer, n_embd, n_head, n_kv_head, head_dim, d_ff,
    rope_theta, norm_eps, tie_embeddings, vocab_size, qk_norm}.

    Raises UserError naming the field for what our model does not compute: another architecture,
    quantized weights, a RoPE scaling (only the default RoPE), biases, an activation other than
    SiLU, sliding-window attention. tie_embeddings follows transformers: a tied config whose folder
    stores a distinct lm_head.weight loads untied (FolderWeights.distinct_head).
    """
    c = read_config(folder)
    arch = c["architectures"][0]
    if arch not in ARCHITECTURES:
        raise UserError(f"hf_model={folder!r}: architectures={c['architectures']} is not one this model "
                        f"computes ({', '.join(ARCHITECTURES)})")
    if c.get("quantization_config"):
        method = c["quantization_config"].get("quant_method", "?")
        raise UserError(f"hf_model={folder!r}: config.json's quantization_config (quant_method={method!r}) says its "
                        f"weights are quantized, and this model trains float weights: dequantize it first (in "
                        f"transformers: from_pretrained, then model.dequantize(), then save_pretrained to a new "
                        f"folder)")

    def scaled(rope):  # a RoPE entry (either spelling) that asks for more than the default rotation
        return bool(rope) and rope.get("rope_type", rope.get("type", "default")) != "default"

    refused = {"rope_scaling": scaled(c.get("rope_scaling")), "rope_parameters": scaled(c.get("rope_parameters")),
               "attention_bias": c.get("attention_bias"), "mlp_bias": c.get("mlp_bias"),
               "hidden_act": c.get("hidden_act") not in (None, "silu"), "use_sliding_window": c.get("use_sliding_window")}
    for field, bad in refused.items():
        if bad:
            raise UserError(f"hf_model={folder!r}: config.json's {field}={c.get(field)!r} is not computed here (RoPE "
                            f"without scaling, no biases, SiLU, full attention): this model cannot reproduce it")
    heads = c["num_attention_heads"]
    theta = (c.get("rope_parameters") or {}).get("rope_theta", c.get("rope_theta") or 10000.0)
    tied = bool(c.get("tie_word_embeddings"))
    return {"n_layer": c["num_hidden_layers"], "n_embd": c["hidden_size"], "n_head": heads,
            "n_kv_head": c.get("num_key_value_heads") or heads,
            "head_dim": c.get("head_dim") or c["hidden_size"] // heads, "d_ff": c["intermediate_size"],
            "rope_theta": float(theta), "norm_eps": float(c["rms_norm_eps"]),
            "tie_embeddings": tied and not FolderWeights(folder).distinct_head(), "vocab_size": c["vocab_size"],
            "qk_norm": ARCHITECTURES[arch]}


def merged_config(cfg, given):
    """cfg with the model keys of cfg["hf_model"]'s config.json (model_keys), its weights' files and
    dtypes checked (FolderWeights). Raises UserError naming the key when the command line sets one
    of them to another value (the folder decides the shape)."""
    if cfg["n_experts"]:
        raise UserError(f"--n_experts={cfg['n_experts']} with --hf_model: the folder holds a dense model; drop "
                        f"--n_experts")
    keys = model_keys(cfg["hf_model"])
    for key, value in keys.items():
        if key in given and cfg[key] != value:
            why = " (transformers unties it too: the folder stores its own lm_head.weight)" \
                if key == "tie_embeddings" and not value else ""
            raise UserError(f"--{key}={cfg[key]} but {cfg['hf_model']}/config.json gives {value}{why}: drop --{key} "
                            f"(the loaded model's shape is its own)")
    merged = {**cfg, **keys}
    FolderWeights(cfg["hf_model"]).check_declared(SimpleNamespace(**merged))  # before any size is estimated
    return merged


def check_data(folder, dataset_folder):
    """UserError (one line) when the data's ids are not this model's tokenizer's: dataset_folder's
    meta.pkl records another tokenizer (a char vocabulary, a tiktoken encoding, a tokenizer.json of
    another vocabulary). Called before the token files' own checks, whose advice (--vocab_size)
    does not apply here. Token files whose meta.pkl names no tokenizer pass on their size alone."""
    where, path = dataset_folder, os.path.join(dataset_folder, "meta.pkl")
    if not os.path.isfile(path):  # missing: the data's own checks say what is, after this
        return
    meta = read_meta(path)  # plain data only: a meta.pkl that would run code is refused
    fix = f"prepare it with the model's tokenizer: python data/corpus/prepare.py ... --tokenizer={folder}"
    if meta and ("itos" in meta or "encoding" in meta):
        what = "a character vocabulary" if "itos" in meta else f"tiktoken's {meta['encoding']}"
        raise UserError(f"{where} is encoded with {what}, not {folder}'s tokenizer: {fix}")
    path = os.path.join(folder, "tokenizer.json")
    if meta and "tokenizer" in meta and os.path.isfile(path):
        from tokenizers import Tokenizer
        try:
            theirs = Tokenizer.from_file(path).get_vocab()
        except Exception as e:  # the tokenizers library's own exception type: not JSON, too deep, not a tokenizer
            raise UserError(f"{path} is not a tokenizer.json the tokenizers library reads ({str(e)[:80]}): replace "
                            f"it with the model's own") from None
        if Tokenizer.from_str(meta["tokenizer"]).get_vocab() != theirs:
            raise UserError(f"{where} is encoded with another tokenizer than {folder}'s (their vocabularies "
                            f"differ): {fix}")


class FolderWeights:
    """A folder's safetensors tensors by name, each read when asked (safe_open), so no more than one
    tensor is held beside the model: model.safetensors, or the shards model.safetensors.index.json
    maps names to. Made only through checks: UserError (one line, naming the file or tensor) when
    the folder has no weights, the index is not JSON or has no weight_map, a file is missing or
    damaged (truncated, junk, empty), or a tensor is not stored as a float (quantized or
    integer-coded: float8, int8, ...). get() also names a tensor that holds NaN or inf.
    """

    def __init__(self, folder):
        self.folder, index = folder, os.path.join(folder, "model.safetensors.index.json")
        if os.path.isfile(index):
            try:
                weight_map = read_json(index)["weight_map"]
                assert type(weight_map) is dict and all(type(v) is str for v in weight_map.values())
            except (UserError, KeyError, AssertionError):
                raise UserError(f"{index} is not a safetensors index (a JSON object whose weight_map maps tensor "
                                f"names to files): save the model again with save_pretrained") from None
        elif os.path.isfile(os.path.join(folder, "model.safetensors")):
            weight_map = None
        else:
            raise UserError(f"hf_model={folder!r}: no model.safetensors (or its index) there: save the model with "
                            f"save_pretrained (safetensors)")
        files = sorted(set(weight_map.values())) if weight_map is not None else ["model.safetensors"]
        self.handles = {f: self.open(f) for f in files}
        self.file_of = weight_map if weight_map is not None else \
            {name: "model.safetensors" for name in self.handles["model.safetensors"].keys()}
        for name, file in self.file_of.items():
            if name not in self.handles[file].keys():
                raise UserError(f"hf_model={folder!r}: the index places {name} in {file}, which does not hold it: "
                                f"the folder is incomplete or mixed from two saves")
            dtype = self.handles[file].get_slice(name).get_dtype()
            if dtype not in FLOAT_DTYPES:
                raise UserError(f"hf_model={folder!r}: {name} is stored as {dtype}, not as a float (quantized or "
                                f"integer-coded weights): dequantize the model first (in transformers: "
                                f"from_pretrained, then model.dequantize(), then save_pretrained to a new folder)")

    def open(self, file):
        from safetensors import safe_open
        path = os.path.join(self.folder, file)
        try:  # a name the index maps to outside the folder (../base/model.safetensors) is never read
            checked_stat(path, self.folder, links=True)  # (a Hugging Face cache links its files: read as them)
        except FileNotFoundError:
            raise UserError(f"hf_model={self.folder!r}: its index lists {file}, which is not there") from None
        open(path, "rb").close()  # this user's access first: safetensors words a refusal as a missing file
        try:
            return safe_open(path, framework="pt")
        except Exception as e:  # safetensors' SafetensorError and OSError: truncated, junk, empty
            raise UserError(f"{path} is damaged ({type(e).__name__}: {str(e)[:80]}): download or save the model "
                            f"again") from None

    def names(self):
        return set(self.file_of)

    def shape(self, name):
        """The stored shape of tensor `name` (from its file's header: nothing is read), or None."""
        return tuple(self.handles[self.file_of[name]].get_slice(name).get_shape()) if name in self.file_of else None

    def check_declared(self, cfg):
        """UserError (one line) when config.json's sizes (cfg: merged_config's keys) are not what the weights
        hold: the blocks model.layers.0 .. n_layer - 1; the embedding, block 0's q and k projections and
        its gate, each of the shape the sizes make. Checked
        from the files' headers before a model of the declared size is built, so a config.json that
        declares 10,000,000 layers (or a width past memory) costs nothing."""
        blocks = {int(m.group(1)) for m in map(re.compile(r"model\.layers\.(\d+)\.").match, self.names()) if m}
        if blocks != set(range(cfg.n_layer)):
            held = f"blocks 0..{max(blocks)}" if blocks == set(range(len(blocks))) and blocks else \
                f"{len(blocks)} blocks" if blocks else "no block"
            raise UserError(f"hf_model={self.folder!r}: config.json declares num_hidden_layers={cfg.n_layer:,} but the "
                            f"weights hold {held}: the folder is mixed from two models or its config.json was "
                            f"edited; download or save it again")
        head_dim = cfg.head_dim or cfg.n_embd // cfg.n_head
        for name, declared, shape in (
                ("model.embed_tokens.weight", "vocab_size and hidden_size", (cfg.vocab_size, cfg.n_embd)),
                ("model.layers.0.self_attn.q_proj.weight", "num_attention_heads x head_dim and hidden_size",
                 (cfg.n_head * head_dim, cfg.n_embd)),
                ("model.layers.0.self_attn.k_proj.weight", "num_key_value_heads x head_dim and hidden_size",
                 ((cfg.n_kv_head or cfg.n_head) * head_dim, cfg.n_embd)),
                ("model.layers.0.mlp.gate_proj.weight", "intermediate_size and hidden_size", (cfg.d_ff, cfg.n_embd))):
            held = self.shape(name)
            if held is not None and held != shape:
                raise UserError(f"hf_model={self.folder!r}: config.json declares {declared} of {shape}, but {name} "
                                f"is {held}: the folder is mixed from two models or its config.json was edited; "
                                f"download or save it again")

    def get(self, name, shape=None):
        """The tensor `name` as float32; UserError when the folder lacks it, its shape is not `shape`,
        or it holds NaN or inf."""
        if name not in self.file_of:
            raise UserError(f"hf_model={self.folder!r}: the weights lack {name} (config.json describes another model)")
        try:
            w = self.handles[self.file_of[name]].get_tensor(name).float()
        except Exception as e:  # a file cut short after its header
            raise UserError(f"{os.path.join(self.folder, self.file_of[name])} is damaged at {name} "
                            f"({type(e).__name__}): download or save the model again") from None
        if shape is not None and tuple(w.shape) != tuple(shape):
            raise UserError(f"hf_model={self.folder!r}: {name} is {tuple(w.shape)}, config.json makes {tuple(shape)}")
        if not torch.isfinite(w).all():
            raise UserError(f"hf_model={self.folder!r}: the folder's tensor {name} holds NaN or inf: its weights are "
                            f"damaged, nothing computed from them means anything")
        return w

    def distinct_head(self):
        """Whether the folder stores an lm_head.weight that differs from its embedding (transformers then
        loads it untied, whatever tie_word_embeddings says)."""
        names = self.names()
        return "lm_head.weight" in names and "model.embed_tokens.weight" in names and not torch.equal(
            self.get("lm_head.weight"), self.get("model.embed_tokens.weight"))


@torch.no_grad()
def load(model, weights):
    """Copy a folder's weights (FolderWeights) into `model` (a GPT built from merged_config's keys),
    in place, part by part (load_embedding, load_block, load_final: the inverse of tools/export.py's
    map). Returns (notes, used): the notes for the run's start ([] when the function is the
    folder's, else one line per switch that changes it or per fact a user must know) and the names
    of the tensors read. Raises UserError as FolderWeights.get does."""
    cfg, used = model.config, set()

    def take(name, shape=None):
        used.add(name)
        return weights.get(name, shape)

    load_embedding(model, take)
    if cfg.tie_embeddings and "lm_head.weight" in weights.names():
        used.add("lm_head.weight")  # stored equal to the embedding (model_keys ties only then): the same head
    notes = [note for i, b in enumerate(model.blocks) for note in load_block(b, i, cfg, take)]
    notes = list(dict.fromkeys(notes + load_final(model, take)))
    normalized = {key: [b for b in BRANCHES[key] if CHOICES[key][getattr(cfg, key)].normalizes(b)] for key in BRANCHES}
    if normalized["mlp_placement"]:
        notes.append(f"mlp_placement={cfg.mlp_placement!r} normalizes over d_ff ({', '.join(normalized['mlp_placement'])}), "
                     f"which the checkpoint never did: the function changes")
    if normalized["attn_placement"]:
        notes.append(f"attn_placement={cfg.attn_placement!r} adds a normalization the checkpoint never had "
                     f"({', '.join(normalized['attn_placement'])}): the function changes")
    if cfg.output_norms:
        notes.append("output_norms=True adds normalizations the checkpoint never had: the function changes")
    return notes, used


def load_embedding(model, take):
    """The token embedding, and an untied head (the stored lm_head.weight)."""
    cfg = model.config
    V = cfg.vocab_size
    model.wte.weight[:V] = take("model.embed_tokens.weight", (V, cfg.n_embd))
    if not cfg.tie_embeddings:
        model.lm_head.weight[:V] = take("lm_head.weight", (V, cfg.n_embd))


def load_block(b, i, cfg, take):
    """Block i's maps (b: a model.Block of the model.GPTConfig cfg), and its RMSNorm gammas into the
    scale vectors (put_gamma, set_gamma); returns its notes."""
    p, notes = f"model.layers.{i}.", []
    for ours, theirs in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "o_proj")):
        lin = getattr(b.attn, ours)
        lin.weight.copy_(take(p + f"self_attn.{theirs}.weight", lin.weight.shape))
    for ours in ("gate", "up", "down"):
        lin = getattr(b.mlp, ours)
        lin.weight.copy_(take(p + f"mlp.{ours}_proj.weight", lin.weight.shape))
    put_gamma(take(p + "input_layernorm.weight", (cfg.n_embd,)), b.attn_norm.scale, (b.attn.q, b.attn.k, b.attn.v))
    put_gamma(take(p + "post_attention_layernorm.weight", (cfg.n_embd,)), b.mlp_norm.scale, (b.mlp.gate, b.mlp.up))
    if cfg.qk_norm:
        for norm, name in ((b.attn.q_norm, "q_norm"), (b.attn.k_norm, "k_norm")):
            gamma = take(p + f"self_attn.{name}.weight", (cfg.head_dim,))
            if norm.scale is not None:
                set_gamma(norm.scale, gamma)
            elif not torch.equal(gamma, torch.ones_like(gamma)):
                notes.append("scale='none' has no QK-norm gamma to hold the checkpoint's: the function changes")
    return notes


def load_final(model, take):
    """The final norm's gamma: into its scale vector, else folded into an untied head; returns its notes."""
    cfg = model.config
    gamma = take("model.norm.weight", (cfg.n_embd,))
    if model.norm_f.scale is not None:
        set_gamma(model.norm_f.scale, gamma)
    elif not cfg.tie_embeddings:
        model.lm_head.weight.mul_(gamma[None, :])
    elif not torch.equal(gamma, torch.ones_like(gamma)):
        return ["scale='none' with a tied head has no final-norm gamma to hold the checkpoint's: the function "
                "changes (--tie_embeddings cannot differ from the folder's; use scale vectors)"]
    return []


def set_gamma(scale, gamma):
    """scale.set_(gamma); UserError for a scale class without set_ (a fork's)."""
    try:
        scale.set_(gamma)
    except NotImplementedError as e:
        raise UserError(f"--hf_model: {e}") from None


def put_gamma(gamma, shared, branches):
    """A pre-norm's loaded gamma: into its shared scale, else into each branch's input scale (HG),
    folded into the columns of a branch that has none (scale="none", or a placement that leaves it
    none), all exact. UserError for a scale class without set_ (a fork's)."""
    if shared is not None:
        set_gamma(shared, gamma)
        return
    for lin in branches:
        if lin.in_scale is not None:
            set_gamma(lin.in_scale, gamma)
        else:
            lin.weight.mul_(gamma[None, :])


@torch.no_grad()
def baseline_logits(cfg, weights, idx, transformers_model=None):
    """The folder's function as our Llama-style baseline computes it: logits (B, T, vocab_size) on idx
    (B, T) token ids, on the CPU, one part at a time: the model is built on the meta device and each
    block is filled, run and emptied in turn, so no more than one block (and the embedding and
    head) is held, whatever the folder's size. With transformers_model (transformers' own model of
    the folder, built on the meta device: transformers_reading) each part of it runs beside ours
    on the same input, and the hidden states after every block, then the logits, are compared:
    UserError naming the first past HF_TOLERANCE (largest difference over the largest value).
    """
    cfg = replace(cfg, **BASELINE, output_norms=False)
    with torch.device("meta"):
        ours = GPT(cfg)
    take, T, folder, V = weights.get, idx.shape[1], weights.folder, cfg.vocab_size
    ours.wte.weight = torch.nn.Parameter(torch.zeros(cfg.padded_vocab_size, cfg.n_embd))
    ours.lm_head.weight = ours.wte.weight if cfg.tie_embeddings else \
        torch.nn.Parameter(torch.zeros(cfg.padded_vocab_size, cfg.n_embd))
    load_embedding(ours, take)
    x = ours.wte(idx)
    cos, sin = rope_tables(T, cfg.head_dim, cfg.rope_theta)
    theirs = transformers_model and their_parts(transformers_model, weights, idx)
    for i, block in enumerate(ours.blocks):
        block.to_empty(device="cpu")
        load_block(block, i, cfg, take)
        x = block(x, cos, sin)[0]
        block.to("meta")  # (frees it)
        if theirs:
            agree(x, next(theirs), f"block {i}", folder)
    ours.norm_f.to_empty(device="cpu")
    load_final(ours, take)
    logits = ours.lm_head(ours.norm_f(x))[..., :V]
    if theirs:
        agree(logits, next(theirs), "the logits", folder)
    return logits


def agree(ours, theirs, where, folder):
    """UserError when ours and theirs differ past HF_TOLERANCE of theirs' largest value."""
    gap = ((ours - theirs).abs().max() / theirs.abs().max().clamp_min(1e-30)).item()
    if not gap <= HF_TOLERANCE:
        raise UserError(f"hf_model={folder!r}: our reading of the folder differs from transformers' at {where} "
                        f"({gap:.3g} of its largest value; tolerance {HF_TOLERANCE:g} in float32): the folder holds "
                        f"something this model does not compute; a folder you have checked otherwise starts with "
                        f"--hf_check=False")


def transformers_reading(folder):
    """transformers' own model of the folder (AutoConfig, then AutoModelForCausalLM.from_config) on the
    meta device, float32, eager SDPA attention; None when transformers is not installed. UserError
    (refuse_code) for a folder that could lead transformers to its own code: it is asked only to
    read a local folder (local_files_only) and never to run code there (trust_remote_code=False)."""
    try:
        import transformers
    except ImportError:
        return None
    refuse_code(folder)
    config = transformers.AutoConfig.from_pretrained(folder, trust_remote_code=False, local_files_only=True)
    config._attn_implementation = "sdpa"
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32,
                                                             trust_remote_code=False).eval()


def their_parts(hf, weights, idx):
    """transformers' hidden state after each decoder layer, then its logits, on idx, filling each part
    of hf (on the meta device) from the folder's tensors in turn and emptying it after; the head is
    the stored lm_head.weight when the folder has one (transformers loads it, untied, even under a
    tied config), else the embedding."""
    def fill(module, prefix):
        module.to_empty(device="cpu")
        module.load_state_dict({k: weights.get(prefix + k) for k in module.state_dict()})

    fill(hf.model.embed_tokens, "model.embed_tokens.")
    h = hf.model.embed_tokens(idx)
    positions = torch.arange(idx.shape[1])[None]
    rotary = type(hf.model.rotary_emb)(config=hf.config)  # its inverse frequencies, built on the CPU
    cos_sin = rotary(h, positions)
    for i, layer in enumerate(hf.model.layers):
        fill(layer, f"model.layers.{i}.")
        h = layer(h, attention_mask=None, position_ids=positions, position_embeddings=cos_sin)
        h = h[0] if isinstance(h, tuple) else h
        layer.to("meta")
        yield h
    fill(hf.model.norm, "model.norm.")
    head = "lm_head.weight" if "lm_head.weight" in weights.names() else "model.embed_tokens.weight"
    yield hf.model.norm(h) @ weights.get(head).T


def check_batch(cfg, tokens=HF_CHECK_TOKENS):
    """The fixed batch the folder is checked on: 2 sequences of min(block_size, tokens) token ids drawn
    from a generator of fixed seed (the same for every run of a folder)."""
    gen = torch.Generator().manual_seed(0)
    return torch.randint(0, cfg.vocab_size, (2, min(cfg.block_size, tokens)), generator=gen)


@torch.no_grad()
def check_folder(cfg, log, tokens=HF_CHECK_TOKENS):
    """Check the folder cfg.hf_model (a model.GPTConfig's keys, merged_config's) against transformers'
    own reading of it, layer by layer on check_batch (baseline_logits), and say so. UserError naming
    the first layer past HF_TOLERANCE. Without transformers, a note that nothing was compared."""
    weights = FolderWeights(cfg.hf_model)
    weights.check_declared(cfg)  # before any model of the declared size is built
    hf = transformers_reading(cfg.hf_model)
    if hf is None:
        log("note: transformers is not installed, so the folder is not checked against its reading "
            "(pip install -e '.[export]')")
        return
    idx = check_batch(cfg, tokens)
    baseline_logits(model_config(cfg), weights, idx, hf)
    log(f"checked {cfg.hf_model} against transformers: every block and the logits agree to {HF_TOLERANCE:g} "
        f"({cfg.n_layer} blocks, {idx.numel()} tokens)")


@torch.no_grad()
def load_folder(model, folder, idx, log):
    """load(model, the folder's weights), then log its notes, the folder's tensors no part of the model
    reads (transformers' model of this config.json reads none of them either), and, when the
    function changed, how far: the largest logit difference on idx (B, T) from the folder's own
    function (our baseline's reading, baseline_logits), relative to its largest logit. A model
    FSDP2 shards is loaded whole on the CPU first, then each rank takes its shards
    (checkpoint.load_weights)."""
    if is_sharded(model):
        whole = GPT(model.config)
        load_folder(whole, folder, idx, log)
        load_weights(model, whole.state_dict(), folder)
        return
    weights = FolderWeights(folder)
    weights.check_declared(model.config)
    notes, used = load(model, weights)
    log(f"loaded {folder} (config.json and weights)")
    if model.config.tie_embeddings != bool(read_config(folder).get("tie_word_embeddings")):
        log("note: config.json ties the head to the embedding, but the folder stores a distinct lm_head.weight: "
            "transformers loads it untied, and so does this run (tie_embeddings=False, in its config; the "
            "final-norm scale is then input-role)")
    unused = sorted(weights.names() - used)
    if unused:
        log(f"note: {len(unused)} tensors of the folder are not read (no part of this model or of transformers' "
            f"model for its config.json has them): {', '.join(unused[:3])}{' ...' if len(unused) > 3 else ''}")
    for note in notes:
        log(f"note: {note}")
    if notes:
        was = model.training
        model.eval()
        ours = model(idx, idx)[0].float().cpu()  # every position
        model.train(was)
        theirs = baseline_logits(model.config, weights, idx.cpu())
        shift = ((ours - theirs).abs().max() / theirs.abs().max()).item()
        log(f"note: the first logits moved by {shift:.3g} (largest difference over largest logit, one val batch) "
            f"from the checkpoint's")
