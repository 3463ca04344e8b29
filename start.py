"""How a run starts: from scratch, from its own checkpoint (resume, auto) or from a Hugging Face
folder, in two calls train.py makes around building the model and its optimizers:

    run, ckpt = setup(cfg, given, held)      # which start, the config, device, processes, out_dir, data
    ...                                      # model.GPT, ops.shard (FSDP2), optim.build_optimizers
    start = begin(run, ckpt, model, optimizers, val_batch)   # their first state, and the log

`setup` decides: init_from="auto" becomes "resume" when out_dir holds a checkpoint, else
"scratch"; a resume takes the checkpoint's config (checkpoint.resume_config); --hf_model takes
the folder's config.json as the model's shape (merged_config). `begin` carries it out: the
checkpoint's weights and optimizer moments, or the folder's weights (load_folder), or the fresh
initialization, then trims or starts the log. The rest of this module is the Hugging Face
folder: reading its config.json and weights into our GPT.
"""

import json
import os
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any, Callable

import torch

from checkpoint import (append_log, checkpoint_in, checkpoint_path, clean_stale, is_sharded, load_weights,
                        lock_out_dir, read_log, restore, resume_config, trim_log)
from configurator import UserError, complete, folder_problem
from dataset import check_vocabulary, dataset_dir, load_data, read_meta, recorded_vocab_size
from model import BASELINE, GPT, model_config
from ops import check_config, resolve_device, setup_distributed, start_tracker


@dataclass(frozen=True)
class Run:
    """Everything a run knows before its model exists, built once by setup; train.py's loop and ops.py's
    helpers read it.

    cfg: the full config (a namespace; on resume, the checkpoint's with this run's changes;
    device and dtype kept as asked, so each machine resolves its own); resumed_from:
    (iteration, the checkpoint's completed config) or None; tokens: seen before this run
    (0 from scratch); changed: the keys this resume changes, {key: [old, new]}; changes: every
    resume's, [{"iter", "changed"}] (checkpoint.resume_config); device, dtype ("float32" | "bfloat16"), ptdtype and autocast (a context,
    a null one in float32); rank, local_rank, world, ddp, master (rank 0) of the processes;
    data: dataset.load_data's dict; model_cfg: the model.GPTConfig; tokens_per_iter; n_moe:
    MoE blocks; ckpt_path, log_path in out_dir; log: prints on rank 0 only; tracker: a W&B run
    or None.
    """

    cfg: SimpleNamespace
    resumed_from: Any
    tokens: int
    changed: dict
    changes: list
    device: torch.device
    dtype: str
    ptdtype: torch.dtype
    autocast: AbstractContextManager
    rank: int
    local_rank: int
    world: int
    ddp: bool
    master: bool
    data: dict
    model_cfg: Any
    tokens_per_iter: int
    n_moe: int
    ckpt_path: str
    log_path: str
    log: Callable
    tracker: Any


def setup(cfg, given, held):
    """(Run, the checkpoint dict to resume from or None): the run's state before any model exists.

    cfg: a full config dict; given: the keys the user set. Rank 0 owns out_dir
    (checkpoint.lock_out_dir, into `held`, an ExitStack that releases it) before it reads or writes
    anything there: at once when the folder exists, else once the config and the data are checked
    (a refused run makes no folder). A W&B tracker (wandb_log) starts here, unless the checkpoint's
    run is finished. Raises UserError for bad input, a scratch run on an out_dir that holds one, or
    an out_dir another process owns.
    """
    if not cfg["out_dir"].strip():
        raise UserError(f"out_dir={cfg['out_dir']!r} is empty: set --out_dir=DIR (the run's checkpoint and log go "
                        f"there)")
    owner = int(os.environ.get("RANK", "0")) == 0  # rank 0, as setup_distributed reads it
    new_dir = owner and not os.path.isdir(cfg["out_dir"])
    if owner and not new_dir:  # it may hold a run: own it before reading the checkpoint
        held.enter_context(lock_out_dir(cfg["out_dir"]))
        clean_stale(cfg["out_dir"])  # what a save a SIGKILL cut short left: never the checkpoint
    cfg, ckpt, held_run = start_config(cfg, given)
    check_config({**cfg, "vocab_size": cfg["vocab_size"] or recorded_vocab_size(cfg["dataset"])})  # the real logits
    cfg = SimpleNamespace(**cfg)
    device_name, dtype = resolve_device(cfg.device, cfg.dtype)
    rank, local_rank, world = setup_distributed(cfg, device_name)
    ddp, master = torch.distributed.is_initialized(), rank == 0
    problem = new_dir and folder_problem(cfg.out_dir)  # said now; the folder is made once the data pass
    if problem:
        raise UserError(f"out_dir={cfg.out_dir!r}: {problem}")
    device = torch.device(f"cuda:{local_rank}" if device_name == "cuda" and ddp else device_name)
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if cfg.hf_model and ckpt is None:  # the model's tokenizer first: its advice beats the token files'
        check_data(cfg.hf_model, dataset_dir(cfg.dataset))
    data = load_data(cfg, prepare_here=local_rank == 0)
    cfg.vocab_size = cfg.vocab_size or meta_vocab_size(data["meta"], cfg.dataset)
    check_vocabulary(data["meta"], cfg.vocab_size, ckpt and ckpt.get("meta"), dataset_dir(cfg.dataset))
    if cfg.init_from == "scratch" and held_run:
        raise UserError(f"out_dir={cfg.out_dir!r} already holds a run ({held_run}): continue it with "
                        f"--init_from=resume (or auto), or train from scratch in another --out_dir (or delete it)")
    if new_dir:  # a refused config or dataset leaves no folder behind
        held.enter_context(lock_out_dir(cfg.out_dir))
    model_cfg = model_config(cfg)
    cfg.d_ff = model_cfg.d_ff  # saved resolved: the checkpoint names the shape it holds
    tokens, changed, changes = ckpt.pop("resume") if ckpt else (0, {}, [])
    finished = ckpt is not None and ckpt["iter"] == cfg.max_iters
    return Run(
        cfg=cfg, tokens=tokens, changed=changed, changes=changes, device=device,
        resumed_from=(ckpt["iter"], complete(ckpt["config"])) if ckpt else None, dtype=dtype, ptdtype=ptdtype,
        autocast=torch.autocast(device.type, dtype=ptdtype) if ptdtype != torch.float32 else nullcontext(),
        rank=rank, local_rank=local_rank, world=world, ddp=ddp, master=master, data=data, model_cfg=model_cfg,
        tokens_per_iter=cfg.batch_size * cfg.block_size * cfg.gradient_accumulation_steps,
        n_moe=sum(model_cfg.is_moe(layer) for layer in range(model_cfg.n_layer)),
        ckpt_path=checkpoint_path(cfg.out_dir, cfg.fsdp), log_path=os.path.join(cfg.out_dir, "log.jsonl"),
        log=(lambda *a: print(*a, flush=True)) if master else (lambda *a: None),
        tracker=start_tracker(cfg, master, finished, held)), ckpt


def start_config(cfg, given):
    """(config dict, checkpoint or None, the checkpoint file out_dir holds or None): which start.

    "auto" becomes "resume" when out_dir holds a checkpoint, else "scratch"; a resume's config is
    the checkpoint's with the keys the user gave (checkpoint.resume_config; the checkpoint dict
    carries "resume": (tokens seen, changed, changes) for setup); a Hugging Face start's model keys
    are its config.json's (merged_config).
    """
    held_run = checkpoint_in(cfg["out_dir"])
    held_run = held_run if os.path.exists(held_run) else None
    if cfg["init_from"] == "auto":
        cfg = {**cfg, "init_from": "resume" if held_run else "scratch"}
    if cfg["init_from"] == "resume":
        cfg, ckpt, tokens, changed, changes = resume_config(cfg, given)
        return cfg, {**ckpt, "resume": (tokens, changed, changes)}, held_run
    if cfg["hf_model"]:
        cfg = merged_config(cfg, given)  # the folder's config.json sets the model's shape
    return cfg, None, held_run


def meta_vocab_size(meta, dataset):
    """vocab_size=0's meaning: the dataset's meta.pkl's vocab_size (an int). UserError when there is none."""
    if not meta or "vocab_size" not in meta:
        raise UserError(f"vocab_size=0 means 'from meta.pkl', but {dataset_dir(dataset)} has none: set "
                        f"--vocab_size (50257 for GPT-2 BPE)")
    if type(meta["vocab_size"]) is not int:
        raise UserError(f"meta.pkl's vocab_size={meta['vocab_size']!r} must be an int")
    return meta["vocab_size"]


@dataclass(frozen=True)
class Start:
    """Where a run starts (begin): iteration (0 from scratch), tokens seen, the last val loss
    (nan before any eval), eval_due (a kill fell between the checkpoint and its eval row in the
    log, which the loop then completes: same model, same batches; every rank agrees), and the
    last logged train loss (nan when none)."""

    iter: int
    tokens: int
    val_loss: float
    eval_due: bool
    last_train_loss: float


def begin(run, ckpt, model, optimizers, val_batch):
    """The model's and optimizers' first state, in place, and the log; returns the Start.

    Resume: restore ckpt's weights and moments (checkpoint.restore) and trim the log to its
    iteration. Otherwise a new log, and with --hf_model the folder's weights (load_folder, which
    measures a changed function on val_batch, (B, T) token ids); else the fresh initialization.
    run: Run. A checkpoint a signal saved between evals (val_loss None) has no eval row to
    complete, unless it is at max_iters (the run's final eval is then still due).
    Raises UserError as restore and load_folder do.
    """
    start_iter, val_loss, evaluated = 0, float("nan"), True
    if ckpt is None and run.cfg.hf_model:  # continued pre-training of a Hugging Face model
        load_folder(model, run.cfg.hf_model, val_batch, run.log)
    if ckpt is not None:
        start_iter, val_loss = restore(ckpt, model, optimizers, run.cfg)
        evaluated = val_loss is not None
        val_loss = float("nan") if val_loss is None else val_loss
        if run.master:
            trim_log(run.log_path, start_iter)
            if run.changed:
                append_log(run.log_path, {"kind": "resume", "iter": start_iter, "tokens": run.tokens,
                                          "changed": run.changed})
    else:  # (setup refused a scratch run on an out_dir that holds one)
        if run.master:
            open(run.log_path, "w").close()
    logged = read_log(run.log_path) if run.master and os.path.exists(run.log_path) else []
    trained = [r["iter"] for r in logged if r["kind"] == "train"]
    if run.master and ckpt is not None and trained != list(range(1, start_iter + 1)):
        gap = next((i for i in range(1, start_iter + 1) if i not in set(trained)), None)
        run.log(f"note: {run.log_path} has {len(trained)} train rows for the checkpoint's {start_iter} iterations"
                + (f" (none for iteration {gap})" if gap else "") + ": truncated or edited; the run continues "
                "from its checkpoint, but its log is not one run's (a sweep refuses to record it)")
    missing = torch.tensor(float(start_iter > 0 and (evaluated or start_iter == run.cfg.max_iters) and not any(
        r["kind"] == "eval" and r["iter"] == start_iter for r in logged)), device=run.device)
    if run.ddp:
        torch.distributed.broadcast(missing, 0)  # rank 0 holds the log; every rank evaluates
    last_train_loss = next((r["loss"] for r in reversed(logged) if r["kind"] == "train"), float("nan"))
    return Start(start_iter, run.tokens, val_loss, bool(missing.item()), last_train_loss)




# -----------------------------------------------------------------------------
# A Hugging Face folder: continued pre-training with scale vectors on top
#
#     python data/corpus/prepare.py 'texts/*.txt' --out=data/mine --tokenizer=PATH   # its own token ids
#     python train.py --hf_model=PATH --dataset=mine --branch_scales=True --reparam=or --mlp_placement=in ...
#
# merged_config puts the folder's config.json into the run's config as our model keys
# (model_keys: layers, widths, heads, key/value heads, head width, d_ff, RoPE base, norm eps,
# tied head, vocabulary; Qwen3 adds QK-norm); check_data checks that the dataset was encoded with
# the folder's tokenizer; load_folder copies the weights into the GPT those keys build (load: the
# inverse of tools/export.py's map) and says what changed.
#
# The checkpoint's RMSNorm weights become the scale vectors' start, so the loaded function is
# unchanged under every switch that only adds or reparameterizes scales: a shared scale takes gamma
# as it is; HG gives each of q, k, v (gate, up) a copy; OR and ER set their magnitude and direction
# to reproduce gamma exactly (ScaleVector.set_); DP's extra scales start at 1. With scale="none" a
# pre-norm's gamma folds into the maps that read it (exact), the final norm's into an untied LM
# head. What the checkpoint never had changes the function and is said at start with how far the
# logits moved: DNP and in_norm (a normalization over d_ff), output norms, a QK-norm gamma or a
# tied final-norm gamma with scale="none" (nothing to hold it).


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
def load_folder(model, folder, idx, log):
    """load(model, folder), then log its notes and, when the function changed, how far: the largest
    logit difference on the token batch idx (B, T) against the checkpoint's own function (the same
    folder in our Llama-style baseline), relative to its largest logit. A model FSDP2 shards is
    loaded whole on the CPU first, then each rank takes its shards (checkpoint.load_weights)."""
    if is_sharded(model):
        whole = GPT(model.config)
        load_folder(whole, folder, idx.cpu(), log)
        load_weights(model, whole.state_dict(), folder)
        return
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
