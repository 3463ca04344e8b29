"""What a run needs in memory, before anything is built: the parameter count and one micro-batch's
activations of a config (estimate_size), the memory the device it trains on holds (memory_limit),
and the one-line refusal with the fix when they do not fit (check_memory); for a checkpoint, its
config against its weights' shapes and the memory it needs to be built (check_buildable)."""

import math
import os
import sys

from configurator import UserError


GB = 1e9


def estimate_size(cfg):
    """(parameters, activation bytes of one float32 micro-batch) of a run config (a dict), roughly:
    per block 2 n_embd (n_head + n_kv_head) head_dim (attention) + 3 n_embd d_ff (SwiGLU; per
    expert in MoE blocks, plus the router and any shared expert), the token embedding and an untied
    LM head. Builds nothing."""
    n, n_layer, vocab = cfg["n_embd"], cfg["n_layer"], 64 * math.ceil(cfg["vocab_size"] / 64)
    head_dim = cfg.get("head_dim") or n / cfg["n_head"]
    attention = 2 * n * (cfg["n_head"] + (cfg.get("n_kv_head") or cfg["n_head"])) * head_dim
    d_ff = cfg["d_ff"] or 64 * math.ceil(8 * n / 3 / 64)
    expert = cfg["expert_d_ff"] or d_ff
    moe_layers = n_layer // cfg["moe_every"] if cfg["n_experts"] else 0
    moe_mlp = cfg["n_experts"] * (3 * n * expert + n) + (3 * n * expert if cfg["shared_expert"] else 0)
    params = n_layer * attention + (n_layer - moe_layers) * 3 * n * d_ff + moe_layers * moe_mlp \
        + vocab * n * (1 if cfg["tie_embeddings"] else 2)
    ffn = cfg["top_k"] * expert if cfg["n_experts"] else d_ff
    tokens = cfg["batch_size"] * cfg["block_size"]
    activations = 4 * tokens * (n_layer * (8 * n + 3 * ffn) + 2 * vocab)
    return params, activations


def memory_limit(device):
    """(bytes, what) of the memory a run on `device` keeps its weights in: the CUDA device's when
    torch is loaded and CUDA is in use (cheap to ask), else this machine's RAM or, when smaller, the
    process's own limit (process_limits: RLIMIT_AS, a cgroup's memory.max); None when unknown."""
    torch = sys.modules.get("torch")
    if torch is not None and (device.startswith("cuda") or device == "auto"):
        try:
            if torch.cuda.is_available():
                index = int(device.partition(":")[2] or os.environ.get("LOCAL_RANK", 0))
                props = torch.cuda.get_device_properties(index)
                return props.total_memory, f"CUDA device {index} ({props.name})"
            if device != "auto":
                return None  # resolve_device says CUDA is missing
        except Exception:  # a bad index or driver: resolve_device names it
            return None
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine's RAM"
    except (AttributeError, ValueError, OSError):
        return None
    return min([ram, *process_limits()], key=lambda limit: limit[0])


def process_limits(cgroup_root="/sys/fs/cgroup", proc_cgroup="/proc/self/cgroup"):
    """[(bytes, what)] of the limits this process's memory has below the machine's RAM: its address-space
    limit (RLIMIT_AS, as `ulimit -v` sets it) and its cgroup v2 memory.max (a container's or a Slurm job's);
    [] where there are none or they cannot be read. An allocator over them fails with a traceback, so
    check_memory compares against the smallest."""
    found = []
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            found.append((soft, f"this process's address-space limit (RLIMIT_AS, ulimit -v {soft // 1024})"))
    except (ImportError, OSError, ValueError):
        pass
    try:
        with open(proc_cgroup) as f:
            rel = next((line.strip().split("::", 1)[1] for line in f if line.startswith("0::")), None)
        if rel is not None:
            with open(os.path.join(cgroup_root, rel.lstrip("/"), "memory.max")) as f:
                text = f.read().strip()
            if text.isdigit():
                found.append((int(text), f"this process's cgroup memory.max ({rel or '/'})"))
    except (OSError, ValueError):
        pass
    return found


def state_bytes(params, fsdp, world):
    """Bytes per process of the float32 weights, gradients and AdamW's two moments: 16 a parameter,
    split over the `world` processes under FSDP2 (fsdp), whole on each under DDP."""
    return 16 * params / (world if fsdp else 1)


def check_memory(cfg, can_shard=True):
    """UserError, one line with the estimate, when the float32 weights, gradients and AdamW states
    (state_bytes: ~16 bytes a parameter, over WORLD_SIZE under fsdp) and one micro-batch's
    activations and logits (estimate_size) cannot fit in the memory the run trains in (per device:
    a micro-batch is per process). Names the largest batch_size that fits when a smaller
    micro-batch is the fix, and --fsdp=True with the processes it needs when sharding is (and the
    optimizer can step shards: can_shard)."""
    params, activations = estimate_size(cfg)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    state = state_bytes(params, cfg.get("fsdp"), world)
    limit = memory_limit(cfg["device"])
    if limit is None or state + activations <= limit[0]:
        return
    gb = lambda b: f"{b / GB:.3g}" if b < 10**300 else "inf"  # noqa: E731
    sharded = f" (sharded over {world} processes)" if cfg.get("fsdp") and world > 1 else ""
    need = f"about {gb(state)} GB for float32 weights, gradients and AdamW states{sharded} and {gb(activations)} " \
        f"GB of activations and logits for a micro-batch of batch_size={cfg['batch_size']} x " \
        f"block_size={cfg['block_size']} tokens"
    fits = int((limit[0] - state) / (activations / cfg["batch_size"])) if state < limit[0] else 0
    room = limit[0] - activations / cfg["batch_size"]  # beside a micro-batch of one sequence
    shards = math.ceil(16 * params / room) if room > 0 and 16 * params / room < 1e6 else 0
    shard = f", or shard them with --fsdp=True under torchrun over {shards} or more processes (GPUs)" \
        if can_shard and shards > max(world, 1) else ""
    if fits >= 1:
        keep = max(1, cfg["batch_size"] // fits)
        raise UserError(f"{need}, more than the {gb(limit[0])} GB of {limit[1]}: use --batch_size={fits} or less "
                        f"(--gradient_accumulation_steps={cfg['gradient_accumulation_steps'] * keep} keeps about "
                        f"the same tokens per iteration){shard}")
    heads = ("n_head", "n_kv_head", "head_dim") if cfg.get("n_kv_head") or cfg.get("head_dim") else ()
    size = ", ".join(f"{k}={cfg[k]}" for k in ("n_layer", "n_embd", *heads, "d_ff", "vocab_size", "n_experts",
                                               "expert_d_ff") if cfg[k])
    raise UserError(f"{size}: about {gb(params)} billion parameters need {need}, more than the {gb(limit[0])} GB of "
                    f"{limit[1]}: lower --n_embd, --n_layer, --d_ff or --n_experts"
                    + (" (or the heads' widths)" if heads else "") + shard)


def check_buildable(config, shapes, source, device="cpu"):
    """UserError, one line naming source, when the model a checkpoint's `config` describes cannot be built
    from its weights (`shapes`: {name: shape}, checkpoint.saved_shapes; None when unknown): its values
    out of range (configurator.check_values), its blocks or width not the weights'
    (read from their shapes, so a config edited to n_layer=10**6 costs nothing), its float32 weights
    past the memory of `device` (memory.memory_limit, as train.py's start compares; for inference: 4 bytes
    a parameter), then every tensor's shape against the model built on the meta device (no memory).
    Every command that builds a model from a checkpoint calls it first, as train.py's resume checks
    its config (ops.check_config) before building."""
    import torch

    from configurator import check_values, complete
    from model import GPT, model_config

    cfg = complete(config)
    fix = "the config or the weights were changed, or other code wrote them: use the checkpoint as saved, or train again"
    try:
        check_values(cfg)
    except UserError as e:
        raise UserError(f"{source}'s config: {e}; {fix}") from None
    blocks = {int(k.split(".")[1]) for k in shapes or () if k.startswith("blocks.") and k.split(".")[1].isdigit()}
    if shapes is not None and blocks != set(range(cfg["n_layer"])):
        held = f"blocks 0..{max(blocks)}" if blocks and blocks == set(range(len(blocks))) else f"{len(blocks)} blocks"
        raise UserError(f"{source}'s config says n_layer={cfg['n_layer']:,} but its weights hold {held}: {fix}")
    embedding = (shapes or {}).get("wte.weight")
    if embedding is not None and (len(embedding) != 2 or embedding[1] != cfg["n_embd"]):
        raise UserError(f"{source}'s config says n_embd={cfg['n_embd']:,} but its token embedding wte.weight is "
                        f"{embedding}: {fix}")
    model_cfg = model_config(cfg)
    params, _ = estimate_size({**cfg, "vocab_size": model_cfg.vocab_size})
    limit = memory_limit(device)
    if limit is not None and 4 * params > limit[0]:
        raise UserError(f"{source}'s model has about {params / 1e9:.3g} billion parameters, {4 * params / GB:.3g} GB "
                        f"in float32, more than the {limit[0] / GB:.3g} GB of {limit[1]}: use a machine (or "
                        f"--device) with more memory")
    if shapes is None:
        return
    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in GPT(model_cfg).state_dict().items()}
    problems = shape_problems(expected, shapes)
    if problems:
        raise UserError(f"{source}'s weights do not match the model its config describes: {problems}; {fix}")


def shape_problems(expected, held):
    """'' when the shapes `held` ({name: shape}) are the model's `expected` ones, else the first three
    differences in words (missing, not in the model, another shape); a 0-d magnitude for a (1,) one
    is the same (OR/ER magnitudes were 0-d before FSDP2 needed them (1,))."""
    problems = [f"{k} missing" for k in expected if k not in held]
    problems += [f"{k} not in this model" for k in held if k not in expected]
    problems += [f"{k} is {held[k]}, the config makes {shape}" for k, shape in expected.items()
                 if k in held and held[k] != shape and not (held[k] == () and shape == (1,))]
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return "; ".join(problems[:3]) + more if problems else ""
