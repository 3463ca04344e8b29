"""Export a train.py checkpoint to the Hugging Face format: the paper's scale vectors, served as a standard model.

    python -m tools.export --out_dir=out-shakespeare-char                 # writes out-shakespeare-char/hf
    python -m tools.export --out_dir=out-x --export_dir=hf-x --tol=1e-3

Claim C2 made practical: every input-role scale (HG, DP, OR/ER magnitudes, the
pre-norm scales, DNP's up-branch outer scale) folds into its linear map
(GPT.fold_scales). What is left maps onto a target's own weights (a tied
head's final-norm gamma, QK-norm's per-head gammas), or, for what no
standard architecture has, onto modeling_scalevec.py, which the folder then
ships: Llama's layers plus exactly those pieces.

    dense                                         -> LlamaForCausalLM
    dense + qk_norm                               -> Qwen3ForCausalLM
    dense + DNP, in_norm or output_norms (any mix
      with the above; the default run)            -> ScalevecForCausalLM (trust_remote_code=True)
    MoE in every block, top_k >= 2                -> MixtralForCausalLM
    MoE + shared_expert                           -> Qwen2MoeForCausalLM
    MoE + qk_norm                                 -> Qwen3MoeForCausalLM
    MoE + DNP, in_norm or output_norms, and the MoE cases above do not cover,
    and a placement normalizing q, k or v, or one MLP branch of the two:
    refused with one line saying why; nothing is written.

The folder holds config.json, model.safetensors (float32, the real vocab_size
rows only: the padding rows are dropped; its metadata holds the run's config),
the tokenizer (tokenizer.json, tokenizer_config.json: GPT-2 BPE or the
character vocabulary, as sample.py encodes; also char_vocab.json, itos, for
character-level data), generation_config.json, and README.md, a model card.
Before the folder appears, the exported model runs in transformers next to
this project's model on one random batch of block_size tokens; the export
fails if the largest logit difference exceeds --tol times max(1, largest
|logit|) (float32 rounding).
Greedy text matches `python sample.py --top_k=1` while prompt + new tokens fit
in block_size (sample.py then crops its context; transformers does not), up to
the first <|endoftext|> of a BPE model (transformers stops there, sample.py
does not). Needs the optional extras: pip install -e '.[export]'
"""

import os
import sys

if __package__ in (None, ""):  # run by its path (python tools/export.py): its imports live at the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from plumbing import common  # noqa: E402 (from the repository root, the path above)

common.set_omp_env()  # before torch loads: idle OpenMP threads sleep instead of spinning

import argparse
import copy
import dataclasses
import errno
import functools
import json
import math
import shutil
import tempfile
import warnings

import torch

from plumbing.checkpoint import checkpoint_in, load_model
from plumbing.common import cli
from plumbing.disk import SHORT_WRITE, remove_leftovers, temporary_prefix
from configurator import UserError, folder_problem
from plumbing.dataset import bpe_encoding, checked_encoding, codec_kind, hf_tokenizer
from model import BRANCHES, CHOICES, MODEL_KEYS

TOLERANCE = 1e-4  # largest |logit difference| allowed, relative to max(1, largest |logit|); float32
MODELING_FILE = "modeling_scalevec.py"  # shipped into folders that need it; lives beside this file
HERE = os.path.dirname(os.path.abspath(__file__))


def normalized(cfg, key):
    """The branches of `key` (attn_placement: q, k, v; mlp_placement: gate, up) its placement normalizes."""
    return [b for b in BRANCHES[key] if CHOICES[key][getattr(cfg, key)].normalizes(b)]


def refusal(cfg):
    """Why `cfg` has no exact architecture to export to, as one line naming the switch; None if it has one.
    The placements answer through their methods (model.Placement), a fork's as the shipped ones."""
    attn, mlp = normalized(cfg, "attn_placement"), normalized(cfg, "mlp_placement")
    if attn:
        return (f"attn_placement={cfg.attn_placement!r} normalizes the outputs of {', '.join(attn)}: no transformers "
                f"architecture, and not {MODELING_FILE}, has that; train with a placement without a normalization")
    if mlp and len(mlp) < len(BRANCHES["mlp_placement"]):
        return (f"mlp_placement={cfg.mlp_placement!r} normalizes {' and '.join(mlp)} over d_ff but not "
                f"{' and '.join(b for b in BRANCHES['mlp_placement'] if b not in mlp)}: {MODELING_FILE} normalizes "
                f"both branches or neither, and no transformers architecture normalizes any; train with a placement "
                f"that normalizes both or neither")
    if cfg.n_experts and (mlp or cfg.output_norms):
        switch = "output_norms=True" if cfg.output_norms else f"mlp_placement={cfg.mlp_placement!r}"
        return (f"{switch} with n_experts={cfg.n_experts} cannot be exported: {MODELING_FILE} extends dense "
                "Llama layers, and no MoE architecture in transformers has a norm inside its experts or after them: "
                "train it dense (n_experts=0), or with mlp_placement 'in' or 'dual' and output_norms=False")
    if not cfg.n_experts:
        return None
    if cfg.qk_norm and cfg.shared_expert:
        return ("qk_norm=True with shared_expert=True cannot be exported: Qwen3-MoE has QK-norm but no "
                "shared expert, Qwen2-MoE a shared expert but no QK-norm")
    if cfg.qk_norm or cfg.shared_expert:
        return None
    if cfg.top_k == 1:
        return ("top_k=1 cannot be exported without qk_norm or shared_expert: Mixtral renormalizes the "
                "top-1 weight to 1, this model keeps the raw softmax probability")
    if cfg.moe_every != 1:
        return (f"moe_every={cfg.moe_every} cannot be exported without qk_norm or shared_expert: Mixtral "
                "has an MoE block in every layer")
    return None


def needs_code(cfg):
    """Whether `cfg` has pieces no standard architecture holds (a placement's normalization over d_ff,
    as DNP's and in_norm's; output norms), so the folder ships modeling_scalevec.py."""
    return bool(normalized(cfg, "mlp_placement")) or cfg.output_norms


def architecture(cfg):
    """The transformers class name that `cfg` exports to (call refusal() first)."""
    if needs_code(cfg):
        return "ScalevecForCausalLM"
    if not cfg.n_experts:
        return "Qwen3ForCausalLM" if cfg.qk_norm else "LlamaForCausalLM"
    if cfg.qk_norm:
        return "Qwen3MoeForCausalLM"
    return "Qwen2MoeForCausalLM" if cfg.shared_expert else "MixtralForCausalLM"


def hf_config(cfg, arch, eos=None, bos=None):
    """config.json as a dict, in the keys the published checkpoints of `arch` use; `eos`: the
    tokenizer's end-of-text id, or None; `bos`: its beginning-of-text id (None: eos, as GPT-2
    uses one token for both)."""
    d = {
        "architectures": [arch],
        "model_type": {"LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3", "MixtralForCausalLM": "mixtral",
                       "Qwen2MoeForCausalLM": "qwen2_moe", "Qwen3MoeForCausalLM": "qwen3_moe",
                       "ScalevecForCausalLM": "scalevec"}[arch],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.n_embd,
        "intermediate_size": cfg.d_ff,
        "num_hidden_layers": cfg.n_layer,
        "num_attention_heads": cfg.n_head,
        "num_key_value_heads": cfg.n_kv_head,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.block_size,
        "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_theta,
        "tie_word_embeddings": cfg.tie_embeddings,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "torch_dtype": "float32",
        "bos_token_id": eos if bos is None else bos,  # sample.py adds no BOS token: named, never prepended
        "eos_token_id": eos,
        "use_cache": True,
    }
    if arch not in ("LlamaForCausalLM", "ScalevecForCausalLM"):
        d |= {"use_sliding_window": False, "sliding_window": None}
    if arch in ("LlamaForCausalLM", "ScalevecForCausalLM"):
        d |= {"mlp_bias": False, "pretraining_tp": 1}
    if arch == "ScalevecForCausalLM":
        module = MODELING_FILE.removesuffix(".py")
        d |= {"auto_map": {"AutoConfig": f"{module}.ScalevecConfig",
                           "AutoModelForCausalLM": f"{module}.ScalevecForCausalLM"},
              "qk_norm": cfg.qk_norm, "ff_norm": bool(normalized(cfg, "mlp_placement")),
              "output_norms": cfg.output_norms}
    elif arch == "MixtralForCausalLM":
        d |= {"intermediate_size": cfg.expert_d_ff, "num_local_experts": cfg.n_experts,
              "num_experts_per_tok": cfg.top_k, "router_jitter_noise": 0.0}
    elif arch in ("Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"):
        d |= {"num_experts": cfg.n_experts, "num_experts_per_tok": cfg.top_k, "moe_intermediate_size": cfg.expert_d_ff,
              "decoder_sparse_step": cfg.moe_every, "mlp_only_layers": [], "norm_topk_prob": cfg.top_k > 1}
        if arch == "Qwen2MoeForCausalLM":
            d |= {"shared_expert_intermediate_size": cfg.expert_d_ff, "qkv_bias": True}
    return d


def ones_if_none(scale, dim):
    """The effective gamma of a ScaleVector, detached; ones of width `dim` where there is none."""
    return torch.ones(dim) if scale is None else scale().detach()


def gamma(norm):
    """The effective scale of an RMSNorm, ones where it has none (HG's bare pre-norms, scale='none')."""
    return ones_if_none(norm.scale, norm.dim)


def hf_state_dict(model):
    """The transformers weights of the GPT `model` (left unchanged): {name: float32 tensor}.

    Folds a copy (GPT.fold_scales), then reads every remaining gamma through
    its module. A tied embedding stays tied: the final-norm gamma becomes the
    target's final RMSNorm weight instead of folding into the shared matrix.
    Names follow the published checkpoints (MoE experts one by one), which
    every transformers version since Qwen3 loads, and modeling_scalevec.py's
    for its pieces (mlp.gate_norm, attn_output_norm, mlp_output_norm).
    """
    cfg, arch = model.config, architecture(model.config)
    V = cfg.vocab_size
    final_gamma = gamma(model.norm_f).clone()
    model = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="fold_scales\\(\\): untying")
        model.fold_scales()
    sd = {"model.embed_tokens.weight": model.wte.weight[:V]}
    if cfg.tie_embeddings:
        sd["model.norm.weight"] = final_gamma
    else:
        sd["model.norm.weight"] = gamma(model.norm_f)
        sd["lm_head.weight"] = model.lm_head.weight[:V]
    for i, b in enumerate(model.blocks):
        p = f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = gamma(b.attn_norm)
        sd[p + "post_attention_layernorm.weight"] = gamma(b.mlp_norm)
        for ours, theirs in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "o_proj")):
            sd[p + f"self_attn.{theirs}.weight"] = getattr(b.attn, ours).effective_weight().detach()
        if arch == "Qwen2MoeForCausalLM":  # its q, k, v always carry a bias
            for name in ("q_proj", "k_proj", "v_proj"):
                sd[p + f"self_attn.{name}.bias"] = torch.zeros(sd[p + f"self_attn.{name}.weight"].shape[0])
        if cfg.qk_norm:
            sd[p + "self_attn.q_norm.weight"] = gamma(b.attn.q_norm)
            sd[p + "self_attn.k_norm.weight"] = gamma(b.attn.k_norm)
        if cfg.output_norms:
            sd[p + "attn_output_norm.weight"] = gamma(b.attn_out_norm)
            sd[p + "mlp_output_norm.weight"] = gamma(b.mlp_out_norm)
        if not b.moe:
            sd.update(mlp_weights(b.mlp, p + "mlp."))
            if b.mlp.gate.out_norm:  # DNP's gate gamma_a (output-role); ones for in_norm. The up branch's
                sd[p + "mlp.gate_norm.weight"] = ones_if_none(b.mlp.gate.out_scale, cfg.d_ff)  # is in down_proj
        elif arch == "MixtralForCausalLM":
            sd[p + "block_sparse_moe.gate.weight"] = b.mlp.router.effective_weight().detach()
            for e, mlp in enumerate(b.mlp.experts):
                sd.update(mlp_weights(mlp, p + f"block_sparse_moe.experts.{e}.", names=("w1", "w3", "w2")))
        else:
            sd[p + "mlp.gate.weight"] = b.mlp.router.effective_weight().detach()
            for e, mlp in enumerate(b.mlp.experts):
                sd.update(mlp_weights(mlp, p + f"mlp.experts.{e}."))
            if b.mlp.shared_expert is not None:
                shared = mlp_weights(b.mlp.shared_expert, p + "mlp.shared_expert.")
                # Qwen2-MoE gates the shared expert by sigmoid(w . x); w = 0 gives exactly 1/2,
                # which a down projection times 2 (exact in floating point) undoes.
                shared[p + "mlp.shared_expert.down_proj.weight"] *= 2
                sd.update(shared)
                sd[p + "mlp.shared_expert_gate.weight"] = torch.zeros(1, cfg.n_embd)
    return {k: v.detach().float().contiguous().clone() for k, v in sd.items()}


def mlp_weights(mlp, prefix, names=("gate_proj", "up_proj", "down_proj")):
    """SwiGLU weights of one of our MLPs under the target's names (gate, up, down)."""
    return {f"{prefix}{n}.weight": lin.effective_weight().detach() for n, lin in zip(names, (mlp.gate, mlp.up, mlp.down))}


def import_transformers():
    """(transformers, safetensors.torch), offline; UserError with the install line if missing."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder never needs the network
    try:
        import safetensors.torch
        import transformers
    except ImportError as e:
        raise UserError(f"export needs transformers and safetensors ({e}): "
                        f"pip install -e '.[export]'") from None
    transformers.utils.logging.disable_progress_bar()
    return transformers, safetensors.torch


# -----------------------------------------------------------------------------
# The tokenizer: the ids sample.py's codec (dataset.make_codec) gives, as transformers files


def char_tokenizer(itos):
    """A tokenizers.Tokenizer giving character i of `itos` (a list, or a dict id -> char) the id i.

    Every character is its own token and decoding joins them with nothing between, as the
    project's char codec; a character outside itos is an error at encode time, as there.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {itos[i]: i for i in range(len(itos))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # [\s\S]: newlines too
    tok.decoder = decoders.Fuse()
    return tok


@functools.lru_cache(maxsize=2)  # converting 50k merges takes seconds; tests export many folders
def bpe_tokenizer_json(name):
    """tiktoken's encoding `name` as a tokenizers.Tokenizer, serialized (tokenizer.json's text).

    Uses transformers' TikTokenConverter on the ranks tiktoken has already loaded (offline: no
    vocabulary file read or fetched). Raises UserError when the converted special tokens do not
    keep tiktoken's ids (encodings whose special ids leave gaps).
    """
    from tokenizers import AddedToken
    from transformers.convert_slow_tokenizer import TikTokenConverter

    enc = bpe_encoding(name)  # its _mergeable_ranks, _pat_str, _special_tokens: private, as transformers reads them

    class Converter(TikTokenConverter):
        def load_tiktoken_bpe(self, _):  # the ranks in memory, instead of a file path
            return enc._mergeable_ranks

    tok = Converter(None, enc._pat_str).converted()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in enc._special_tokens])
    moved = {t: i for t, i in enc._special_tokens.items() if tok.token_to_id(t) != i}
    if moved:
        raise UserError(f"tiktoken encoding {name!r}: special tokens {sorted(moved)} would change ids in "
                        "tokenizer.json; export a model trained with GPT-2 BPE (r50k_base) or a char vocabulary")
    return tok.to_str()


def write_tokenizer(folder, meta, cfg):
    """Write tokenizer.json and tokenizer_config.json (and char_vocab.json) for the codec sample.py uses.

    tokenizer_config.json names PreTrainedTokenizerFast, so AutoTokenizer takes tokenizer.json as
    it is on every target (without it, a Qwen3 folder gets Qwen2's tokenizer class, which replaces
    the pre-tokenizer). Returns (beginning-of-text id (the end-of-text id unless the tokenizer has
    its own), end-of-text id, padding id (each or None), one line for the model card); writes
    nothing and returns (None, None, None, why) when meta.pkl names no tokenizer. A Hugging Face
    tokenizer (kind "hf") is written back with its special tokens and chat template.
    A char vocabulary has no pad token: every id is a character, and decoding drops a special token
    wherever it appears, so a padding character would vanish from the generated text too.
    """
    kind, bos = codec_kind(meta, cfg.vocab_size), None
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": cfg.block_size,
              "clean_up_tokenization_spaces": False}
    if kind is None:
        return None, None, None, ("none known: the dataset's meta.pkl had no char vocabulary and names no encoding, and the "
                            "vocabulary is not GPT-2's, so the ids are some other tokenizer's; pair it with that one")
    if kind == "char":
        itos = [meta["itos"][i] for i in range(len(meta["itos"]))]
        text, eos, pad = char_tokenizer(itos).to_str(), None, None
        with open(os.path.join(folder, "char_vocab.json"), "w", encoding="utf-8") as f:
            json.dump({"itos": itos}, f, ensure_ascii=False)
        note = (f"character-level, {len(itos)} characters (also `char_vocab.json`: `itos`, id -> character); "
                "no end-of-text token, so generation runs to max_new_tokens; no pad token (every id is a "
                "character), so generate one prompt at a time")
    elif kind == "hf":  # the model's own tokenizer (data/corpus/prepare.py --tokenizer), written back
        tok, eot = hf_tokenizer(meta), meta.get("eos_token")
        special = {"eos_token": eot, "pad_token": eot, **meta.get("special_tokens", {})}
        special = {k: v for k, v in special.items() if v is not None}
        text, config = meta["tokenizer"], config | special
        eos, pad = (tok.token_to_id(special[k]) if k in special else None for k in ("eos_token", "pad_token"))
        if "bos_token" in special:
            bos = tok.token_to_id(special["bos_token"])
        if meta.get("chat_template"):
            with open(os.path.join(folder, "chat_template.jinja"), "w", encoding="utf-8") as f:
                f.write(meta["chat_template"])
        note = f"the dataset's own Hugging Face tokenizer (tokenizer.json as it was), end of text `{eot}` (id {eos})"
    else:
        name = meta.get("encoding", "r50k_base") if meta else "r50k_base"
        enc = checked_encoding(meta, cfg.vocab_size)  # its size is the head's rows
        text = bpe_tokenizer_json(name)
        eot = "<|endoftext|>"
        eos = enc._special_tokens.get(eot)
        pad = eos
        if eos is not None:
            config |= {"bos_token": eot, "eos_token": eot, "pad_token": eot}
        note = (f"GPT-2 BPE (tiktoken `{name}`), the same ids; generation stops at `{eot}` (id {eos}), "
                "which sample.py does not")
    with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return eos if bos is None else bos, eos, pad, note


# -----------------------------------------------------------------------------
# The check and the model card


@torch.no_grad()
def max_logit_diff(model, folder, seed=0):
    """Largest |logit difference| between `model` and the transformers model in `folder`, on
    one random batch of block_size token ids, divided by max(1, largest |logit|); float."""
    transformers, _ = import_transformers()
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        folder, local_files_only=True, trust_remote_code=needs_code(model.config)).eval()
    cfg = model.config
    idx = torch.randint(0, cfg.vocab_size, (1, cfg.block_size), generator=torch.Generator().manual_seed(seed))
    ours = model.eval()(idx, idx)[0]  # targets given: logits at every position
    theirs = hf(idx).logits.float()
    return ((ours - theirs).abs().max() / ours.abs().max().clamp_min(1.0)).item()


def readme(cfg, arch, tokenizer_note, diff, source, n_params, ckpt):
    """The folder's README.md: a model card (YAML front matter the Hub reads), what the model is,
    how to load it, the tokenizer, and the training facts `ckpt` holds (when given)."""
    code = needs_code(cfg)
    tags = ["scalevec", "scale-vectors", "custom_code" if code else hf_config(cfg, arch)["model_type"]]
    trust = ", trust_remote_code=True" if code else ""
    if code:
        ff_norm, gate_scale = bool(normalized(cfg, "mlp_placement")), cfg.mlp.carries_outer("gate")
        pieces = [p for p, on in (("a normalization over d_ff with its output-role gate scale (DNP's)",
                                   ff_norm and gate_scale),
                                  ("a normalization over d_ff without a gate scale (in_norm's)",
                                   ff_norm and not gate_scale),
                                  ("Gemma-style output norms", cfg.output_norms),
                                  ("Qwen3's QK-norm", cfg.qk_norm)) if on]
        what = (f"`{arch}` from the shipped `{MODELING_FILE}`: Llama's layers plus {', '.join(pieces)}; "
                f"load it with `trust_remote_code=True`.")
    else:
        what = f"`{arch}`, a standard transformers architecture: no code from scalevec is needed."
    facts = [f"- Architecture: {what}",
             f"- Parameters: {n_params:,} ({'tied' if cfg.tie_embeddings else 'untied'} embedding and LM head)",
             f"- Context: {cfg.block_size} tokens (block_size); beyond it the model was never trained",
             f"- Tokenizer: {tokenizer_note}"]
    start = ((ckpt or {}).get("config") or {}).get("hf_model")
    if start:
        facts.append(f"- Started from: the Hugging Face model `{start}` (train.py --hf_model), then continued")
    if ckpt:
        loss = ckpt.get("val_loss")
        tokens = ckpt.get("tokens")
        facts += [f"- Trained: {ckpt.get('iter', '?')} iterations"
                  + (f", {tokens:,} tokens" if isinstance(tokens, int) else ""),
                  "- Final validation loss: " + (f"{loss:.4f} nats/token" if isinstance(loss, (int, float))
                                                 else "not measured at the last save")]
    checked = ("logits not checked against the source model (--no_check)" if math.isnan(diff) else
               f"largest logit difference from the source model on a random batch: {diff:.2e} (relative to "
               "max(1, largest |logit|))")
    facts.append(f"- Source: `{source}`; input-role scale vectors folded into the weights (claim C2); {checked}")
    model_cfg = {k: v for k, v in dataclasses.asdict(cfg).items() if k in MODEL_KEYS}
    return "\n".join([
        "---", "library_name: transformers", "pipeline_tag: text-generation", "tags:",
        *[f"- {t}" for t in tags], "---", "",
        f"# {arch} exported from a scalevec checkpoint", "",
        "A model from the scalevec reimplementation of \"Negligible in Size, Significant in Effect: On Scale "
        "Vectors in Large Language Models\".", "",
        *facts, "",
        "```python", "from transformers import pipeline",
        f"generate = pipeline(\"text-generation\", model=\"<this folder>\"{trust})",
        "print(generate(\"ROMEO:\", max_new_tokens=100, do_sample=False)[0][\"generated_text\"])", "```", "",
        *(["Pass `trust_remote_code=True` to `AutoTokenizer.from_pretrained` too: it reads config.json, and "
            "without it transformers asks before running the shipped code.", ""] if code else []),
        "## scalevec config", "",
        "The model's switches (model.GPTConfig); the run's full config is in model.safetensors' metadata "
        "(`scalevec_config`).", "",
        "```json", json.dumps(model_cfg, indent=2), "```", ""])


def export(model, export_dir, meta=None, check=True, tol=TOLERANCE, source="a GPT", ckpt=None):
    """Write `model` (a GPT) as a transformers folder `export_dir`; returns the largest logit difference.

    meta: the dataset's meta.pkl dict (its char vocabulary, if any, becomes the tokenizer);
    ckpt: the checkpoint dict, whose config, iter, tokens and val_loss go into the model card
    and the safetensors metadata (None: the model's config only).
    Writes into a folder of export_dir's name inside a fresh hidden one beside it, moved into
    place only after the check passes, so a refused or failed export leaves nothing behind
    (and transformers caches a shipped modeling file under the final name only). The check
    (skipped when check=False, then nan is returned) loads the folder with
    transformers.AutoModelForCausalLM and compares logits on one random batch.
    Raises UserError: a configuration with no exact architecture (refusal()), an existing
    export_dir, missing transformers, or a logit difference above tol.
    """
    cfg = model.config
    reason = refusal(cfg)
    if reason:
        raise UserError(reason)
    if os.path.islink(export_dir):  # (a dangling one too: the rename below could not replace it)
        target = os.readlink(export_dir)
        state = "" if os.path.exists(export_dir) else ", which does not exist"
        raise UserError(f"export_dir={export_dir!r} is a symbolic link (to {target}{state}): an export is written "
                        f"only as a folder of its own; remove the link (what it points to stays) or pass another "
                        f"--export_dir")
    if os.path.exists(export_dir):
        raise UserError(f"export_dir={export_dir!r} already exists: pass another --export_dir or remove it")
    problem = folder_problem(export_dir)
    if problem:
        raise UserError(f"export_dir={export_dir!r}: {problem}")
    import_transformers()
    parent = os.path.dirname(os.path.abspath(export_dir))
    os.makedirs(parent, exist_ok=True)
    remove_leftovers(parent, ".export-", "a half-written export")
    tmp = tempfile.mkdtemp(prefix=temporary_prefix(".export-"), dir=parent)  # a fresh name: never someone's folder
    folder = os.path.join(tmp, os.path.basename(os.path.abspath(export_dir)))
    try:
        os.mkdir(folder)  # the umask's mode, not mkdtemp's private 0700
        diff = write_folder(folder, model, meta, ckpt, check, tol, source)
        os.replace(folder, export_dir)
    except OSError as e:  # a full disk, a quota, a name taken meanwhile: the hidden folder goes, nothing half-written
        if e.filename and os.path.isabs(e.filename) and not os.path.abspath(e.filename).startswith(tmp + os.sep):
            raise  # a path outside the export (transformers' cache under HOME): cli's line names it and its fix
        what = os.path.basename(e.filename or "") or "the export"
        fix = ("free space (or name another disk with --export_dir), then run the same command again"
               if e.errno in (errno.ENOSPC, errno.EDQUOT) else
               "raise the file-size limit (ulimit -f unlimited) or name another disk with --export_dir"
               if e.errno in (errno.EFBIG, SHORT_WRITE) else
               f"see what is at {export_dir} now (it must not exist), or pass another --export_dir")
        raise UserError(f"{e.strerror} writing {what}: nothing written to {export_dir}; {fix}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return diff


def write_folder(folder, model, meta, ckpt, check, tol, source):
    """Write export()'s files into the empty `folder` and check them; returns the logit difference."""
    _, st = import_transformers()
    cfg, arch = model.config, architecture(model.config)
    bos, eos, pad, tokenizer_note = write_tokenizer(folder, meta, cfg)
    run_config = (ckpt or {}).get("config") or dataclasses.asdict(cfg)
    metadata = {"format": "pt", "scalevec_config": json.dumps(run_config, sort_keys=True)}
    if ckpt:
        metadata["scalevec_training"] = json.dumps({k: ckpt.get(k) for k in ("iter", "tokens", "val_loss")})
    weights = hf_state_dict(model)

    def put(name, data):  # Python's own write: a full disk is an OSError naming the file
        try:
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data if isinstance(data, bytes) else data.encode())
        except OSError as e:
            raise OSError(e.errno, e.strerror, name) from None

    put("model.safetensors", st.save(weights, metadata=metadata))
    put("config.json", json.dumps(hf_config(cfg, arch, eos, bos), indent=2))
    put("generation_config.json", json.dumps({"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": pad},
                                             indent=2))
    if needs_code(cfg):
        shutil.copyfile(os.path.join(HERE, MODELING_FILE), os.path.join(folder, MODELING_FILE))
    diff = max_logit_diff(model, folder) if check else float("nan")
    if check and not diff <= tol:
        raise UserError(f"the exported {arch} differs from the checkpoint by {diff:.2e} (relative) in the logits, "
                        f"above --tol={tol:g}: not written (a bug worth reporting)")
    n_params = sum(w.numel() for w in weights.values())
    put("README.md", readme(cfg, arch, tokenizer_note, diff, source, n_params, ckpt))
    return diff


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out_dir", default="out-shakespeare-char", help="the run's folder (its ckpt.pt or ckpt.dcp)")
    p.add_argument("--export_dir", default=None, help="folder to create (default: <out_dir>/hf)")
    p.add_argument("--tol", type=float, default=TOLERANCE,
                   help="largest logit difference allowed, relative to max(1, largest |logit|)")
    p.add_argument("--no_check", action="store_true", help="skip comparing logits in transformers")
    args = p.parse_args(argv)
    if not args.tol > 0 or math.isinf(args.tol):
        raise UserError(f"--tol={args.tol:g}: need a finite number > 0 (default {TOLERANCE:g})")
    export_dir = args.export_dir or os.path.join(args.out_dir, "hf")
    ckpt_path = checkpoint_in(args.out_dir)
    model, ckpt = load_model(ckpt_path)
    # (a SIGTERM under cli unwinds through export()'s cleanup as Ctrl-C does: no half-written folder)
    diff = export(model, export_dir, ckpt.get("meta"), check=not args.no_check, tol=args.tol, source=ckpt_path, ckpt=ckpt)
    checked = "not checked" if args.no_check else f"largest logit difference {diff:.2e} <= {args.tol:g}"
    code = f", with {MODELING_FILE}: load with trust_remote_code=True" if needs_code(model.config) else ""
    print(f"wrote {export_dir} ({architecture(model.config)}{code}; {checked})")


if __name__ == "__main__":
    cli(main)
