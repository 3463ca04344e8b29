"""Export a train.py checkpoint to the Hugging Face format: the paper's scale vectors, served as a standard model.

    python export.py --out_dir=out-shakespeare-char                 # writes out-shakespeare-char/hf
    python export.py --out_dir=out-x --export_dir=hf-x --tol=1e-3

Claim C2 made practical: every input-role scale (HG, DP, OR/ER magnitudes, the
pre-norm scales) folds into its linear map (GPT.fold_scales), so the folded
model is a plain architecture that transformers (and what reads its format:
vLLM, llama.cpp converters) loads with no code from this project. What is left
maps onto the target's own weights: the pre-norm and final-norm RMSNorm
weights, and QK-norm's per-head gammas.

    dense                                         -> LlamaForCausalLM
    dense + qk_norm                               -> Qwen3ForCausalLM
    MoE in every block, top_k >= 2                -> MixtralForCausalLM
    MoE + shared_expert                           -> Qwen2MoeForCausalLM
    MoE + qk_norm                                 -> Qwen3MoeForCausalLM
    mlp_placement=dual_norm (DNP) or in_norm, output_norms, and the MoE cases above
    do not cover: refused with one line saying why; nothing is written.

The folder holds config.json, model.safetensors (float32, the real vocab_size
rows only: the padding rows are dropped), README.md naming the tokenizer, and
for character-level data char_vocab.json (itos: token id -> character).
Before the folder appears, the exported model runs in transformers next to
this project's model on one random batch of block_size tokens; the export
fails if the largest logit difference exceeds --tol times max(1, largest
|logit|) (float32 rounding).
Greedy text matches `python sample.py --top_k=1` while prompt + new tokens fit
in block_size (sample.py then crops its context; transformers does not).
Needs the optional extras: pip install -r requirements-export.txt
"""

import argparse
import copy
import json
import os
import shutil
import tempfile
import warnings

import torch

from checkpoint import load_model
from configurator import UserError, cli

TOLERANCE = 1e-4  # largest |logit difference| allowed, relative to max(1, largest |logit|); float32


def refusal(cfg):
    """Why `cfg` has no exact standard architecture, as one line naming the switch; None if it has one."""
    if cfg.mlp_placement in ("dual_norm", "in_norm"):
        return (f"mlp_placement={cfg.mlp_placement!r} cannot be exported: its normalization over d_ff inside "
                "the MLP has no place in Llama, Qwen or Mixtral")
    if cfg.output_norms:
        return ("output_norms=True cannot be exported: Llama, Qwen and Mixtral have no norm between a "
                "branch and the residual add (Gemma's do, but Gemma also scales the embedding and uses GELU)")
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


def architecture(cfg):
    """The transformers class name that `cfg` exports to (call refusal() first)."""
    if not cfg.n_experts:
        return "Qwen3ForCausalLM" if cfg.qk_norm else "LlamaForCausalLM"
    if cfg.qk_norm:
        return "Qwen3MoeForCausalLM"
    return "Qwen2MoeForCausalLM" if cfg.shared_expert else "MixtralForCausalLM"


def hf_config(cfg, arch):
    """config.json as a dict, in the keys the published checkpoints of `arch` use."""
    d = {
        "architectures": [arch],
        "model_type": {"LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3", "MixtralForCausalLM": "mixtral",
                       "Qwen2MoeForCausalLM": "qwen2_moe", "Qwen3MoeForCausalLM": "qwen3_moe"}[arch],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.n_embd,
        "intermediate_size": cfg.d_ff,
        "num_hidden_layers": cfg.n_layer,
        "num_attention_heads": cfg.n_head,
        "num_key_value_heads": cfg.n_head,
        "head_dim": cfg.n_embd // cfg.n_head,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.block_size,
        "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_theta,
        "tie_word_embeddings": cfg.tie_embeddings,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "torch_dtype": "float32",
        "bos_token_id": None,  # sample.py neither adds a BOS token nor stops at an EOS token
        "eos_token_id": None,
        "use_cache": True,
    }
    if arch != "LlamaForCausalLM":
        d |= {"use_sliding_window": False, "sliding_window": None}
    if arch == "LlamaForCausalLM":
        d |= {"mlp_bias": False, "pretraining_tp": 1}
    elif arch == "MixtralForCausalLM":
        d |= {"intermediate_size": cfg.expert_d_ff, "num_local_experts": cfg.n_experts,
              "num_experts_per_tok": cfg.top_k, "router_jitter_noise": 0.0}
    elif arch in ("Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"):
        d |= {"num_experts": cfg.n_experts, "num_experts_per_tok": cfg.top_k, "moe_intermediate_size": cfg.expert_d_ff,
              "decoder_sparse_step": cfg.moe_every, "mlp_only_layers": [], "norm_topk_prob": cfg.top_k > 1}
        if arch == "Qwen2MoeForCausalLM":
            d |= {"shared_expert_intermediate_size": cfg.expert_d_ff, "qkv_bias": True}
    return d


def gamma(norm):
    """The effective scale of an RMSNorm, ones where it has none (HG's bare pre-norms, scale='none')."""
    return torch.ones(norm.dim) if norm.scale is None else norm.scale().detach()


def hf_state_dict(model):
    """The transformers weights of the GPT `model` (left unchanged): {name: float32 tensor}.

    Folds a copy (GPT.fold_scales), then reads every remaining gamma through
    its module. A tied embedding stays tied: the final-norm gamma becomes the
    target's final RMSNorm weight instead of folding into the shared matrix.
    Names follow the published checkpoints (MoE experts one by one), which
    every transformers version since Qwen3 loads.
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
                sd[p + f"self_attn.{name}.bias"] = torch.zeros(cfg.n_embd)
        if cfg.qk_norm:
            sd[p + "self_attn.q_norm.weight"] = gamma(b.attn.q_norm)
            sd[p + "self_attn.k_norm.weight"] = gamma(b.attn.k_norm)
        if not b.moe:
            sd.update(mlp_weights(b.mlp, p + "mlp."))
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
                        f"pip install -r requirements-export.txt") from None
    transformers.utils.logging.disable_progress_bar()
    return transformers, safetensors.torch


@torch.no_grad()
def max_logit_diff(model, folder, seed=0):
    """Largest |logit difference| between `model` and the transformers model in `folder`, on
    one random batch of block_size token ids, divided by max(1, largest |logit|); float."""
    transformers, _ = import_transformers()
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()
    cfg = model.config
    idx = torch.randint(0, cfg.vocab_size, (1, cfg.block_size), generator=torch.Generator().manual_seed(seed))
    ours = model.eval()(idx, idx)[0]  # targets given: logits at every position
    theirs = hf(idx).logits.float()
    return ((ours - theirs).abs().max() / ours.abs().max().clamp_min(1.0)).item()


def readme(cfg, arch, meta, diff, source):
    """The folder's README.md: what it is, how to load it, which tokenizer to pair."""
    if meta and "itos" in meta:
        tok = ("Character-level: `char_vocab.json` holds `itos`, the character of each token id. Encode with "
               "`[itos.index(c) for c in text]`, decode with `''.join(itos[i] for i in ids)`.")
    else:
        enc = (meta or {}).get("encoding", "r50k_base")
        tok = (f"GPT-2 BPE (tiktoken `{enc}`); pair it with GPT-2's tokenizer, e.g. `tiktoken.get_encoding('{enc}')`"
               " or transformers' `GPT2TokenizerFast` files. No EOS token is set: pass `eos_token_id=50256` to "
               "`generate` to stop at `<|endoftext|>`.")
    return "\n".join([
        f"# {arch} exported from a scalevec checkpoint", "",
        f"Source: `{source}`; input-role scale vectors folded into the weights (claim C2). "
        f"Largest logit difference from the source model on a random batch: {diff:.2e} "
        "(relative to max(1, largest |logit|)).", "",
        "```python", "from transformers import AutoModelForCausalLM",
        "model = AutoModelForCausalLM.from_pretrained(\"<this folder>\")", "```", "",
        f"Tokenizer: {tok}", "",
        f"Context: {cfg.block_size} tokens (block_size); beyond it the model was never trained.", ""])


def export(model, export_dir, meta=None, check=True, tol=TOLERANCE, source="a GPT"):
    """Write `model` (a GPT) as a transformers folder `export_dir`; returns the largest logit difference.

    Writes into a fresh hidden folder beside export_dir, renamed only after the check
    passes, so a refused or failed export leaves nothing behind. The check (skipped
    when check=False, then nan is returned) loads the folder with
    transformers.AutoModelForCausalLM and compares logits on one random batch.
    Raises UserError: a configuration with no exact standard architecture
    (refusal()), an existing export_dir, missing transformers, or a logit
    difference above tol.
    """
    cfg = model.config
    reason = refusal(cfg)
    if reason:
        raise UserError(reason)
    if os.path.exists(export_dir):
        raise UserError(f"export_dir={export_dir!r} already exists: pass another --export_dir or remove it")
    _, st = import_transformers()
    arch = architecture(cfg)
    parent = os.path.dirname(os.path.abspath(export_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".export-", dir=parent)  # a fresh name: never someone's folder
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 would keep the exported folder private
    try:
        st.save_file(hf_state_dict(model), os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(hf_config(cfg, arch), f, indent=2)
        if meta and "itos" in meta:
            with open(os.path.join(tmp, "char_vocab.json"), "w") as f:
                json.dump({"itos": list(meta["itos"][i] for i in range(cfg.vocab_size))}, f, ensure_ascii=False)
        diff = max_logit_diff(model, tmp) if check else float("nan")
        if check and not diff <= tol:
            raise UserError(f"the exported {arch} differs from the checkpoint by {diff:.2e} (relative) in the logits, "
                            f"above --tol={tol:g}: not written (a bug worth reporting)")
        with open(os.path.join(tmp, "README.md"), "w") as f:
            f.write(readme(cfg, arch, meta, diff, source))
        for name in os.listdir(tmp):  # safetensors writes 0600
            os.chmod(os.path.join(tmp, name), 0o666 & ~umask)
        os.replace(tmp, export_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return diff


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out_dir", default="out-shakespeare-char", help="folder holding ckpt.pt")
    p.add_argument("--export_dir", default=None, help="folder to create (default: <out_dir>/hf)")
    p.add_argument("--tol", type=float, default=TOLERANCE,
                   help="largest logit difference allowed, relative to max(1, largest |logit|)")
    p.add_argument("--no_check", action="store_true", help="skip comparing logits in transformers")
    args = p.parse_args(argv)
    export_dir = args.export_dir or os.path.join(args.out_dir, "hf")
    ckpt_path = os.path.join(args.out_dir, "ckpt.pt")
    model, ckpt = load_model(ckpt_path)
    diff = export(model, export_dir, ckpt.get("meta"), check=not args.no_check, tol=args.tol, source=ckpt_path)
    checked = "not checked" if args.no_check else f"largest logit difference {diff:.2e} <= {args.tol:g}"
    print(f"wrote {export_dir} ({architecture(model.config)}; {checked})")


if __name__ == "__main__":
    cli(main)
