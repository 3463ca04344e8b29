"""Start from a Hugging Face Llama or Qwen3 folder: continued pre-training with scale vectors on top.

    python data/corpus/prepare.py 'texts/*.txt' --out=data/mine --tokenizer=PATH   # its own token ids
    python train.py --hf_model=PATH --dataset=mine --branch_scales=True --reparam=or --mlp_placement=in ...

When --hf_model is set and the run starts from scratch (a resume reads its own
checkpoint), train.py calls three functions here: `merged_config` puts the
folder's config.json into the run's config as our model keys (`model_keys`:
layers, widths, heads, key/value heads, head width, d_ff, RoPE base, norm eps,
tied head, vocabulary; Qwen3 adds QK-norm), `check_data` checks that the
dataset was encoded with the folder's tokenizer, and `start` copies the
weights into the GPT those keys build (`load`: the inverse of
tools/export.py's map) and says what changed.

The checkpoint's RMSNorm weights become the scale vectors' start, so the loaded
function is unchanged under every switch that only adds or reparameterizes
scales: a shared scale takes gamma as it is; HG gives each of q, k, v (gate,
up) a copy; OR and ER set their magnitude and direction to reproduce gamma
exactly (ScaleVector.set_); DP's extra scales start at 1. With scale="none" a
pre-norm's gamma folds into the maps that read it (exact), the final norm's
into an untied LM head. What the checkpoint never had changes the function and
is said at start with how far the logits moved: DNP and in_norm (a normalization
over d_ff), output norms, a QK-norm gamma or a tied final-norm gamma with
scale="none" (nothing to hold it).
"""

import json
import os

import torch

from configurator import UserError

ARCHITECTURES = {"LlamaForCausalLM": False, "Qwen3ForCausalLM": True}  # name -> QK-norm


def read_config(folder):
    """folder/config.json as a dict; UserError (one line) when the folder or file is missing or
    the file is not JSON."""
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        raise UserError(f"hf_model={folder!r}: no config.json there (point --hf_model at a Hugging Face model "
                        f"folder, as save_pretrained writes it)")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(f"{path} is not JSON ({str(e)[:80]})") from None


def model_keys(folder):
    """Our model keys from folder/config.json: {n_layer, n_embd, n_head, n_kv_head, head_dim, d_ff,
    rope_theta, norm_eps, tie_embeddings, vocab_size, qk_norm}.

    Raises UserError naming the field for what our model does not compute: another architecture,
    a RoPE scaling (only the default RoPE), biases, an activation other than SiLU, sliding-window
    attention.
    """
    c = read_config(folder)
    arch = (c.get("architectures") or ["?"])[0]
    if arch not in ARCHITECTURES:
        raise UserError(f"hf_model={folder!r}: architectures={c.get('architectures')} is not one this model "
                        f"computes ({', '.join(ARCHITECTURES)})")
    def scaled(rope):  # a RoPE entry (either spelling) that asks for more than the default rotation
        return bool(rope) and rope.get("rope_type", rope.get("type", "default")) != "default"

    refused = {"rope_scaling": scaled(c.get("rope_scaling")), "rope_parameters": scaled(c.get("rope_parameters")),
               "attention_bias": c.get("attention_bias", False), "mlp_bias": c.get("mlp_bias", False),
               "hidden_act": c.get("hidden_act", "silu") != "silu",
               "use_sliding_window": c.get("use_sliding_window", False)}
    for field, bad in refused.items():
        if bad:
            raise UserError(f"hf_model={folder!r}: config.json's {field}={c.get(field)!r} is not computed here (RoPE "
                            f"without scaling, no biases, SiLU, full attention): this model cannot reproduce it")
    try:
        heads = c["num_attention_heads"]
        theta = (c.get("rope_parameters") or {}).get("rope_theta", c.get("rope_theta", 10000.0))
        return {"n_layer": c["num_hidden_layers"], "n_embd": c["hidden_size"], "n_head": heads,
                "n_kv_head": c.get("num_key_value_heads") or heads,
                "head_dim": c.get("head_dim") or c["hidden_size"] // heads, "d_ff": c["intermediate_size"],
                "rope_theta": float(theta), "norm_eps": float(c["rms_norm_eps"]),
                "tie_embeddings": bool(c.get("tie_word_embeddings", False)), "vocab_size": c["vocab_size"],
                "qk_norm": ARCHITECTURES[arch]}
    except KeyError as e:
        raise UserError(f"hf_model={folder!r}: config.json lacks {e.args[0]!r}, which a {arch} config has: it is "
                        f"incomplete (save the model with save_pretrained)") from None


def merged_config(cfg, given):
    """cfg with the model keys of cfg["hf_model"]'s config.json. Raises UserError naming the key
    when the command line sets one of them to another value (the folder decides the shape)."""
    keys = model_keys(cfg["hf_model"])
    weight_files(cfg["hf_model"])  # the weights exist: said before anything is made
    if cfg["n_experts"]:
        raise UserError(f"--n_experts={cfg['n_experts']} with --hf_model: the folder holds a dense model; drop "
                        f"--n_experts")
    for key, value in keys.items():
        if key in given and cfg[key] != value:
            raise UserError(f"--{key}={cfg[key]} but {cfg['hf_model']}/config.json gives {value}: drop --{key} "
                            f"(the loaded model's shape is its own)")
    return {**cfg, **keys}


def check_data(folder, dataset_folder):
    """UserError (one line) when the data's ids are not this model's tokenizer's: dataset_folder's
    meta.pkl records another tokenizer (a char vocabulary, a tiktoken encoding, a tokenizer.json of
    another vocabulary). Called before the token files' own checks, whose advice (--vocab_size)
    does not apply here. Token files whose meta.pkl names no tokenizer pass on their size alone."""
    import pickle
    where, path = dataset_folder, os.path.join(dataset_folder, "meta.pkl")
    try:
        with open(path, "rb") as f:
            meta = pickle.load(f)
    except Exception:  # missing or unreadable: the data's own checks say which, after this
        return
    meta = meta if isinstance(meta, dict) else None
    fix = f"prepare it with the model's tokenizer: python data/corpus/prepare.py ... --tokenizer={folder}"
    if meta and ("itos" in meta or "encoding" in meta):
        what = "a character vocabulary" if "itos" in meta else f"tiktoken's {meta['encoding']}"
        raise UserError(f"{where} is encoded with {what}, not {folder}'s tokenizer: {fix}")
    path = os.path.join(folder, "tokenizer.json")
    if meta and "tokenizer" in meta and os.path.isfile(path):
        from tokenizers import Tokenizer
        if Tokenizer.from_str(meta["tokenizer"]).get_vocab() != Tokenizer.from_file(path).get_vocab():
            raise UserError(f"{where} is encoded with another tokenizer than {folder}'s (their vocabularies "
                            f"differ): {fix}")


def weight_files(folder):
    """folder's safetensors files: model.safetensors, or the shards model.safetensors.index.json
    lists; UserError when there is none or a listed shard is missing."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    elif os.path.isfile(os.path.join(folder, "model.safetensors")):
        files = ["model.safetensors"]
    else:
        raise UserError(f"hf_model={folder!r}: no model.safetensors (or its index) there: save the model with "
                        f"save_pretrained (safetensors)")
    missing = [f for f in files if not os.path.isfile(os.path.join(folder, f))]
    if missing:
        raise UserError(f"hf_model={folder!r}: its index lists {missing[0]}, which is not there")
    return [os.path.join(folder, f) for f in files]


def read_weights(folder):
    """{name: tensor} of folder's safetensors files (weight_files)."""
    from safetensors.torch import load_file
    weights = {}
    for path in weight_files(folder):
        weights.update(load_file(path))
    return weights


@torch.no_grad()
def load(model, folder):
    """Copy folder's weights into `model` (a GPT built from merged_config's keys), in place.

    Returns the notes for the run's start: [] when the function is the checkpoint's, else one line
    per switch that changes it. Raises UserError naming a tensor that is missing or of another shape.
    """
    cfg, hf = model.config, read_weights(folder)

    def take(name, shape=None):
        if name not in hf:
            raise UserError(f"hf_model={folder!r}: the weights lack {name} (config.json describes another model)")
        w = hf[name].float()
        if shape is not None and tuple(w.shape) != tuple(shape):
            raise UserError(f"hf_model={folder!r}: {name} is {tuple(w.shape)}, config.json makes {tuple(shape)}")
        return w

    notes = []
    V = cfg.vocab_size
    model.wte.weight[:V] = take("model.embed_tokens.weight", (V, cfg.n_embd))
    if not cfg.tie_embeddings:
        model.lm_head.weight[:V] = take("lm_head.weight", (V, cfg.n_embd))
    for i, b in enumerate(model.blocks):
        p = f"model.layers.{i}."
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
                    note = "scale='none' has no QK-norm gamma to hold the checkpoint's: the function changes"
                    notes += [note] if note not in notes else []
    gamma = take("model.norm.weight", (cfg.n_embd,))
    if model.norm_f.scale is not None:
        set_gamma(model.norm_f.scale, gamma)
    elif not cfg.tie_embeddings:
        model.lm_head.weight.mul_(gamma[None, :])
    elif not torch.equal(gamma, torch.ones_like(gamma)):
        notes.append("scale='none' with a tied head has no final-norm gamma to hold the checkpoint's: the function "
                     "changes (--tie_embeddings cannot differ from the folder's; use scale vectors)")
    if cfg.mlp.norm:
        notes.append(f"mlp_placement={cfg.mlp_placement!r} normalizes over d_ff, which the checkpoint never did: the "
                     f"function changes")
    if cfg.attn.norm:
        notes.append(f"attn_placement={cfg.attn_placement!r} adds a normalization the checkpoint never had: the "
                     f"function changes")
    if cfg.output_norms:
        notes.append("output_norms=True adds normalizations the checkpoint never had: the function changes")
    return notes


def set_gamma(scale, gamma):
    """scale.set_(gamma); UserError for a scale class without set_ (a fork's)."""
    try:
        scale.set_(gamma)
    except NotImplementedError as e:
        raise UserError(f"--hf_model: {e}") from None


def put_gamma(gamma, shared, branches):
    """A pre-norm's loaded gamma: into its shared scale, else into each branch's input scale (HG),
    else (scale="none") folded into the columns of the maps that read it, all exact. UserError
    for a scale class without set_ (a fork's)."""
    scales = [shared] if shared is not None else [lin.in_scale for lin in branches if lin.in_scale is not None]
    for scale in scales:
        set_gamma(scale, gamma)
    if not scales:
        for lin in branches:
            lin.weight.mul_(gamma[None, :])


@torch.no_grad()
def start(model, folder, idx, log):
    """load(model, folder), then log its notes and, when the function changed, how far: the largest
    logit difference on the token batch idx (B, T) against the checkpoint's own function (the same
    folder in our Llama-style baseline), relative to its largest logit."""
    from dataclasses import replace

    from model import BASELINE, GPT
    notes = load(model, folder)
    log(f"loaded {folder} (config.json and weights)")
    for note in notes:
        log(f"note: {note}")
    if notes:
        reference = GPT(replace(model.config, **BASELINE, output_norms=False)).to(idx.device)
        load(reference, folder)
        was = model.training
        model.eval()
        ours, theirs = model(idx, idx)[0].float(), reference(idx, idx)[0].float()  # every position
        model.train(was)
        shift = ((ours - theirs).abs().max() / theirs.abs().max()).item()
        log(f"note: the first logits moved by {shift:.3g} (largest difference over largest logit, one val batch) "
            f"from the checkpoint's")
