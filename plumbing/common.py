"""Process utilities every command shares, as nanochat's common.py: the OpenMP environment, the
command-line entry (one line per error; a file system's refusal worded by disk.py), devices and
their bf16 peaks, torchrun's processes (DDP and FSDP2), SIGTERM/SIGINT as a clean stop, compile
errors, the CPU numerics setting, durations, files opened checked, and JSON read from elsewhere
(a model or tokenizer folder).

It loads torch only inside the functions that need it, so a command calls set_omp_env() after
importing this module and before torch loads (OpenMP reads its settings once).
"""

import datetime
import json
import math
import os
import re
import shlex
import signal
import socket
import stat
import sys
import threading
from contextlib import contextmanager

from configurator import UserError, not_one_of
from plumbing.disk import os_error_line
from plumbing.stops import (  # noqa: F401 (StopSignals, say: the commands import them from here)
    TERMINATING, StopSignals, Terminated, _terminate, _terminated_while_starting, attach_closed_streams, drop_stdout,
    name_stdout, say)

# -----------------------------------------------------------------------------
# The command line: OpenMP's threads, one line per error


# OpenMP (torch's CPU threads) spins an idle thread before it sleeps. Alone that is fastest (sleeping
# costs the default run's model ~20% on 2 cores), but beside another busy process on the same cores a
# spinning thread holds the core the thread it waits for needs: steps 4-25x slower, where sleeping
# threads give the fair 2x (bench.py --shared=True measures both).
OMP_THREAD_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


def set_omp_env():
    """Set OMP_THREAD_ENV in os.environ where the user has not set the key. Takes effect only
    before torch loads (OpenMP reads its settings once): train.py calls it first thing."""
    for key, value in OMP_THREAD_ENV.items():
        os.environ.setdefault(key, value)


def tell_torchrun(message):
    """Under torchrun, write `message` where its failure summary looks (TORCHELASTIC_ERROR_FILE, in
    the format of torch.distributed.elastic's ErrorHandler), so the summary that ends the output
    shows the one-line error instead of a link to its docs under its own traceback."""
    import json
    import time
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    try:
        with open(path, "w") as f:
            json.dump({"message": {"message": message, "extraInfo": {"py_callstack": message,
                                                                     "timestamp": str(int(time.time()))}}}, f)
    except OSError:
        pass  # the summary then shows torchrun's link: the line above it still says what went wrong


def cli(main):
    """Run a command's main(argv): a UserError becomes one 'error: ...' line on stderr (exit 1), a
    Ctrl-C (KeyboardInterrupt) one 'interrupted' line (exit 130, as a shell reports SIGINT), a SIGTERM
    or SIGHUP (a closed terminal, a dropped ssh session) the same cleanup as an exception then one
    'terminated' line (exit 128 + the signal's number; train.py's loop takes both itself, to save first;
    a signal already ignored, as nohup ignores SIGHUP, stays ignored); an error where the command meets
    the file system (os_error_line: permission, a full disk, a quota, a file-size limit, a read-only
    disk, a name too long, a path gone), wrapped or not, one line naming the path, the cause and the
    fix (exit 1); output piped into a reader that closes early (`| head`) ends quietly. A closed
    stdin, stdout or stderr (`>&-`) reads and writes as /dev/null (attach_closed_streams), so a
    command run with its output closed finishes as it would have; a stdout that refuses a write (`>
    /dev/full`, a full disk) is that one line naming where stdout goes (NamedStdout), even where the
    caller swallowed the error (argparse's --help). Under torchrun, a rank whose
    collective lost a peer (that peer stopped on its own error) says so in one line, without a
    traceback: the peer's line is the cause."""
    attach_closed_streams()
    name_stdout()
    if threading.current_thread() is threading.main_thread():
        for sig in TERMINATING:  # Python's default skips every finally: a writer's cleanup
            if signal.getsignal(sig) in (signal.SIG_DFL, _terminated_while_starting):
                signal.signal(sig, _terminate)
    try:
        try:
            code = main(sys.argv[1:])
        except SystemExit:  # (argparse's --help: its print swallowed the write's error)
            _stdout_written()
            raise
        finally:  # a piped stdout is block-buffered: its last write happens here, inside the handler
            sys.stdout.flush()
        _stdout_written()
    except UserError as e:
        _say(f"error: {e}")
    except Terminated as e:
        print(f"terminated ({e.name}): stopped and cleaned up; run the same command again to start over",
              file=sys.stderr)
        sys.exit(128 + signal.Signals[e.name].value)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
    except SystemExit as e:  # a script's SystemExit("words") (the prepare scripts'): the same one line
        if isinstance(e.code, str):
            _say(e.code if e.code.startswith("error: ") else f"error: {e.code}")
        raise
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        sys.exit(1)
    except BaseException as e:  # (torch's CheckpointException is a BaseException)
        if _peer_ended(e):  # its own line (torchrun's summary shows it last) says why, not this rank's traceback
            print(f"rank {os.environ['RANK']}: stopped: another process of this run ended first (its own line, "
                  f"rank 0's as a rule, says why)", file=sys.stderr)
            sys.exit(1)
        line = os_error_line(e)
        if line is None or isinstance(e, (SystemExit, GeneratorExit)):
            raise
        if getattr(sys.stdout, "failed", None):
            drop_stdout()  # its buffered rest would be a second error at exit
        _say(line)
    sys.exit(code)


def _stdout_written():
    """Flush stdout; raise the first write it refused (NamedStdout.failed), even one its caller swallowed."""
    sys.stdout.flush()
    if getattr(sys.stdout, "failed", None):
        raise sys.stdout.failed


PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe")  # gloo's and NCCL's words


def _peer_ended(e):
    """Whether e ended a rank other than 0 because a collective lost a peer process (it stopped on its
    own error): a RuntimeError of torch.distributed's backend saying the connection closed."""
    if os.environ.get("RANK", "0") == "0" or "torch.distributed" not in sys.modules:
        return False
    return isinstance(e, RuntimeError) and any(words in str(e) for words in PEER_GONE)


def _say(message):
    print(message, file=sys.stderr)
    tell_torchrun(message)
    sys.exit(1)


# -----------------------------------------------------------------------------
# Devices: which one, its dtype, its bf16 peak (MFU), the CPU numerics setting


DEVICE_FORMS = "'auto', 'cpu', 'cuda', 'cuda:N', 'mps'"


def resolve_device(device, dtype="auto"):
    """(device, dtype) with "auto" resolved on this machine: CUDA, else MPS, else CPU; bfloat16 on
    CUDA, else float32. UserError, one line, for any device this machine cannot use: a name not in
    DEVICE_FORMS (as torch spells them: "CPU" and "" are errors), CUDA or MPS absent, cuda:N with
    N >= the number of visible CUDA devices; and for an unknown dtype."""
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", device):
        raise UserError(f"device={device!r} is not one of {DEVICE_FORMS}")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UserError(f"device={device!r} but CUDA is not available: use --device=cpu")
        count, index = torch.cuda.device_count(), int(device.partition(":")[2] or 0)
        if index >= count:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            raise UserError(f"device={device!r} but this machine has {count} CUDA device(s), cuda:0 to "
                            f"cuda:{count - 1}" + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else "")
                            + ": use --device=cuda or one of those")
    if device == "mps" and not torch.backends.mps.is_available():
        raise UserError("device='mps' but MPS (Apple-silicon GPUs) is not available on this machine: "
                        "use --device=cpu")
    if dtype == "auto":
        dtype = "bfloat16" if device.startswith("cuda") else "float32"
    if dtype not in ("float32", "bfloat16"):
        raise UserError(not_one_of("dtype", dtype, ("auto", "float32", "bfloat16")))
    return device, dtype


# Dense bf16 tensor-core peaks (FLOP/s, vendor datasheets); matched against the
# CUDA device name, most specific entry first. MFU is omitted for other devices.
PEAK_BF16_FLOPS = [
    ("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("GH200", 989e12), ("H200", 989e12),
    ("H100", 989e12), ("B200", 2250e12), ("A100", 312e12), ("L40S", 362e12),
    ("L40", 181e12), ("L4", 121e12), ("RTX 4090", 165e12),
]


def peak_flops(device):
    """Dense bf16 peak FLOP/s of a CUDA torch.device from PEAK_BF16_FLOPS, else None (CPU, MPS, unknown GPU)."""
    import torch

    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16_FLOPS if key in name), None)


# cpu_numerics="portable": the settings that decide which CPU kernels run, each fixed to one level
# every x86-64 CPU with AVX2 has (Intel since 2013, AMD since 2015), so these three no longer depend
# on the CPU type. The C++ compiler, libm and oneDNN are not pinned (a record names the first two).
# Each is read when torch (or MKL, or inductor) loads, so it must be in the environment before:
# train.py's command line re-executes itself with them (numerics_env). What they cost and what a
# run made without them varies with: results/README.md (records).
PORTABLE_ENV = {
    "ATEN_CPU_CAPABILITY": "avx2",  # ATen's kernels, and inductor's vector width (its default follows it)
    "MKL_CBWR": "COMPATIBLE",  # MKL's GEMM: the conditional-reproducibility branch that holds on non-Intel CPUs
    "TORCHINDUCTOR_CPP_MARCH": "x86-64-v3",  # inductor's C++ flags: -march=x86-64-v3 (AVX2, FMA), not native
}


def numerics_env(cpu_numerics):
    """{variable: value} of PORTABLE_ENV this process lacks under cpu_numerics="portable" ({} when it
    has them all, or for "native")."""
    if cpu_numerics != "portable":
        return {}
    return {k: v for k, v in PORTABLE_ENV.items() if os.environ.get(k) != v}


def check_numerics(cpu_numerics):
    """UserError unless cpu_numerics="portable" found its environment (numerics_env) and torch took it:
    its kernels dispatch to AVX2 (a CPU without AVX2 falls back to less, and is refused)."""
    import torch

    missing = numerics_env(cpu_numerics)
    if missing:
        prefix = " ".join(f"{k}={v}" for k, v in missing.items())
        raise UserError(f"cpu_numerics='portable' needs {prefix} in the environment before torch loads: give "
                        f"--cpu_numerics=portable on train.py's command line (it sets them and restarts), or "
                        f"prefix the command with them")
    if cpu_numerics == "portable" and torch.backends.cpu.get_cpu_capability() != "AVX2":
        raise UserError(f"cpu_numerics='portable' runs AVX2 kernels, and this CPU dispatches to "
                        f"{torch.backends.cpu.get_cpu_capability()}: use cpu_numerics='native' here")


def fmt_duration(seconds):
    """'45s', '12m05s' or '3h20m'."""
    s = int(seconds)
    return f"{s}s" if s < 60 else f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s % 3600 // 60:02d}m"


# -----------------------------------------------------------------------------
# torchrun's processes: DDP and FSDP2; a stop signal every rank agrees on; compile errors


# The ranks' group for agree: gloo, on the CPU, beside the group that carries the tensors (NCCL on
# CUDA, gloo on CPU), so a check neither waits for the GPU nor makes it wait, and on CPU it does not
# queue behind DDP's gradient all-reduces. setup_distributed makes it.
_host_group = None


def check_processes(accum, batch_size, fsdp):
    """UserError, one line with the fix, for a run torchrun's processes cannot train: accum
    (gradient_accumulation_steps, the global count of micro-steps) not dividing by WORLD_SIZE, or
    fsdp=True without torchrun. Called before any collective, so no rank hangs."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if accum % world:
        k = world // math.gcd(accum, world)  # the fewest extra micro-steps that divide among the processes
        same = f"--gradient_accumulation_steps={accum * k} --batch_size={batch_size // k} keeps the " \
            f"{batch_size * accum} sequences per iteration" if batch_size % k == 0 else \
            f"--gradient_accumulation_steps={accum * k} (then {batch_size * accum * k} sequences per iteration)"
        raise UserError(f"gradient_accumulation_steps={accum} does not divide by WORLD_SIZE={world} (it is the "
                        f"global count of micro-steps, shared among the processes): {same}")
    if fsdp and "WORLD_SIZE" not in os.environ:
        raise UserError("fsdp=True (given, or a resumed run's own) shards the model over torchrun's processes: "
                        "launch with `torchrun --standalone --nproc_per_node=N train.py ...` (N >= 1), or pass "
                        "--fsdp=False (a sharded checkpoint resumes in one process too)")


TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")  # what torchrun sets, all of them


def distributed_env_problem(env):
    """None, or one line naming the variable and the fix, when torchrun's variables in env (a mapping) are
    set by hand and disagree: a rank without WORLD_SIZE (Slurm templates often export RANK from
    SLURM_PROCID: the run would train as a rank of a world of 1, print nothing and save nothing), a
    value that is no whole number or out of range, or WORLD_SIZE without RANK, MASTER_ADDR or MASTER_PORT.
    None when none of RANK, WORLD_SIZE, LOCAL_RANK is set (one process) or all agree (torchrun)."""
    fix = "run under torchrun (which sets them all), or unset it for one process"
    if not any(k in env for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        return None
    values = {}
    for key, low in (("WORLD_SIZE", 1), ("RANK", 0), ("LOCAL_RANK", 0), ("MASTER_PORT", 1)):
        if key in env:
            text = env[key].strip()
            if not text.isdigit() or int(text) < low or (key == "MASTER_PORT" and int(text) > 65535):
                return f"{key}={env[key]!r} is not a {'port (1-65535)' if key == 'MASTER_PORT' else 'whole number'}" \
                       f"{f' >= {low}' if key != 'MASTER_PORT' else ''}: {fix}"
            values[key] = int(text)
    if "WORLD_SIZE" not in values:
        given = next(k for k in ("RANK", "LOCAL_RANK") if k in values)
        return (f"{given}={env[given]} is set but WORLD_SIZE is not (a Slurm template exporting it from SLURM_PROCID?): "
                f"this process would train alone as rank {values[given]}; {fix}")
    missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if not env.get(k, "").strip()]
    if missing:
        return f"WORLD_SIZE={values['WORLD_SIZE']} is set but {missing[0]} is not: {fix}"
    for key in ("RANK", "LOCAL_RANK"):
        if values.get(key, 0) >= values["WORLD_SIZE"]:
            return f"{key}={values[key]} is not below WORLD_SIZE={values['WORLD_SIZE']}: {fix}"
    try:  # (torch would retry an address that never resolves until the timeout, printing warnings)
        socket.getaddrinfo(env["MASTER_ADDR"].strip(), None)
    except (OSError, UnicodeError) as e:
        return f"MASTER_ADDR={env['MASTER_ADDR']!r} does not resolve ({getattr(e, 'strerror', None) or e}): {fix}"
    return None


PEER_WAIT_NOTE_S = 10  # a process group's start waits this long for its peers before it says it waits


def setup_distributed(device_name, timeout_s):
    """(rank, local_rank, world_size) from torchrun's environment; init the process group (collectives
    wait up to timeout_s seconds), and the gloo group agree's checks run on.

    NCCL on CUDA, gloo on CPU, whenever torchrun launched us (WORLD_SIZE set),
    even as one process: `--nproc_per_node=1` runs the DDP path of 8 (as in
    nanoGPT). check_processes first, and distributed_env_problem (start.setup checks it before anything
    reads RANK).
    """
    import torch

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    if "WORLD_SIZE" in os.environ:
        backend = "nccl" if device_name.startswith("cuda") else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        timeout = datetime.timedelta(seconds=timeout_s)
        where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
        waiting = threading.Timer(PEER_WAIT_NOTE_S, lambda: print(
            f"rank {rank}: waiting for the other processes of {world} at {where} (up to --ddp_timeout_s={timeout_s}; "
            f"each rank must be started, with the same MASTER_ADDR and MASTER_PORT)", file=sys.stderr, flush=True))
        waiting.daemon = True
        waiting.start()
        try:
            rendezvous(backend, timeout)
        except (RuntimeError, OSError) as e:  # (torch's DistStoreError, DistNetworkError: RuntimeErrors)
            if "EADDRINUSE" in str(e) or "address already in use" in str(e).lower():
                raise UserError(f"rank {rank}: MASTER_PORT={os.environ.get('MASTER_PORT')} is in use on {where} (another "
                                f"run, or a stale one): pick a free port, or stop what holds it") from None
            if "timeout" not in str(e).lower() and "timed out" not in str(e).lower():
                raise
            raise UserError(f"rank {rank}: the other processes of {world} did not join at {where} within "
                            f"--ddp_timeout_s={timeout_s}: start every rank (torchrun starts them all), check that "
                            f"MASTER_ADDR and MASTER_PORT reach rank 0 from each node") from None
        finally:
            waiting.cancel()
        global _host_group
        _host_group = torch.distributed.new_group(backend="gloo", timeout=timeout)  # every rank, in the same order
    return rank, local_rank, world


def rendezvous(backend, timeout):
    """torch.distributed.init_process_group(backend, timeout=timeout), waited for from the main thread a
    fraction of a second at a time: the call itself waits for the peers in C++, where Python runs no signal
    handler, so a SIGTERM (a scheduler's, with ~30 s of grace) was acted on only when the timeout ran out.
    The call runs in a daemon thread; a signal raises here (cli: one line) and the thread is left to the
    process's end. Its own error is raised here as it came."""
    import torch

    outcome = {}

    def start():
        try:
            torch.distributed.init_process_group(backend, timeout=timeout)
        except BaseException as e:  # handed to the main thread
            outcome["error"] = e
    waiting = threading.Thread(target=start, name="rendezvous", daemon=True)
    waiting.start()
    while waiting.is_alive():
        waiting.join(0.2)  # between waits the main thread runs its signal handlers
    if "error" in outcome:
        raise outcome["error"]


def end_distributed(clean):
    """Tear torch.distributed down at a process's end (no-op without a process group), alike on every
    rank. clean: this rank finished its work normally, as every rank does in a normal run; it then
    first waits on the host group's barrier, so no rank closes its gloo connections while another is
    still inside a collective (a peer gone mid-exchange aborts that rank in C++: a run that passed
    can end in SIGABRT). Then every group is destroyed and the host group's reference dropped, so
    none is left for the interpreter's exit to tear down in its own order. Not clean (an error on
    this rank): no barrier, since another rank may never reach it."""
    import torch

    global _host_group
    if not torch.distributed.is_initialized():
        return
    if clean:
        torch.distributed.barrier(group=_host_group)
    _host_group = None
    torch.distributed.destroy_process_group()


def shard(model):
    """FSDP2 (torch.distributed.fsdp.fully_shard) over the process group, in place: each block is
    one unit (its parameters gathered for its forward and backward, then freed), the root holds the
    embedding, final norm and head. Parameters become DTensors sharded along their first dimension,
    so call it before the optimizers are built; gradients are reduce-scattered (averaged, as DDP's)
    at every micro-step. Each rank keeps 1/world of the parameters, gradients and AdamW moments.
    Every forward is a collective: all ranks run the same number of them (train.evaluate)."""
    import warnings

    from torch.distributed.fsdp import fully_shard

    # the root returns the logits as a view (the padded vocabulary cut off); nothing writes to them in place
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)


def agree(run, signals, *flags):
    """(the signal ("SIGTERM", "SIGINT") that asks this run to stop, received by any rank, or None;
    then each of `flags` (bools) as True when it is True on any rank).

    Called by every rank at the same point (train.py: once per iteration, with "a progress line
    is due"; an eval batch, an FSDP2 sample token: stop_signal): under DDP or FSDP2 (world > 1) the
    ranks all-reduce the largest of each on the host (_host_group), so all decide alike; in one
    process nothing is reduced and nothing waits.
    """
    values = [signal.Signals[signals.received].value if signals.received else 0, *map(int, flags)]
    if run.ddp and run.world > 1:
        import torch

        t = torch.tensor(values)  # on the CPU: reading it back waits for the other ranks, never for a device
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX, group=_host_group)
        values = t.tolist()
    return (signal.Signals(values[0]).name if values[0] else None, *map(bool, values[1:]))


def stop_signal(signals, run):
    """The signal ("SIGTERM", "SIGINT") that asks this run to stop, received by any rank, or None
    (agree, with no flags): every rank calls it at the same point, and all stop there."""
    return agree(run, signals)[0]


@contextmanager
def compile_errors(enabled):
    """Turn a torch.compile failure (no C++ compiler, an inductor bug) into one line with the fix."""
    try:
        yield
    except Exception as e:
        if not enabled:
            raise
        import torch._dynamo.exc  # only here: a compile error means torch is loaded
        if isinstance(e, torch._dynamo.exc.TorchDynamoException) or \
                type(e).__module__.startswith(("torch._inductor", "torch._dynamo")):
            first = (str(e).strip().splitlines() or [""])[0][:200]
            raise UserError(f"torch.compile failed ({type(e).__name__}: {first}): run with --compile=False") from None
        raise


# -----------------------------------------------------------------------------
# Files read from a run's or a dataset's folder: each a regular file, checked before it is opened


KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO; reading it would wait for a writer forever)"),
         (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
         (stat.S_ISDIR, "a folder"))


def file_kind(mode):
    """What a st_mode that is not a regular file's is, in words ("a named pipe (FIFO; ...)", "a folder")."""
    return next((words for test, words in KINDS if test(mode)), "not a regular file")


def checked_stat(path, folder=None, links=False):
    """path's os.stat_result when it is a regular file, checked by its lstat before anything opens it:
    a FIFO would block an open (no line, ever), a device reads without end. folder: the folder that
    names path (a checkpoint folder naming its shards): path must lie inside it, after resolving any
    link above it. links: a symbolic link to a regular file is read as it (a dataset's token files, often
    linked to scratch storage); without it, a link is refused (a run's own files are never links).

    UserError, one line naming path, what it is and the fix, for each way it is not that; OSError
    (FileNotFoundError for a missing path or a dangling link) as os.lstat and os.stat raise it."""
    path = os.fspath(path)
    if folder is not None:
        top = os.path.realpath(folder)
        head, name = os.path.split(os.path.normpath(path))
        real = os.path.join(os.path.realpath(head or "."), name) if name not in ("", ".", "..") else os.path.realpath(path)
        if os.path.commonpath([top, real]) != top:
            raise UserError(f"{path} lies outside {folder}, the folder that names it: a folder's files are read "
                            f"only inside it, and nothing was read; use the folder as it was written")
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        if not links:
            target = shlex.quote(os.path.realpath(path))
            raise UserError(f"{path} is a symbolic link (to {os.readlink(path)}): a run's files are read only as "
                            f"themselves; replace the link by a copy of its target (cp --remove-destination "
                            f"{target} {shlex.quote(path)}) or use the folder as written")
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{path} is not a file but a link to {os.path.realpath(path)}, {file_kind(st.st_mode)}: "
                            f"put the file itself there")
    elif not stat.S_ISREG(st.st_mode):  # (never advice to delete: it may be /tmp or /dev/null, given by mistake)
        aside = f" (where the folder's own file belongs, move what is there aside: mv {shlex.quote(path)} " \
            f"{shlex.quote(path + '.aside')})" if folder is not None else ""  # never a device or a folder the user named
        raise UserError(f"{path} is not a file but {file_kind(st.st_mode)}: name a regular file{aside}")
    return st


def open_checked(path, folder=None, links=False):
    """path opened for binary reading (a file object), after checked_stat (same arguments, same errors):
    the open itself is non-blocking and, unless links, refuses a link (O_NOFOLLOW), so a FIFO or a link
    swapped in after the check neither blocks nor is followed; the opened file must be the one checked.
    The one way a run's or a dataset's file is opened for reading."""
    st = checked_stat(path, folder, links)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if links else os.O_NOFOLLOW))
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(opened.st_mode):
        os.close(fd)
        raise UserError(f"{path} changed while it was opened (now {file_kind(opened.st_mode)}): something else "
                        f"writes the folder; stop it, then run again")
    os.set_blocking(fd, True)  # a regular file: reads as usual from here
    return os.fdopen(fd, "rb")


# -----------------------------------------------------------------------------
# JSON from elsewhere: data, read whole or refused in one line


MAX_JSON_BYTES = 64 << 20  # a config is kilobytes, a large tokenizer_config.json or index a few MiB: past
# this a file is not one, and json would hold all of it (several times its size) in memory


def read_json(path):
    """The JSON object (a dict) in the file at `path`: every JSON file the project reads from elsewhere
    (a Hugging Face or GGUF folder's config.json, tokenizer_config.json, generation_config.json, a
    safetensors index; a tokenizer folder a prepare script reads) is read here, without torch.
    UserError (one line naming the file) for every way it is not one: not a regular file (a FIFO,
    a device: common.checked_stat), unreadable, over MAX_JSON_BYTES, not UTF-8, not JSON, nested deeper than Python's recursion
    limit (json raises RecursionError there), or a top level that is not an object."""
    try:
        with open_checked(path, links=True) as f:  # (a Hugging Face cache links its files): a FIFO never blocks
            size = os.fstat(f.fileno()).st_size
            if size > MAX_JSON_BYTES:  # json holds the whole text and its objects in memory
                raise UserError(f"{path} is {size / 2**20:.0f} MiB, past the {MAX_JSON_BYTES >> 20} MiB of any "
                                f"configuration file: it is not one (replace it with the model's own)")
            value = json.loads(f.read().decode("utf-8"))
    except RecursionError:
        raise UserError(f"{path} nests its brackets deeper than Python's JSON reader goes: it is damaged or "
                        f"not a configuration file (replace it with the model's own)") from None
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text, as JSON is: it is damaged (replace it with the model's "
                        f"own)") from None
    except ValueError as e:  # json.JSONDecodeError
        raise UserError(f"{path} is not JSON ({str(e)[:80]}): it is damaged (replace it with the model's "
                        f"own)") from None
    except OSError as e:
        raise UserError(f"{path} cannot be read ({e.strerror or type(e).__name__}): make it readable to this "
                        f"user") from None
    if type(value) is not dict:
        raise UserError(f"{path} holds a JSON {type(value).__name__}, not the object of fields save_pretrained "
                        f"writes: it is damaged (replace it with the model's own)")
    return value
