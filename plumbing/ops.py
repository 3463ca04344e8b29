"""What a run checks and says, apart from the training itself: the config check against the
registries (check_config, inert_keys, the notes at start), what it prints at its start (describe:
the groups, the size, the FLOPs and time it needs), its log rows (the train rows read from the
device in batches: TrainRows), log.jsonl itself (appended in whole rows, read back, trimmed on
resume) and W&B tracker, its progress lines and warnings as it goes, the diverged message and its
end-of-run sample.

The choices of a switch live with the code that implements them (model.CHOICES: scale classes,
placements; optim.CHOICES: optimizers, schedules, decay recipes), and so do the rules that say
when a key does nothing (model_inert_keys, optim.inert_keys); check_config and inert_keys put
them together for train.py, research/sweep.py and `--help`. How a run starts is start.py's; the
process utilities every command shares are common.py's.
"""

import json
import math
import os
import time
from types import SimpleNamespace

import torch

import model
import optim
from plumbing import contracts, fused
from plumbing.checkpoint import atomic_write
from plumbing.common import agree, fmt_duration, open_checked, peak_flops, stop_signal
from plumbing.disk import SHORT_WRITE
from configurator import UserError, check, unusual
from plumbing.dataset import make_codec
from plumbing.mechanism import renamed_mechanism
from plumbing.memory import check_memory
from optim import format_groups, lr_multiplier

LOG_NAME = "log.jsonl"

PROGRESS_EVERY_S = 15  # a progress line at least this often, whatever log_interval says
CPU_FLOPS = 2e11  # FLOP/s a free, fast CPU reaches on these models (the default run: ~1.4e11 on 2 cores)
# What a stop signal does at each place train.py checks for one: said as it arrives, wherever that is.
STOP_NOTE = ("stopping: the step under way finishes (every micro-step of its accumulation), an evaluation stops at "
             "its next batch, the end-of-run sample at its next token; the last whole iteration is saved, then the run "
             "exits (a second Ctrl-C quits at once, keeping the last checkpoint)")


def choices():
    """{key: {name: meaning}} of every key whose values are a registry's names (model.CHOICES,
    optim.CHOICES), for --help: an entry's `meaning`, a class's first docstring line, else ""."""
    def meaning(entry):
        if isinstance(entry, type):  # a scale class: its docstring's first line
            return entry.__doc__.strip().splitlines()[0]
        return getattr(entry, "meaning", "")

    return {key: {name: meaning(registry[name]) if isinstance(registry, dict) else "" for name in registry}
            for key, registry in {**model.CHOICES, **optim.CHOICES}.items()}


def check_config(cfg, built=None):
    """UserError, one line, for anything a run would refuse, before it reads data or builds
    anything: every value's range (configurator.check), the memory estimate (memory.check_memory), the optimizer's
    and schedule's keys (optim.check), every registry entry's contract (contracts.check) and the model's
    (model.model_config). sweep.py checks every run of an ablation this way before starting any, each
    model shape built once (built: contracts.check)."""
    chosen = optim.OPTIMIZERS.get(cfg["optimizer"])
    check(cfg)
    check_memory(cfg, can_shard=bool(chosen and chosen.shards))
    try:
        contracts.check(SimpleNamespace(**cfg), built)  # optim.check among them
    except ValueError as e:
        raise UserError(str(e)) from None
    model.model_config(cfg)


def model_inert_keys(mcfg):
    """[(key, why)]: the model keys whose value changes nothing about the model of GPTConfig `mcfg` (MoE
    keys in a dense model, dual_sites without a dual placement)."""
    inert = []
    if mcfg.n_experts == 0:
        inert += [(k, "n_experts is 0 (a dense model: no expert, no router)") for k in model.MOE_KEYS]
    elif mcfg.moe_every > mcfg.n_layer:
        why = f"moe_every={mcfg.moe_every} is above n_layer={mcfg.n_layer}, so no block is a mixture of experts"
        inert += [(k, why) for k in ("n_experts", *model.MOE_KEYS) if k != "moe_every"]
    if not (mcfg.attn.scales_output_map() or mcfg.mlp.scales_output_map()):
        inert.append(("dual_sites", f"attn_placement is {mcfg.attn_placement!r} and mlp_placement "
                                    f"{mcfg.mlp_placement!r} (it says where the dual placements put scales, "
                                    f"and neither is one)"))
    return inert


@torch.no_grad()
def scale_stats(gpt):
    """{site: {mean, std, min, max}} of every effective gamma of model `gpt`, as floats (the eval rows' "scales")."""
    stats = {}
    for name, sv in gpt.scale_vectors():
        g = sv().float()
        if hasattr(g, "full_tensor"):  # sharded by FSDP2: gathered (a collective: every rank calls this)
            g = g.full_tensor()
        stats[name] = {"mean": g.mean().item(), "std": g.std().item() if g.numel() > 1 else 0.0,
                       "min": g.min().item(), "max": g.max().item()}
    return stats


def param_report(gpt):
    """A few lines: total parameters, scale-vector parameters by role and their share, and the extra
    parameters over the same-size baseline (model.baseline_of)."""
    total, n_scale = gpt.num_params(), gpt.num_scale_params()
    by_role = {"input": 0, "output": 0}
    for _, m in gpt.scale_vectors():
        by_role[m.role] += sum(p.numel() for p in m.parameters())
    with torch.device("meta"):
        base_total = model.GPT(model.baseline_of(gpt.config)).num_params()
    extra = total - base_total
    active = gpt.num_active_params()
    moe = f" ({active:,} active per token)" if gpt.config.n_experts else ""
    return "\n".join([
        f"parameters: {total:,} ({total / 1e6:.2f}M){moe}, embedding {gpt.wte.weight.numel():,}"
        f"{' (tied with the LM head)' if gpt.lm_head.weight is gpt.wte.weight else ''}",
        f"scale vectors: {n_scale:,} = {n_scale / total:.3e} of the model "
        f"(input role {by_role['input']:,}, output role {by_role['output']:,})",
        f"extra over the baseline of this size ({base_total:,}): {extra:+,} = {extra / total:.3e} of the model",
    ])


def inert_keys(cfg):
    """[(key, why)]: the keys whose value changes nothing about the run under the rest of cfg (a
    dict with every key; a valid config), each once with the first reason found: the optimizer's
    (optim.inert_keys), the model's (model_inert_keys) and W&B's names without W&B.

    Only where certain: every value of the key trains the same run. train.py notes those the
    user gave explicitly (inert_notes); ablation.config_hash leaves a key added later out of a
    run's hash where it does nothing."""
    found = optim.inert_keys(SimpleNamespace(**cfg)) + model_inert_keys(model.model_config(cfg))
    if not cfg.get("hf_model"):
        found.append(("hf_check", "hf_model is '' (no folder to check)"))
    if not cfg.get("wandb_log"):
        found += [(k, "wandb_log is False (nothing goes to W&B)") for k in ("wandb_project", "wandb_run_name")]
    inert = {}
    for key, why in found:
        inert.setdefault(key, why)
    return list(inert.items())


def unusual_notes(cfg):
    """One 'note: key=value is outside its usual range ...' line per value configurator.unusual
    finds, unless the key does nothing in this config (inert_keys)."""
    inert = dict(inert_keys(cfg))
    return [f"note: {key}={cfg[key]!r} is {why}" for key, why in unusual(cfg) if key not in inert]


def inert_notes(cfg, given):
    """One 'note: --key=value has no effect: why; it is ignored' line per key the user gave
    (`given`, as load_config returns it) that inert_keys says changes nothing."""
    where = getattr(given, "where", {})
    return [f"note: --{key}={cfg[key]} has no effect: {why}; it is ignored" if where.get(key, "on the command line")
            == "on the command line" else f"note: {key}={cfg[key]!r} ({where[key]}) has no effect: {why}; it is ignored"
            for key, why in inert_keys(cfg) if key in given]


# -----------------------------------------------------------------------------
# What a run says: at its start, as it goes, at its end


def describe(run, raw_model, groups, given=frozenset()):
    """Print the parameter report, the optimizer groups, the device and the batch; warn on odd setups,
    and note each key the user gave (`given`) that changes nothing here (inert_keys)."""
    cfg, log = run.cfg, run.log
    log(param_report(raw_model))
    log(format_groups(groups))
    log(fused.summary(raw_model))
    parallel = f" ({'FSDP2' if cfg.fsdp else 'DDP'}, {torch.distributed.get_backend()})" if run.ddp else ""
    log(f"device {run.device} ({run.dtype}{', compiled' if cfg.compile else ''}), {run.world} process(es)"
        f"{parallel}, "
        f"{run.tokens_per_iter:,} tokens/iter = {cfg.batch_size} batch x {cfg.block_size} block x "
        f"{cfg.gradient_accumulation_steps} accumulation; {raw_model.flops_per_token() / 1e6:.1f} MFLOP/token")
    for note in inert_notes(vars(cfg), given) + unusual_notes(vars(cfg)):
        log(note)
    if run.changed:
        it = run.resumed_from[0]
        changed = ", ".join(f"{k}={new!r} (the checkpoint's: {old!r})" for k, (old, new) in run.changed.items())
        log(f"note: resuming at iteration {it} with {changed}: iterations 1-{it} ran on the checkpoint's values "
            f"(the checkpoint's 'changes' and a 'resume' row of the log record it)")
    check_duration(run, raw_model)
    if run.device.type == "cpu" and cpu_seconds(run, raw_model) > 3600:
        parts = run_flops(run, raw_model)
        per_iter = raw_model.flops_per_token() * run.tokens_per_iter
        log(f"warning: this config needs {sum(parts.values()):.2g} FLOPs ("
            + ", ".join(f"{k} {v:.2g}" for k, v in parts.items() if v) + f"; {per_iter:.2g} per training "
            f"iteration): even at {CPU_FLOPS:.0e} FLOP/s a CPU takes about {fmt_duration(cpu_seconds(run, raw_model))}"
            f". It is sized for a GPU: use --device=cuda there, or a smaller model, fewer --max_iters, --eval_iters "
            f"or --sample_tokens here")
    speed = device_flops(run)
    slow = {part: flops / speed for part, flops in run_flops(run, raw_model).items()
            if speed and part != "training" and flops / speed > 60}
    if slow:
        evals = (cfg.max_iters // cfg.eval_interval + 1 if cfg.eval_interval > 0 else 1) + 1
        what = {"evaluation": f"the {evals} evaluations of eval_iters={cfg.eval_iters} batches take",
                "sample": f"the end-of-run sample of sample_tokens={cfg.sample_tokens} (no KV cache) takes"}
        log("note: " + " and ".join(f"{what[p]} at least {fmt_duration(t)}" for p, t in slow.items())
            + f" ({speed:.2g} FLOP/s, {run.device.type}'s best): lower --eval_iters (or raise --eval_interval) or "
            f"--sample_tokens to shorten them; a SIGTERM stops either at its next batch or token")
    head = 6 * raw_model.config.vocab_size * cfg.n_embd / raw_model.flops_per_token()  # the logits' share
    if run.device.type == "cpu" and head > 0.5 and cpu_seconds(run, raw_model) > 300:  # (softmax over V: slower still)
        log(f"note: the logits over {raw_model.config.vocab_size:,} tokens are {head:.0%} of this model's FLOPs: "
            f"configs/unified_bpe_cpu.py sizes a BPE run for a CPU (a shorter block_size and batch_size)")
    if cfg.compile and cfg.n_experts:
        log("warning: --compile=True with n_experts > 0: each batch routes a different number of tokens to "
            "each expert, so torch.compile recompiles often (minutes each); --compile=False is usually faster")
    decays = "min_lr" in optim.LR_SCHEDULES[cfg.lr_schedule].keys  # a schedule that decays to min_lr
    if decays and all(lr_multiplier(it, cfg) >= 1 for it in range(cfg.warmup_iters, cfg.max_iters)):
        log(f"note: max_iters={cfg.max_iters} ends before the LR decays (warmup_iters={cfg.warmup_iters}): "
            f"fine for a smoke test, not for a result")
    if run.resumed_from and run.resumed_from[1]["max_iters"] != cfg.max_iters and cfg.lr_schedule != "constant":
        it, saved = run.resumed_from
        old = SimpleNamespace(**saved)
        if any(lr_multiplier(j, cfg) != lr_multiplier(j, old) for j in range(it)):  # else (warmup) nothing differs
            log(f"note: max_iters={cfg.max_iters}, the checkpoint's run had {saved['max_iters']}: the LR schedule is "
                f"a function of max_iters, so iterations 1-{it} ran on the {saved['max_iters']}-iteration "
                f"{cfg.lr_schedule} schedule and the rest follow the {cfg.max_iters}-iteration one (LR multiplier "
                f"{lr_multiplier(it, cfg):.3g} at iteration {it}, {lr_multiplier(it, old):.3g} on the checkpoint's): "
                f"the LRs of neither schedule from scratch")


def check_duration(run, raw_model):
    """UserError (one line) when the whole run needs at least max_estimated_hours on its device: its
    FLOPs (run_flops) at the device's best (device_flops; a lower bound, so a refused run would take
    longer still). Not checked where the device's best is unknown (an unlisted GPU, MPS)."""
    cfg, speed = run.cfg, device_flops(run)
    if not cfg.max_estimated_hours or not speed:
        return
    seconds = sum(run_flops(run, raw_model).values()) / speed
    if seconds >= 3600 * cfg.max_estimated_hours:
        where = f"this CPU (at most {speed:.0e} FLOP/s)" if run.device.type == "cpu" else \
            f"this {run.device.type} device (its bf16 peak, {speed:.2g} FLOP/s)"
        raise UserError(f"this run needs {sum(run_flops(run, raw_model).values()):.2g} FLOPs: at least "
                        f"{fmt_duration(seconds)} on {where}, past max_estimated_hours={cfg.max_estimated_hours:g}"
                        + (": it is sized for GPUs; on a CPU train configs/unified_bpe_cpu.py or the default "
                           "`python train.py`, or" if run.device.type == "cpu" else ": use more devices (torchrun), or")
                        + " pass --max_estimated_hours=0 to start it anyway")


def run_flops(run, raw_model):
    """{"training", "evaluation", "sample"}: the FLOPs of each part of the run. A forward pass is a
    third of a training step's FLOPs per token (flops_per_token counts forward and backward); the
    evals run eval_iters batches at iteration 0, every eval_interval and at the end; the sample
    reruns up to block_size tokens for each of its sample_tokens (no KV cache)."""
    cfg, per_token = run.cfg, raw_model.flops_per_token()
    evals = (cfg.max_iters // cfg.eval_interval + 1 if cfg.eval_interval > 0 else 1) + 1
    return {"training": per_token * run.tokens_per_iter * cfg.max_iters,
            "evaluation": per_token / 3 * evals * cfg.eval_iters * cfg.batch_size * cfg.block_size,
            "sample": per_token / 3 * cfg.sample_tokens * cfg.block_size}


def device_flops(run):
    """The FLOP/s this run's device reaches at best (a time from it is a lower bound): CPU_FLOPS on a
    CPU, the bf16 peak on a CUDA device the peak table knows (common.peak_flops), else None."""
    return CPU_FLOPS if run.device.type == "cpu" else peak_flops(run.device)


def cpu_seconds(run, raw_model):
    """The whole run's FLOPs (run_flops) over CPU_FLOPS: a lower bound on its time on a CPU."""
    return sum(run_flops(run, raw_model).values()) / CPU_FLOPS


def fmt_rate(per_second):
    """A rate in a unit that fits its size, 3 significant digits: '23.4', '12.3k', '1.23M'."""
    for scale, unit in ((1e6, "M"), (1e3, "k")):
        if per_second >= scale:
            return f"{per_second / scale:.3g}{unit}"
    return f"{per_second:.3g}"


def write_log(run, row):
    """Append row to log.jsonl (rank 0), and send it to the tracker when there is one."""
    if run.master:
        append_log(run.log_path, row)
        if run.tracker:
            run.tracker.log(tracker_row(row), step=row["iter"])


def start_tracker(cfg, master, finished, cleanup):
    """A Weights & Biases run (rank 0, wandb_log=True; nanoGPT's keys), finished when `cleanup` (an
    ExitStack) closes: exit code 1 if the run raised. None otherwise, and for a finished run
    (nothing to send); wandb is imported only here. A resumed run starts a new W&B run of the
    same name; log.jsonl stays the record."""
    if not (cfg.wandb_log and master) or finished:
        return None
    import wandb

    tracker = wandb.init(project=cfg.wandb_project, name=cfg.wandb_run_name or os.path.basename(
        os.path.abspath(cfg.out_dir)), config=vars(cfg), dir=cfg.out_dir)
    cleanup.push(lambda kind, exc, tb: tracker.finish(exit_code=1 if kind else 0))
    return tracker


def tracker_row(row, prefix=None):
    """A log.jsonl row as flat tracker keys: {"train/loss", "train/lr", "eval/val_loss",
    "eval/scales/<site>/mean", "eval/max_load/<layer>", ..., "tokens"}; nested dicts and lists
    joined with "/"."""
    if prefix is None:
        return {"tokens": row["tokens"], **tracker_row({k: v for k, v in row.items()
                                                        if k not in ("kind", "iter", "tokens")}, row["kind"])}
    items = row.items() if isinstance(row, dict) else enumerate(row)
    flat = {}
    for key, value in items:
        if isinstance(value, (dict, list)):
            flat.update(tracker_row(value, f"{prefix}/{key}"))
        else:
            flat[f"{prefix}/{key}"] = value
    return flat


def diverged(run, which, value, it, first_step):
    """The message for a non-finite loss: which one, where, what is kept, and what to change:
    before any optimizer step has acted on it (an eval at the start, the first step's loss) the
    configuration made it (the notes at start name unusual values), else try a lower LR."""
    kept = f"the last good checkpoint {run.ckpt_path} is kept" if os.path.exists(run.ckpt_path) else \
        "no checkpoint was written yet"
    odd = [f"{k}={vars(run.cfg)[k]!r}" for k, _ in unusual(vars(run.cfg))]
    fix = "no optimizer step had acted on it yet, so the configuration makes it (check the notes at start and " \
        "keys such as rope_theta, norm_eps, the initial scales), not the learning rate" if first_step else \
        "try a lower learning_rate"
    if odd:  # a value outside its usual range is the likelier cause than a learning rate in range
        fix = f"first check {', '.join(odd)}, outside the usual range (the notes at start), then: {fix}"
    return f"{which} loss is {value} at iter {it}: the run diverged; {kept}; {fix}"


class Progress:
    """Progress lines (loss, LR, tokens/s, ms/iter, MFU on known GPUs, ETA) every log_interval
    iterations and at least every PROGRESS_EVERY_S seconds (the loop then flushes TrainRows: overdue);
    one warning when a CPU run would take over an hour."""

    def __init__(self, run, raw_model, start_iter):
        self.run, self.start_iter = run, start_iter
        self.flops_per_token = raw_model.flops_per_token()
        self.expected_s = cpu_seconds(run, raw_model)  # the config's own CPU time, at a free CPU's pace
        self.peak = peak_flops(run.device) if run.ptdtype == torch.bfloat16 else None
        self.warned_slow = False
        self.t_start = self.t_line = time.perf_counter()
        self.restart_window()

    def restart_window(self):
        self.t_window, self.iters = time.perf_counter(), 0

    def poll(self, signals):
        """(the signal ("SIGTERM", "SIGINT") that asks the run to stop, or None; whether a progress line is
        overdue: PROGRESS_EVERY_S have passed since the last), as every rank agrees (common.agree, a host
        all-reduce, under DDP or FSDP2); one process reads its own. train.py asks once per iteration."""
        overdue = time.perf_counter() - self.t_line >= PROGRESS_EVERY_S
        if self.run.world > 1:
            return agree(self.run, signals, overdue)
        return signals.received, overdue

    def step(self, rows, max_load=None):
        """Count the iterations of `rows` (train rows just written, in order) and print the line of the
        last one when it is due. max_load: the MoE line's largest expert load in the last batch."""
        cfg, row = self.run.cfg, rows[-1]
        done = row["iter"]
        self.iters += len(rows)
        now = time.perf_counter()
        on_interval = done % cfg.log_interval == 0 or done == cfg.max_iters
        if not (on_interval or now - self.t_line >= PROGRESS_EVERY_S):
            return
        # a line between two log_interval ones says why it is there, so an odd iteration is not read as a bug
        overdue = "" if on_interval else f" ({now - self.t_line:.0f} s since the last line; log_interval={cfg.log_interval})"
        dt = now - self.t_window
        tok_s = self.iters * self.run.tokens_per_iter / dt
        ms = 1000 * dt / self.iters
        eta = (cfg.max_iters - done) * dt / self.iters  # training steps only, evals add to it
        mfu = f" | MFU {100 * self.flops_per_token * tok_s / (self.peak * self.run.world):.1f}%" if self.peak else ""
        moe = f" | lb {row['lb_loss']:.3f} | max load (last batch) {max_load:.2f}" if "lb_loss" in row else ""
        self.run.log(f"iter {done}/{cfg.max_iters}{overdue} | loss {row['loss']:.4f} | lr {row['lr']:.2e} | "
                     f"{fmt_rate(tok_s)} tok/s | {ms:.0f} ms/iter{mfu}{moe} | ETA {fmt_duration(eta)}")
        if self.run.device.type == "cpu" and eta > 3600 and not self.warned_slow:
            self.warned_slow = True  # the config is judged at start (describe); here only the machine
            why = "this config is sized for a GPU (use --device=cuda there, or a smaller model / fewer " \
                "--max_iters here)" if self.expected_s > 3600 else \
                f"the config itself needs about {fmt_duration(self.expected_s)} on a free CPU, so this machine is " \
                f"busy or slow (another training process on its cores? OMP_NUM_THREADS above its cores?)"
            self.run.log(f"warning: at the measured {ms:.0f} ms/iter the {cfg.max_iters - done} iterations left "
                         f"take about {fmt_duration(eta)} on this CPU: {why}")
        self.t_line = now
        self.restart_window()


class TrainRows:
    """log.jsonl's train rows, written in batches so that training never waits for a loss: each
    iteration's losses stay on the device (add) until flush reads every pending one in a single host
    transfer, after one all-reduce under DDP (every rank reads the same means), checks them, writes
    the rows in order (the same rows, whenever they are flushed) and gives Progress its line.

    train.py flushes every log_interval iterations, when a progress line is overdue, and before
    anything that writes a checkpoint (an eval, a stop): a resume drops the rows past its checkpoint,
    so the rows up to it must be in the log first. Every rank flushes at the same iterations."""

    def __init__(self, run, progress):
        self.run, self.progress = run, progress
        self.pending = []  # [(a row without its losses, [cross-entropy, lb_loss, z_loss] x my micro-steps)]
        self.load = None  # the last batch's expert load (MoE), for the progress line
        self.loss = float("nan")  # the last row written's

    def add(self, row, losses, aux):
        """Hold iteration row["iter"]'s row until the flush; losses: 0-d float tensors on the device, three
        per micro-step of this rank (cross-entropy, lb_loss, z_loss); aux: the last micro-step's."""
        self.pending.append((row, losses))
        self.load = aux.get("expert_load")

    def flush(self):
        """Write the pending rows. Raises FloatingPointError (ops.diverged) at the first non-finite loss,
        naming its iteration; the rows before it are written, and no checkpoint came after it."""
        run, pending = self.run, self.pending
        if not pending:
            return
        self.pending = []
        means = torch.stack([t for _, losses in pending for t in losses]).view(len(pending), -1, 3).mean(1)
        if run.ddp:  # one collective per flush: the mean over ranks, as the micro-steps' over each rank's
            torch.distributed.all_reduce(means)
            means = means / run.world
        flat = means.flatten()
        if self.load is not None:  # (the progress line's max load, in the same transfer)
            flat = torch.cat([flat, self.load.max().float().view(1) * run.cfg.n_experts])
        values = flat.tolist()  # the one host transfer
        for i, (row, _) in enumerate(pending):
            loss, lb_loss, z_loss = values[3 * i:3 * i + 3]
            if not math.isfinite(loss):
                raise FloatingPointError(diverged(run, "train", loss, row["iter"], first_step=row["iter"] == 1))
            row.update(loss=loss, **({"lb_loss": lb_loss, "z_loss": z_loss} if run.n_moe else {}))
            write_log(run, row)
        self.loss = loss
        self.progress.step([row for row, _ in pending], values[-1] if self.load is not None else None)


def end_of_run_sample(model, run, signals=None):
    """Print a sample from "\\n"; a sample that cannot be made is one line, never a failed run. A
    SIGTERM/SIGINT (signals: StopSignals) ends it after the token in hand (under FSDP2, where every
    rank samples, after the token all ranks agree on), and what was sampled is printed."""
    cfg = run.cfg
    try:
        codec = make_codec(run.data["meta"], cfg.vocab_size)
        if codec is None:
            run.log("no sample: the dataset has no meta.pkl vocabulary to decode its token ids")
            return
        encode, decode = codec
        try:
            prompt = encode("\n")
        except UserError:  # a vocabulary without "\n": start from token 0
            prompt = [0]
        out = torch.tensor([prompt], dtype=torch.long, device=run.device)
        torch.manual_seed(cfg.seed)  # the same sample however the run was stopped and resumed (and on every FSDP2 rank)
        model.eval()
        cut = ""
        for _ in range(cfg.sample_tokens):  # a token at a time: a signal is honoured at the next one
            with run.autocast:
                out = model.generate(out, 1, temperature=0.8, top_k=200)
            received = signals and (stop_signal(signals, run) if cfg.fsdp else signals.received)
            if received:
                cut = f", cut short by {received}"
                break
        n = out.shape[1] - len(prompt)
        run.log(f"--- sample ({n} tokens{cut}) ---\n{decode(out[0].tolist())}\n---")
    except Exception as e:  # the run is finished and saved: a sample is a courtesy
        run.log(f"no sample ({e if isinstance(e, UserError) else f'{type(e).__name__}: {e}'}); "
                f"the run itself finished and is saved")


# -----------------------------------------------------------------------------
# The log's rows as readers take them


def is_number(value):
    """An int or a float as JSON gives them (a bool, though an int in Python, is not one)."""
    return type(value) in (int, float)


def row_problem(row):
    """What a log row (read_log's: a dict with kind, iter and tokens) lacks of what research code reads
    from it, as a phrase naming the key, or None: a train row's "loss" and "lr" and an eval row's
    "val_loss" are finite numbers (train.py stops before it would log another); an eval row's
    "scales", when present, is {site: {statistic: number}} and its "mechanism" a dict of numbers
    or None (an undefined ratio), "since" an iteration."""
    kind, it = row["kind"], row["iter"]
    where = f"the {kind} row of iteration {it}"
    for key in {"train": ("loss", "lr"), "eval": ("val_loss",)}.get(kind, ()):
        if key not in row:
            return f"{where} has no {key!r}"
        if not (is_number(row[key]) and math.isfinite(row[key])):
            return f"{where} has {key!r} = {row[key]!r:.40}, not a finite number"
    lrs = row.get("lrs", {})  # (a train row's per-group LRs, where groups follow schedules of their own)
    if not (isinstance(lrs, dict) and all(is_number(v) and math.isfinite(v) for v in lrs.values())):
        return f"{where} has 'lrs' = {lrs!r:.40}, not a dict of finite LRs"
    if kind != "eval":
        return None
    scales = row.get("scales", {})
    if not isinstance(scales, dict):
        return f"{where} has 'scales' = {scales!r:.40}, not a dict of sites"
    for site, st in scales.items():
        if not (isinstance(st, dict) and all(is_number(v) for v in st.values())):
            return f"{where} has 'scales'[{site!r}] = {st!r:.40}, not a dict of numbers"
    mech = row.get("mechanism", {})
    if not isinstance(mech, dict):
        return f"{where} has 'mechanism' = {mech!r:.40}, not a dict of statistics"
    for key, v in mech.items():
        if key == "since" and type(v) is not int:
            return f"{where} has 'mechanism'['since'] = {v!r:.40}, not an iteration"
        if key != "since" and not (v is None or is_number(v)):
            return f"{where} has 'mechanism'[{key!r}] = {v!r:.40}, not a number or null"
    return None


def read_rows(path):
    """read_log's rows of a log.jsonl, each checked by row_problem: the one reader of logs in
    research code (the sweep's state and records, plot.py --run), and what a resume checks the rows
    it keeps with (start.begin), so a row research code would refuse is refused then. Raises UserError (one line naming
    the file, the line, the key and the fix) for the first row that lacks what is read from it."""
    rows = read_log(path)
    for n, row in enumerate(rows, 1):  # read_log drops only a torn last line: row n is line n
        problem = row_problem(row)
        if problem:
            raise UserError(f"{path}, line {n}: {problem}: the log is damaged or not train.py's; delete the line "
                            f"(the run's checkpoint is unaffected) or delete the run's folder and run it again")
        if isinstance(row.get("mechanism"), dict):  # a log written before a statistic's rename
            row["mechanism"] = renamed_mechanism(row["mechanism"])
    return rows


# -----------------------------------------------------------------------------
# The log: log.jsonl, whole rows only


def read_log(path):
    """The rows of a log.jsonl, each a dict with a str "kind" and int "iter" and "tokens"; a last
    line torn by a crash mid-write is skipped. The one reader of logs (train.py's resume, the
    sweep, plot.py --run). Raises UserError naming the file and line of any other line that is
    not such a row (bad JSON, null, bytes that are not UTF-8), so one damaged file is one line, not a
    traceback; a torn last line may hold any bytes (a write cut mid-character)."""
    with open_checked(path) as f:  # a FIFO, a device or a link: one line (common.checked_stat), never a wait
        lines = f.read().splitlines()
    rows = []
    for n, raw in enumerate(lines, 1):
        line = raw.decode("utf-8", errors="replace")
        try:
            row = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            if n == len(lines) and raw.startswith(b"{"):  # a row torn by a crash mid-write: never whole
                continue
            row = None
        if not (isinstance(row, dict) and isinstance(row.get("kind"), str) and type(row.get("iter")) is int
                and type(row.get("tokens")) is int):
            raise UserError(f"{path}, line {n}: {line[:60]!r} is not a log row (a JSON object with kind, iter and "
                            f"tokens): the log is damaged; delete the line (the run's checkpoint is unaffected) or "
                            f"the run's folder and run it again")
        rows.append(row)
    return rows


def trim_log(path, last_iter):
    """Drop log rows past last_iter (rows of a run that went on after its checkpoint)."""
    if not os.path.exists(path):
        return
    rows = [r for r in read_log(path) if r["iter"] <= last_iter]
    with atomic_write(path) as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def append_log(path, row):
    """Append one row (a JSON-able dict) to log.jsonl in one write. If the write fails or is short
    (a full disk), the file is cut back to its last whole row and an OSError naming path is raised:
    the log never holds a torn row."""
    line = (json.dumps(row) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            written = os.write(fd, line)
            if written != len(line):  # a full disk, a quota or a file-size limit: the write does not say which
                raise OSError(SHORT_WRITE, f"a short write ({len(line)} requested and {written} written)")
        except OSError as e:
            try:
                os.ftruncate(fd, size)
            except OSError:
                pass  # not a regular file (a device): there is nothing to cut back
            raise OSError(e.errno, e.strerror, path) from None
    finally:
        os.close(fd)
