"""What goes wrong on shared machines: two processes on one run, preemption (SIGTERM, Ctrl-C)
of train.py, of torchrun and of sweep.py, a device the machine lacks, a resume that stretches
the LR schedule."""

import errno
import glob
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from plumbing import common as shared  # (tests name their argument lists `common`)
from plumbing import disk
import configurator
from plumbing import ops
import train as train_mod
from plumbing.ops import read_log as read_log_rows  # skips a last line torn mid-write
from plumbing.common import resolve_device
from conftest import ROOT, snapshot
from configurator import UserError
from test_train import cli, make_dataset, read_log, run, tiny_args

# train.py's command line, with every batch read 30 ms slower (same batches, same numbers): a
# tiny run then lasts long enough to be signalled mid-way. SIGINT is made the default first,
# in case the tests run where it is ignored (a background job).
SLOW_TRAIN = f"""
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {ROOT!r})
from plumbing import common
import train
real_get_batch = train.get_batch
def slow_get_batch(*args):
    time.sleep(0.03)
    return real_get_batch(*args)
train.get_batch = slow_get_batch
common.cli(train.main)
"""
# Hold out_dir/.lock as a training process does (flock, then "pid host"), until killed.
HOLD_LOCK = """
import fcntl, os, socket, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.write(fd, f"{os.getpid()} {socket.gethostname()}\\n".encode())
print("locked", flush=True)
time.sleep(600)
"""
PREEMPT = ["--max_iters=40", "--eval_interval=8", "--gradient_accumulation_steps=2", "--dropout=0.1"]


def pids_running(text):
    """Pids of this user's live processes whose command line contains text (a test's unique path)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if text in cmdline and not zombie and int(pid) != os.getpid():
            pids.append(int(pid))
    return pids


def wait_for_train_row(out_dir, at_least, proc, timeout=120):
    """Block until out_dir/log.jsonl has a train row with iter >= at_least (proc must stay alive)."""
    path = os.path.join(out_dir, "log.jsonl")
    end = time.time() + timeout
    while time.time() < end:
        assert proc.poll() is None, f"exited early ({proc.returncode}): {proc.communicate()[1][-2000:]}"
        if os.path.exists(path) and max((r["iter"] for r in read_log_rows(path) if r["kind"] == "train"),
                                        default=0) >= at_least:
            return
        time.sleep(0.005)
    raise AssertionError(f"no train row {at_least} in {path} after {timeout} s")


def environ(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(v.decode(errors="replace").partition("=")[::2] for v in f.read().split(b"\0") if v)


def sigterm_rank_1(proc, out_dir, after_row, marker, wait_s=0):
    """Once out_dir's log has train row `after_row` (and wait_s more seconds), SIGTERM rank 1 alone of the
    torchrun `proc` (found by `marker` in its command line); (stdout, stderr) once it ends. Whatever
    is left of it is killed."""
    try:
        wait_for_train_row(out_dir, after_row, proc)
        time.sleep(wait_s)
        rank1 = [pid for pid in pids_running(marker) if environ(pid).get("RANK") == "1"]
        assert len(rank1) == 1, rank1
        os.kill(rank1[0], signal.SIGTERM)
        return proc.communicate(timeout=120)
    finally:
        proc.kill()
        for pid in pids_running(marker):
            os.kill(pid, signal.SIGKILL)


def final_weights(out_dir):
    return torch.load(os.path.join(out_dir, "ckpt.pt"), weights_only=True)["model"]


# -----------------------------------------------------------------------------
# One owner per run


def test_a_second_process_on_a_run_in_use_is_refused_at_once_and_writes_nothing(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    out = tmp_path / "o"
    run(tiny_args(ds, out, "--max_iters=2", "--eval_interval=2"))
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(out / ".lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = snapshot(out)
        proc = cli("--init_from=resume", f"--out_dir={out}", "--max_iters=4")
        assert proc.returncode == 1, proc.stdout[-2000:]
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: out_dir={str(out)!r} is in use: process "
                                                       f"{holder.pid} on "), proc.stderr
        for args in (tiny_args(ds, out, "--max_iters=4"), ["--init_from=auto", f"--out_dir={out}", "--max_iters=4"]):
            with pytest.raises(UserError, match=f"is in use: process {holder.pid} on .*kill -TERM {holder.pid}"):
                run(args)
        assert snapshot(out) == before
    finally:
        holder.kill()
        holder.wait()
    run(["--init_from=resume", f"--out_dir={out}", "--max_iters=4"])  # a dead holder's lock is free
    run(["--init_from=resume", f"--out_dir={out}", "--max_iters=6"])  # and a finished train() let it go
    assert max(r["iter"] for r in read_log(out)) == 6


# -----------------------------------------------------------------------------
# Preemption: finish the step, save, exit; resume is the uninterrupted run


def signal_at(iteration, signals=(signal.SIGTERM,), micro_step=0):
    """A get_batch that sends this process the signals while reading iteration `iteration`'s batch of
    micro-step `micro_step` (the first by default). The loop reads a batch one micro-step ahead:
    during the micro-step before (for micro-step 0, the previous iteration's last)."""
    real = train_mod.get_batch

    def get_batch(data, split, index, j, *rest):
        if split == "train" and index == iteration and j == micro_step:
            if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):  # default: it would kill pytest itself
                raise AssertionError("train() does not handle SIGTERM")
            for sig in signals:  # raise_signal: to this thread, so each is handled before the next is sent
                signal.raise_signal(sig)  # (os.kill may reach another thread: two SIGINTs can merge into one)
        return real(data, split, index, j, *rest)
    return get_batch


@pytest.mark.parametrize("stop_in_step, saved_at, pending", [(4, 5, False), (3, 4, True)])
def test_a_signal_stops_after_the_step_and_resume_is_the_uninterrupted_run(
        tmp_path, monkeypatch, capsys, stop_in_step, saved_at, pending):
    """SIGTERM during step k (0-based; as its last micro-batch is read): the step finishes and is saved,
    with no val loss; an eval due at that iteration stops at its first batch (a preempted job's grace is
    not spent evaluating) and is left pending, and the resume runs it first: the log ends as the
    uninterrupted run's."""
    ds = make_dataset(tmp_path / "ds")
    common = ["--max_iters=8", "--eval_interval=4", "--gradient_accumulation_steps=2", "--dropout=0.1"]
    run(tiny_args(ds, tmp_path / "a", *common))
    monkeypatch.setattr(train_mod, "get_batch", signal_at(stop_in_step, micro_step=1))
    result = run(tiny_args(ds, tmp_path / "b", *common))
    monkeypatch.undo()
    assert result["stopped"] == "SIGTERM"
    ckpt = torch.load(tmp_path / "b" / "ckpt.pt", weights_only=True)
    assert ckpt["iter"] == saved_at and ckpt["val_loss"] is None and ckpt.get("eval_pending", False) == pending
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith(f"stopped by SIGTERM after iteration {saved_at}/8, saved in ") and \
        f"--init_from=resume --out_dir={tmp_path / 'b'}" in out[-1] and "--init_from=auto" in out[-1]
    straight, stopped = read_log(tmp_path / "a"), read_log(tmp_path / "b")
    assert stopped == [r for r in straight if r["iter"] < saved_at or r["kind"] == "train" and r["iter"] == saved_at]
    assert run(["--init_from=auto", f"--out_dir={tmp_path / 'b'}"])["stopped"] is None
    assert read_log(tmp_path / "b") == straight  # no eval row at the stop, every due one
    for name, tensor in final_weights(tmp_path / "a").items():
        assert torch.equal(tensor, final_weights(tmp_path / "b")[name]), name


def test_a_stop_checkpoint_resumed_at_its_own_iteration_gets_its_final_eval(tmp_path, monkeypatch, capsys):
    ds = make_dataset(tmp_path / "ds")
    monkeypatch.setattr(train_mod, "get_batch", signal_at(5))  # (read during step 4, 0-based: saved at 5)
    run(tiny_args(ds, tmp_path / "o", "--max_iters=8", "--eval_interval=4"))
    monkeypatch.undo()
    result = run(["--init_from=resume", f"--out_dir={tmp_path / 'o'}", "--max_iters=5"])
    evals = [r["iter"] for r in read_log(tmp_path / "o") if r["kind"] == "eval"]
    assert evals == [0, 4, 5] and result["val_loss"] == pytest.approx(read_log(tmp_path / "o")[-1]["val_loss"])
    assert "is finished (5 iterations = max_iters)" in capsys.readouterr().out


def test_a_second_ctrl_c_quits_at_once_and_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    """(SIGINT's disposition is set here: a suite started as a background job inherits it ignored,
    and train.py, as a shell's background job would, leaves an ignored SIGINT alone.)"""
    ds = make_dataset(tmp_path / "ds")
    previous, sigterm = signal.signal(signal.SIGINT, signal.default_int_handler), signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(train_mod, "get_batch", signal_at(5, (signal.SIGINT, signal.SIGINT)))
    with pytest.raises(KeyboardInterrupt):
        run(tiny_args(ds, tmp_path / "o", "--max_iters=8", "--eval_interval=4"))
    monkeypatch.undo()
    assert torch.load(tmp_path / "o" / "ckpt.pt", weights_only=True)["iter"] == 4
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers restored
    assert signal.getsignal(signal.SIGTERM) is sigterm  # (the suite's, or the one plumbing.stops sets while importing)
    signal.signal(signal.SIGINT, previous)
    run(["--init_from=auto", f"--out_dir={tmp_path / 'o'}"])  # the lock went with the exception


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("preempt")
    ds = make_dataset(tmp / "ds")
    proc = cli(*tiny_args(ds, tmp / "straight", *PREEMPT))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return ds, tmp / "straight"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_train_py_signalled_at_a_random_step_resumes_with_auto_to_the_same_weights(tmp_path, uninterrupted, sig):
    ds, straight = uninterrupted
    k = random.randint(2, 24)
    out = tmp_path / "o"
    proc = subprocess.Popen([sys.executable, "-c", SLOW_TRAIN, *map(str, tiny_args(ds, out, *PREEMPT))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        wait_for_train_row(out, k, proc)
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, (k, stderr[-2000:])
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    ckpt = torch.load(out / "ckpt.pt", weights_only=True)
    at, pending = ckpt["iter"], ckpt.get("eval_pending", False)  # (a signal before an eval: it waits for the resume)
    assert k <= at < 40, (k, at)
    assert stdout.splitlines()[-1].startswith(f"stopped by {sig.name} after iteration {at}/40"), stdout[-500:]
    assert [(r["kind"], r["iter"]) for r in read_log(out)] == \
        [(r["kind"], r["iter"]) for r in read_log(straight) if r["iter"] < at or r["iter"] == at and not (
            pending and r["kind"] == "eval")]
    resumed = cli("--init_from=auto", f"--out_dir={out}")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert read_log(out) == read_log(straight), k
    reference = final_weights(straight)
    for name, tensor in final_weights(out).items():
        assert torch.equal(tensor, reference[name]), (k, at, name)


@pytest.mark.slow
def test_under_torchrun_a_signal_to_one_rank_stops_every_rank_after_the_same_step(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    out = tmp_path / "o"
    script = tmp_path / "slow_train.py"
    script.write_text(SLOW_TRAIN)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script),
           *map(str, tiny_args(ds, out, *PREEMPT, "--ddp_timeout_s=30"))]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    stdout, stderr = sigterm_rank_1(proc, out, 3, str(script))
    at = torch.load(out / "ckpt.pt", weights_only=True)["iter"]
    assert 3 <= at < 40, stderr[-3000:]
    assert f"stopped by SIGTERM after iteration {at}/40" in stdout, stdout[-2000:] + stderr[-2000:]
    assert max(r["iter"] for r in read_log(out)) == at  # rank 0 (the log's writer) stopped there too


# -----------------------------------------------------------------------------
# sweep.py passes a stop on to its runs


def test_a_sigterm_to_sweep_stops_its_runs_which_save_and_the_sweep_exits(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    base = tmp_path / "base.py"
    base.write_text(f"dataset = {str(ds)!r}\nn_layer = 1\nn_head = 2\nn_embd = 32\nblock_size = 16\nbatch_size = 4\n"
                    "max_iters = 100000\neval_interval = 50\neval_iters = 2\nsample_tokens = 0\nwarmup_iters = 2\n")
    ablation = tmp_path / "long.py"
    ablation.write_text(f"claim = 'a run long enough to be stopped'\nbase = {str(base)!r}\n"
                        "variants = {'baseline': {}}\nsettings = {'adamw': {}}\nseeds = [1]\n")
    out_root = tmp_path / "runs_reliability"
    proc = subprocess.Popen([sys.executable, "-m", "research.sweep", str(ablation), f"--out_root={out_root}",
                             f"--results={tmp_path / 'results'}", "--parallel=1", "--threads=1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        end = time.time() + 120
        while not any(os.path.exists(out_root / name / "log.jsonl") and any(
                r["kind"] == "train" for r in read_log_rows(out_root / name / "log.jsonl"))
                for name in (os.listdir(out_root) if os.path.isdir(out_root) else [])):
            assert time.time() < end and proc.poll() is None, proc.communicate()[1][-2000:]
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
        survivors = pids_running(str(out_root))
    finally:
        proc.kill()
        for pid in pids_running(str(out_root)):  # this test's own train.py, left running
            os.kill(pid, signal.SIGKILL)
    assert survivors == [], "train.py outlived the sweep"
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    (name,) = os.listdir(out_root)
    assert torch.load(out_root / name / "ckpt.pt", weights_only=True)["iter"] > 0  # the run saved on its way out
    assert f"stopped {name} (exit 143)" in stdout and "stopped by SIGTERM" in stdout, stdout
    assert "stopped by SIGTERM after iteration" in open(out_root / name / "train.log").read()


# -----------------------------------------------------------------------------
# Devices, init_from=auto, a stretched schedule


@pytest.mark.parametrize("device", ["tpu", "CPU", "", "cuda:x", "gpu"])
def test_a_device_name_torch_would_choke_on_is_one_line(device):
    with pytest.raises(UserError, match=rf"^device={device!r} is not one of 'auto', 'cpu', 'cuda', 'cuda:N', 'mps'$"):
        resolve_device(device)


def test_a_device_this_machine_lacks_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(UserError, match=r"^device='mps' but MPS .* is not available on this machine: use --device=cpu$"):
        resolve_device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == ("cuda:1", "bfloat16")
    with pytest.raises(UserError, match=r"^device='cuda:2' but this machine has 2 CUDA device\(s\), cuda:0 to cuda:1"):
        resolve_device("cuda:2")
    monkeypatch.undo()
    with pytest.raises(UserError, match="^device='tpu' is not one of"):  # before a model or a folder exists
        run(tiny_args(make_dataset(tmp_path / "ds"), tmp_path / "o", "--device=tpu"))
    assert not os.path.exists(tmp_path / "o")


def test_init_from_auto_starts_a_new_run_or_resumes_one(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--init_from=auto", "--max_iters=2", "--eval_interval=2"))
    run(tiny_args(ds, tmp_path / "o", "--init_from=auto", "--max_iters=4"))
    assert [r["iter"] for r in read_log(tmp_path / "o") if r["kind"] == "train"] == [1, 2, 3, 4]
    assert "auto" in configurator.SECTIONS["I/O"]["init_from"][2]
    with pytest.raises(UserError, match="init_from='later' is not one of 'scratch', 'resume', 'auto'"):
        run(tiny_args(ds, tmp_path / "p", "--init_from=later"))


def test_resuming_with_another_max_iters_says_which_schedule_each_part_ran_on(tmp_path, capsys):
    """The LR is a function of (iteration, max_iters): a resume with another max_iters mixes two
    schedules, which a note says, unless every iteration so far had the same LR on both (warmup)."""
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=4", "--eval_interval=2"))
    capsys.readouterr()
    run(["--init_from=resume", f"--out_dir={tmp_path / 'o'}", "--max_iters=8"])
    notes = [ln for ln in capsys.readouterr().out.splitlines() if "schedule is a function" in ln]
    assert notes == [notes[0]] and notes[0].startswith(
        "note: max_iters=8, the checkpoint's run had 4: the LR schedule is a function of max_iters, so "
        "iterations 1-4 ran on the 4-iteration cosine schedule and the rest follow the 8-iteration one (LR "
        "multiplier ")
    run(["--init_from=resume", f"--out_dir={tmp_path / 'o'}", "--max_iters=8"])  # same max_iters: no note
    assert "schedule is a function" not in capsys.readouterr().out
    # still inside warmup: the 4 iterations so far had the LRs of any max_iters, so nothing is mixed
    run(tiny_args(ds, tmp_path / "w", "--max_iters=4", "--eval_interval=2", "--warmup_iters=6"))
    run(["--init_from=resume", f"--out_dir={tmp_path / 'w'}", "--max_iters=12"])
    assert "schedule is a function" not in capsys.readouterr().out


# -----------------------------------------------------------------------------
# A full disk: one line, nothing torn, the same command continues


def test_append_log_cut_short_by_a_full_disk_leaves_only_whole_rows(tmp_path, monkeypatch):
    """A short write (the disk filled mid-row) is cut back: the file is its earlier rows, byte for byte."""
    from plumbing import ops as log_io
    path = str(tmp_path / "log.jsonl")
    log_io.append_log(path, {"kind": "train", "iter": 1, "tokens": 8, "loss": 3.5})
    before = open(path, "rb").read()
    real_write = os.write

    def half_write(fd, data):
        return real_write(fd, data[: len(data) // 2])

    monkeypatch.setattr(log_io.os, "write", half_write)
    with pytest.raises(OSError) as info:
        log_io.append_log(path, {"kind": "train", "iter": 2, "tokens": 16, "loss": 3.25})
    monkeypatch.undo()
    assert info.value.errno == disk.SHORT_WRITE and info.value.filename == path  # (full, quota or size limit)
    line = disk.os_error_line(info.value)
    assert f"at {path}: the disk took part of the write" in line and "ulimit -f" in line and "df -h" in line
    assert open(path, "rb").read() == before
    log_io.append_log(path, {"kind": "train", "iter": 2, "tokens": 16, "loss": 3.25})  # space freed: the log goes on
    assert [r["iter"] for r in read_log_rows(path)] == [1, 2]


FILLS_UP = """
import resource, signal, sys, torch
sys.path.insert(0, {root!r})
from plumbing import checkpoint, common
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))
common.cli(lambda argv: checkpoint.save_checkpoint({path!r}, {{"iter": 8, "w": torch.zeros(100_000)}}))
"""


def test_a_full_disk_during_a_checkpoint_keeps_the_previous_one(tmp_path):
    """The disk takes the first 64 KiB of a checkpoint, then refuses (a file-size limit stands in
    for a full disk: writes past it fail, as on a disk that fills mid-save). torch.save raises a
    RuntimeError around the file's OSError; the run says so in one line naming ckpt.pt, exit 1, and
    the previous checkpoint is whole, no .tmp left."""
    path = str(tmp_path / "ckpt.pt")
    torch.save({"iter": 4}, path)
    out = subprocess.run([sys.executable, "-c", FILLS_UP.format(root=ROOT, path=path)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    assert out.stderr.count("\n") == 1, out.stderr
    assert f"File too large at {path}: the file passed this process's file-size limit; nothing saved" in out.stderr
    assert sorted(os.listdir(tmp_path)) == ["ckpt.pt"] and torch.load(path, weights_only=True) == {"iter": 4}


def test_disk_full_mid_run_is_one_line_and_auto_finishes_the_uninterrupted_run(tmp_path, monkeypatch):
    """The disk fills at iteration 6 of 8 (log.jsonl's writes fail): train.py says so in one line
    naming the file, the log holds whole rows and the checkpoint of iteration 4; after space is freed
    `--init_from=auto` ends with the weights of a run that never stopped."""
    ds = make_dataset(tmp_path / "ds")
    common = ["--max_iters=8", "--eval_interval=4"]
    run(tiny_args(ds, tmp_path / "a", *common))
    log = tmp_path / "b" / "log.jsonl"
    real_append = ops.append_log

    def fills_at_6(path, row):
        real_append("/dev/full" if row["iter"] >= 6 else path, row)

    monkeypatch.setattr(ops, "append_log", fills_at_6)
    monkeypatch.setattr(sys, "argv", ["train.py", *tiny_args(ds, tmp_path / "b", *common)])
    with pytest.raises(SystemExit) as info:
        shared.cli(train_mod.main)
    monkeypatch.undo()
    assert info.value.code == 1
    assert [r["iter"] for r in read_log_rows(log)] == [0, 1, 2, 3, 4, 4, 5]
    assert torch.load(tmp_path / "b" / "ckpt.pt", weights_only=True)["iter"] == 4
    run(["--init_from=auto", f"--out_dir={tmp_path / 'b'}"])
    assert read_log(tmp_path / "b") == read_log(tmp_path / "a")
    for name, tensor in final_weights(tmp_path / "a").items():
        assert torch.equal(tensor, final_weights(tmp_path / "b")[name]), name


def test_cli_reports_a_full_disk_in_one_line(tmp_path, capsys):
    def main(argv):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "log.jsonl"))

    with pytest.raises(SystemExit) as info:
        shared.cli(main)
    err = capsys.readouterr().err
    assert info.value.code == 1 and err.count("\n") == 1
    assert err.startswith(f"error: No space left on device at {tmp_path / 'log.jsonl'}: the disk is full; nothing "
                          f"saved before is lost")
    assert "--init_from=auto" in err


WRITERS = {  # what each library raises when the disk refuses its write, each in its own wrapping
    "numpy tofile (a short write, no errno)": "np.zeros(100_000).tofile(path)",
    "safetensors save_file (SafetensorError)":
        "__import__('safetensors.torch').torch.save_file({'w': torch.zeros(100_000)}, path)",
    "torch.distributed.checkpoint (CheckpointException, a BaseException)":
        "dcp.save({'w': torch.zeros(100_000)}, checkpoint_id=path, no_dist=True)",
}
WRITER = """
import resource, signal, sys, warnings
import numpy as np, torch
import torch.distributed.checkpoint as dcp
sys.path.insert(0, {root!r})
from plumbing import common
warnings.simplefilter("ignore")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, resource.RLIM_INFINITY))
path = {path!r}
common.cli(lambda argv: {call})
"""


@pytest.mark.parametrize("writer", WRITERS)
def test_a_refused_write_inside_any_library_is_one_line(tmp_path, writer):
    """Each library that writes for a command wraps the file system's refusal its own way: cli finds the
    OS error under the wrapping and says it in one line with the cause (here a file-size limit), exit 1."""
    if writer.startswith("safetensors"):
        pytest.importorskip("safetensors", reason="optional extra: pip install -e '.[export]'")
    path = str(tmp_path / "out")
    done = subprocess.run([sys.executable, "-c", WRITER.format(root=ROOT, path=path, call=WRITERS[writer])],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr
    assert "limit" in done.stderr or "disk is full" in done.stderr, done.stderr


@pytest.mark.parametrize("code", sorted(c for c in disk.OS_CAUSES if c > 0))  # (numpy's short write: above)
@pytest.mark.parametrize("wrap", ["bare", "cause", "context"])
def test_cli_says_each_file_system_refusal_in_one_line_with_its_cause(tmp_path, capsys, code, wrap):
    """Every errno of OS_CAUSES, raised bare or under another exception (a library's RuntimeError from
    it, or one raised while handling it), is one line naming the path and that errno's own cause."""
    path = str(tmp_path / "log.jsonl")

    def main(argv):
        err = OSError(code, os.strerror(code), path)
        if wrap == "bare":
            raise err
        try:
            raise err
        except OSError as e:
            if wrap == "cause":
                raise RuntimeError("the library's words") from e
            raise RuntimeError("while handling it")

    with pytest.raises(SystemExit) as info:
        shared.cli(main)
    err = capsys.readouterr().err
    cause = disk.OS_CAUSES[code][0].split("{")[0].strip()
    assert info.value.code == 1 and err.count("\n") == 1, err
    assert err.startswith(f"error: {os.strerror(code)} at {path}: {cause}"), err


@pytest.mark.parametrize("error", [ValueError("a bug"), OSError(errno.EXDEV, "Invalid cross-device link", "x"),
                                   OSError("no errno")])
def test_cli_leaves_an_error_that_is_not_the_file_systems_a_traceback(error):
    """The instrument responds: a bug, or an OS error whose cause and fix it does not know, keeps its
    traceback (a line would hide where it came from)."""
    def main(argv):
        raise error

    with pytest.raises(type(error)):
        shared.cli(main)


def test_permission_denied_names_what_this_user_may_not_do(tmp_path):
    """The permission line says which access failed, from the file system as it stands."""
    unreadable, folder = tmp_path / "ckpt.pt", tmp_path / "locked"
    unreadable.write_bytes(b"x")
    folder.mkdir()
    words = {p: disk.os_error_line(PermissionError(errno.EACCES, "Permission denied", str(p)))
             for p in (unreadable, folder, folder / "new.bin")}
    assert "may not write this file" in words[unreadable] or "may not read this file" in words[unreadable]
    assert "may not list or create files in this folder" in words[folder]
    assert f"may not create files in {folder}" in words[folder / "new.bin"]


def test_a_refusal_on_the_way_to_hugging_faces_cache_names_the_cache_and_hf_home(tmp_path, monkeypatch):
    """A HOME this user may not write failed inside transformers' cache while exporting, and the line
    blamed the export's folder. The cache (HF_HOME, or its default under XDG_CACHE_HOME or HOME) is named
    where the refused path is the cache, inside it, or a folder on the way to it; any other path is not."""
    for key in ("HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cache = tmp_path / "home" / ".cache" / "huggingface"
    for on_the_way in (tmp_path / "home", cache.parent, cache, cache / "modules" / "x.py"):
        line = disk.os_error_line(PermissionError(errno.EACCES, "Permission denied", str(on_the_way)))
        assert f"Hugging Face's cache ({cache}," in line and "export HF_HOME=" in line, (on_the_way, line)
    for elsewhere in (tmp_path / "run" / "hf", tmp_path / "home2", tmp_path / "home" / "data"):
        line = disk.os_error_line(PermissionError(errno.EACCES, "Permission denied", str(elsewhere)))
        assert "Hugging Face" not in line and "HF_HOME" not in line, (elsewhere, line)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # the variable moves the cache: HOME is no longer on its way
    assert "Hugging Face" not in disk.os_error_line(PermissionError(errno.EACCES, "x", str(tmp_path / "home")))
    assert f"Hugging Face's cache ({tmp_path / 'hf'}," in disk.os_error_line(
        PermissionError(errno.EACCES, "x", str(tmp_path / "hf" / "modules")))


@pytest.mark.slow
def test_an_out_dir_removed_while_training_is_one_line_saying_so(tmp_path):
    """A run folder deleted under a training run (a cleanup script, a user) was two chained tracebacks:
    now one line naming the missing path, exit 1, without the promise that what was saved is intact."""
    out = tmp_path / "out"
    with subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"),
                           *tiny_args(make_dataset(tmp_path / "ds"), out, "--max_iters=100000", "--eval_interval=50",
                                      "--compile=False", "--device=cpu")],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}) as proc:
        for line in proc.stdout:
            if line.startswith("iter 60/"):  # (past the first checkpoint)
                break
        shutil.rmtree(out)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "Traceback" not in err and err.count("\n") == 1, err[-3000:]
    assert err.startswith(f"error: No such file or directory at {out}") and "nothing saved" not in err, err


def dead_pid():
    """The id of a process that has ended (a child, waited for): what a killed run's id is afterwards."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_killed_runs_temporaries_are_removed_by_the_next_run_and_a_running_ones_kept(tmp_path, capsys):
    """remove_leftovers takes only names of its prefix whose process is gone: a running process's
    temporary (this one's), another prefix's, a user's folder of a similar name and a link stay."""
    dead = dead_pid()
    leftover = tmp_path / f".export-{dead}-abc"
    (leftover / "hf").mkdir(parents=True)
    (leftover / "hf" / "model.safetensors").write_bytes(b"x" * 1000)
    running = tmp_path / disk.temporary_prefix(".export-")
    running.mkdir()
    kept = [running, tmp_path / f".export-{dead}", tmp_path / f".exports-{dead}-x", tmp_path / f"train.bin.tmp{dead}-"]
    for path in kept[1:]:
        path.write_text("a user's")
    (tmp_path / f".export-{dead}-link").symlink_to(tmp_path / "elsewhere")
    removed = disk.remove_leftovers(str(tmp_path), ".export-", "a half-written export")
    assert removed == [str(leftover)] and not leftover.exists()
    assert all(p.exists() for p in kept) and (tmp_path / f".export-{dead}-link").is_symlink()
    assert capsys.readouterr().err == f"removed {leftover}: a half-written export, left by a run of this command that was killed\n"


def test_a_killed_prepares_token_files_are_removed_by_the_next_one(tmp_path, capsys):
    """FineWeb's and the corpus's token files (GBs) carry their writer's id: the next TokenFiles in the
    folder removes a killed one's and writes the dataset whole."""
    import numpy as np
    sys.path.insert(0, os.path.join(ROOT, "data"))
    from bpe_docs import TMP_NAMES, TokenFiles
    dead = dead_pid()
    for name in TMP_NAMES:
        (tmp_path / f"{name}.tmp{dead}-").write_bytes(b"\0" * 4096)
    with TokenFiles(str(tmp_path)) as out:
        out.write("train", np.arange(10, dtype=np.uint16))
        out.write("val", np.arange(5, dtype=np.uint16))
        out.commit()
    assert sorted(os.listdir(tmp_path)) == ["meta.pkl", "train.bin", "val.bin"]
    assert capsys.readouterr().err.count("a half-written token file, left by a run of this command") == 3


TERMINATED = """
import os, sys, time
sys.path.insert(0, {root!r})
from plumbing import common

def main(argv):
    try:
        open({tmp!r}, "w").close()
        print("started", flush=True)
        time.sleep(60)
    finally:
        os.remove({tmp!r})  # a writer's cleanup: Python's default SIGTERM would skip it

common.cli(main)
"""


def test_sigterm_runs_a_commands_cleanup_and_ends_in_one_line(tmp_path):
    """Under cli a SIGTERM unwinds like an exception: the command's finally removes its temporary
    file, then one 'terminated' line, exit 143 (what a shell reports for SIGTERM)."""
    tmp = str(tmp_path / "train.bin.tmp")
    with subprocess.Popen([sys.executable, "-c", TERMINATED.format(root=ROOT, tmp=tmp)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout.readline() == "started\n"
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and err.startswith("terminated (SIGTERM)") and err.count("\n") == 1, err
    assert not os.path.exists(tmp)


# -----------------------------------------------------------------------------
# A shared CPU: OpenMP threads sleep when idle


@pytest.mark.parametrize("given,expected", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_train_py_sets_the_openmp_wait_policy_before_torch_loads(given, expected):
    """OpenMP reads OMP_WAIT_POLICY once, when torch loads: train.py sets it first (passive: idle
    threads sleep, so a second process on the cores is not starved), unless the user set it."""
    code = ("import os, sys; from plumbing import common; f = common.set_omp_env\n"
            "common.set_omp_env = lambda: (print('torch' in sys.modules), f())\n"
            "import train; print(os.environ['OMP_WAIT_POLICY'])")
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given:
        env["OMP_WAIT_POLICY"] = given
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=120, check=True).stdout.split()
    assert out == ["False", expected]


def entry_points():
    """Every command of the repository: a file with a `__main__` block at the top, in tools/ or research/,
    or a data prepare script, as a path relative to ROOT."""
    found = []
    for folder in ("", "tools", "research", *glob.glob("data/*/", root_dir=ROOT)):
        for path in sorted(glob.glob(os.path.join(ROOT, folder, "*.py"))):
            if 'if __name__ == "__main__":' in open(path).read() and not os.path.basename(path).startswith("test"):
                found.append(os.path.relpath(path, ROOT))
    return found


def test_every_command_sleeps_openmps_idle_threads_before_torch_can_load():
    """A command's top level, up to its common.set_omp_env() call, imports only the standard library,
    common and configurator (which load no torch: checked in a fresh process), so OpenMP reads the
    passive wait policy; a command without the call (a prepare script) loads no torch at import."""
    import ast
    stdlib = set(sys.stdlib_module_names)
    commands = entry_points()
    assert {"train.py", "sample.py", "tools/export.py", "research/sweep.py", "data/corpus/prepare.py"} <= set(commands)
    torch_free = {"plumbing", "plumbing.common", "configurator"}  # the package's __init__ loads no torch
    for path in commands:
        tree = ast.parse(open(os.path.join(ROOT, path)).read())
        before, called = [], False
        for node in tree.body:
            if isinstance(node, ast.Expr) and "set_omp_env" in ast.unparse(node):
                called = True
                break
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                before += [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [f"{node.module}.{a.name}" for a in node.names]
        late = [m for m in before if m.split(".")[0] not in stdlib and m.split(".")[0] != "configurator"
                and m not in torch_free]
        if called:
            assert not late, f"{path} imports {late} before common.set_omp_env()"
        else:
            code = (f"import runpy, sys; sys.argv = [{path!r}]; sys.path.insert(0, {ROOT!r}); "
                    f"sys.path.insert(0, {os.path.dirname(os.path.join(ROOT, path))!r}); "
                    f"runpy.run_path({os.path.join(ROOT, path)!r}, run_name='not_main'); print('torch' in sys.modules)")
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
            assert out.stdout.split()[-1:] == ["False"], (path, out.stderr[-500:])
    code = f"import sys; sys.path.insert(0, {ROOT!r}); from plumbing import common; import configurator; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.strip() == "False"


def test_a_tilde_in_a_path_key_is_the_home_folder_as_a_shell_would_have_made_it(tmp_path, monkeypatch):
    """`--out_dir=~/runs/x` at a shell prompt reaches train.py unexpanded (no expansion after `=`):
    it is expanded, for every path key (configurator.Path), from the command line or a config file."""
    from configurator import Path, ALLOWED, load_config

    monkeypatch.setenv("HOME", str(tmp_path))
    paths = [k for k, a in ALLOWED.items() if isinstance(a, Path)]
    assert {"out_dir", "dataset"} <= set(paths)
    cfg, _ = load_config([f"--{k}=~/x/{k}" for k in paths])
    assert all(cfg[k] == str(tmp_path / "x" / k) for k in paths)
    conf = tmp_path / "c.py"
    conf.write_text("out_dir = '~/runs/y'\n")
    assert load_config([str(conf)])[0]["out_dir"] == str(tmp_path / "runs" / "y")


def test_a_save_cut_short_leaves_no_tmp_after_the_next_start(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=2", "--eval_interval=2"))
    stale = tmp_path / "o" / "ckpt.pt.tmp"
    stale.write_bytes(b"half a checkpoint")  # a SIGKILL inside torch.save
    run(tiny_args(ds, tmp_path / "o", "--init_from=resume", "--max_iters=3", "--eval_interval=2"))
    assert not stale.exists() and (tmp_path / "o" / "ckpt.pt").exists()


def test_more_inputs_that_were_tracebacks_are_one_line(tmp_path):
    """A config file with non-UTF-8 bytes; a DDP timeout no timedelta holds; sample.py's seed past
    what torch takes; a sweep whose --results is a file (found before any training)."""
    import sample
    from configurator import load_config
    from research import sweep
    from test_sweep import write_ablation

    conf = tmp_path / "c.py"
    conf.write_bytes(b"n_layer = 2  # caf\xe9\n")
    with pytest.raises(UserError, match="byte 18 is not UTF-8 text"):
        load_config([str(conf)])
    with pytest.raises(UserError, match=r"ddp_timeout_s=10000000000 must be in \[1, 10000000\]"):
        from plumbing.ops import check_config
        check_config(load_config(["--ddp_timeout_s=10000000000"])[0])
    with pytest.raises(UserError, match=r"0 <= --seed < 2\*\*63"):
        sample.main([f"--out_dir={tmp_path}", "--seed=99999999999999999999"])
    results = tmp_path / "results.json"
    results.write_text("{}")
    with pytest.raises(UserError, match="--results=.*a file, not a folder"):
        sweep.main([write_ablation(tmp_path), f"--results={results}", f"--out_root={tmp_path / 'runs'}"])
    assert not (tmp_path / "runs").exists()


def test_weights_that_mean_nothing_are_one_line_in_sample_export_and_resume(tmp_path):
    """A checkpoint whose weights hold NaN (saved by hand after a divergence), lack a tensor, carry
    one the model does not have, or one of another shape than its config makes: sample.py,
    tools/export.py and a resume each refuse it in one line naming the file and the tensor, and
    write nothing."""
    import sample
    from tools import export
    data = make_dataset(tmp_path / "ds")
    good = tmp_path / "good"
    run(tiny_args(data, str(good), "--max_iters=2", "--eval_interval=2"))
    ckpt = torch.load(good / "ckpt.pt", weights_only=True)
    name = next(k for k, v in ckpt["model"].items() if k.startswith("blocks.0.") and v.dim() == 2)

    def damaged(state):
        return {**ckpt, "model": state}

    nan = dict(ckpt["model"])
    nan[name] = nan[name].clone()
    nan[name][0, 0] = float("nan")
    cases = {"nan": (damaged(nan), rf"weights hold NaN or inf \(in 1 tensors, first {re.escape(name)}\)"),
             "missing": (damaged({k: v for k, v in ckpt["model"].items() if k != name}),
                         rf"do not match the model its config describes: {re.escape(name)} missing"),
             "extra": (damaged({**ckpt["model"], "transformer.h.9.extra": torch.ones(3)}),
                       r"transformer\.h\.9\.extra not in this model"),
             "shape": (damaged({**ckpt["model"], name: ckpt["model"][name][:-1]}),
                       rf"{re.escape(name)} is \(\d+, \d+\), the config makes \(\d+, \d+\)")}
    for case, (bad_ckpt, match) in cases.items():
        out = tmp_path / case
        shutil.copytree(good, out)
        torch.save(bad_ckpt, out / "ckpt.pt")
        before = {p: open(out / p, "rb").read() for p in os.listdir(out) if os.path.isfile(out / p)}
        for command in (lambda: sample.main([f"--out_dir={out}", "--start=A", "--max_new_tokens=3"]),
                        lambda: export.main([f"--out_dir={out}", "--no_check"]),
                        lambda: run(tiny_args(data, str(out), "--max_iters=4", "--eval_interval=2",
                                              "--init_from=resume"))):
            with pytest.raises(UserError, match=match) as err:
                command()
            assert "\n" not in str(err.value), case
        after = {p: open(out / p, "rb").read() for p in os.listdir(out) if os.path.isfile(out / p)}
        assert after == before and not (out / "hf").exists(), case


def test_a_signal_inside_an_accumulation_lets_the_step_finish_and_saves_it(tmp_path, monkeypatch):
    """The ranks check for a stop once per iteration, before its first micro-step: a SIGTERM during
    step 4's accumulation (0-based; its second micro-step) lets all 4 micro-steps and the optimizer
    step run, iteration 5 is saved, and the resume ends as the uninterrupted run, bit for bit."""
    ds = make_dataset(tmp_path / "ds")
    common = ["--max_iters=6", "--eval_interval=3", "--gradient_accumulation_steps=4"]
    run(tiny_args(ds, tmp_path / "a", *common))
    seen = []
    real = signal_at(4, micro_step=2)  # (read during micro-step 1)

    def counting(data, split, index, j, *rest):
        seen.append((split, index, j))
        return real(data, split, index, j, *rest)
    monkeypatch.setattr(train_mod, "get_batch", counting)
    assert run(tiny_args(ds, tmp_path / "b", *common))["stopped"] == "SIGTERM"
    monkeypatch.undo()
    assert [s for s in seen if s[:2] == ("train", 4)] == [("train", 4, j) for j in range(4)]
    assert [s for s in seen if s[:2] == ("train", 5)] == [("train", 5, 0)]  # read ahead; step 5 never ran
    assert torch.load(tmp_path / "b" / "ckpt.pt", weights_only=True)["iter"] == 5
    assert [r["iter"] for r in read_log(tmp_path / "b") if r["kind"] == "train"] == [1, 2, 3, 4, 5]
    run(["--init_from=resume", f"--out_dir={tmp_path / 'b'}"])
    assert read_log(tmp_path / "b") == read_log(tmp_path / "a")
    for name, tensor in final_weights(tmp_path / "a").items():
        assert torch.equal(tensor, final_weights(tmp_path / "b")[name]), name


def signal_at_val_batch(n):
    """A get_batch that sends this process SIGTERM while reading the n-th validation batch (1-based,
    counting from the start of train(): the batch begin reads for a Hugging Face check is the first)."""
    real, seen = train_mod.get_batch, []

    def get_batch(data, split, *rest):
        if split == "val":
            seen.append(1)
            if len(seen) == n:
                signal.raise_signal(signal.SIGTERM)
        return real(data, split, *rest)
    return get_batch


def test_a_signal_during_an_evaluation_stops_it_at_the_next_batch_and_the_resume_runs_it(tmp_path, monkeypatch,
                                                                                        capsys):
    """SIGTERM at the second batch of the eval at iteration 4: the eval stops there (not logged), the 4
    iterations are saved with the eval pending, and the resume runs it first: the log and weights
    end as the uninterrupted run's."""
    ds = make_dataset(tmp_path / "ds")
    common = ["--max_iters=6", "--eval_interval=4", "--eval_iters=3"]
    run(tiny_args(ds, tmp_path / "a", *common))
    monkeypatch.setattr(train_mod, "get_batch", signal_at_val_batch(1 + 3 + 2))  # begin's, eval 0's, eval 4's 2nd
    assert run(tiny_args(ds, tmp_path / "b", *common))["stopped"] == "SIGTERM"
    monkeypatch.undo()
    ckpt = torch.load(tmp_path / "b" / "ckpt.pt", weights_only=True)
    assert (ckpt["iter"], ckpt["val_loss"], ckpt["eval_pending"]) == (4, None, True)
    assert [r["iter"] for r in read_log(tmp_path / "b") if r["kind"] == "eval"] == [0]
    assert "stopped by SIGTERM after iteration 4/6" in capsys.readouterr().out
    run(["--init_from=auto", f"--out_dir={tmp_path / 'b'}"])
    assert read_log(tmp_path / "b") == read_log(tmp_path / "a")
    for name, tensor in final_weights(tmp_path / "a").items():
        assert torch.equal(tensor, final_weights(tmp_path / "b")[name]), name


def test_a_huge_evaluation_or_sample_is_named_at_start_and_a_signal_ends_it_at_once(tmp_path, monkeypatch, capsys):
    """--eval_iters=100000000: the start names the evaluations' time (from FLOPs at the device's best),
    and a SIGTERM at its third batch ends the run there, nothing to save; --sample_tokens=1000000000:
    named too, and a SIGTERM ends the sample after the token in hand, the run finished and saved."""
    import model
    ds = make_dataset(tmp_path / "ds")
    monkeypatch.setattr(train_mod, "get_batch", signal_at_val_batch(1 + 3))
    assert run(tiny_args(ds, tmp_path / "e", "--max_iters=2", "--eval_iters=100000000"))["stopped"] == "SIGTERM"
    monkeypatch.undo()
    out = capsys.readouterr().out
    assert "note: the 2 evaluations of eval_iters=100000000 batches take at least" in out
    assert "stopped by SIGTERM before the first step; nothing to save" in out
    real, calls = model.GPT.generate, []

    def generate(self, idx, n, **kw):
        calls.append(n)
        if len(calls) == 5:
            signal.raise_signal(signal.SIGTERM)
        return real(self, idx, n, **kw)

    monkeypatch.setattr(model.GPT, "generate", generate)
    result = run(tiny_args(ds, tmp_path / "s", "--max_iters=2", "--sample_tokens=1000000000"))
    out = capsys.readouterr().out
    assert "the end-of-run sample of sample_tokens=1000000000 (no KV cache) takes at least" in out
    assert "--- sample (5 tokens, cut short by SIGTERM) ---" in out and "done: 2 iterations" in out
    assert result["stopped"] is None and torch.load(tmp_path / "s" / "ckpt.pt", weights_only=True)["iter"] == 2


@pytest.mark.slow  # torchrun, 2 processes
def test_under_torchrun_a_signal_to_one_rank_during_an_evaluation_stops_every_rank_at_the_same_batch(tmp_path):
    """The final evaluation of 10**8 batches (it would never end): a SIGTERM to rank 1 alone stops both
    ranks within it (they agree on the stop at every eval batch), the 4 iterations are saved with the
    eval pending and no eval row, and a resume in one process runs that eval and finishes."""
    ds = make_dataset(tmp_path / "ds")
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           os.path.join(ROOT, "train.py"),
           *map(str, tiny_args(ds, out, "--max_iters=4", "--eval_interval=0", "--eval_iters=100000000",
                               "--ddp_timeout_s=30", "--gradient_accumulation_steps=2"))]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    stdout, stderr = sigterm_rank_1(proc, out, 4, str(out), wait_s=2)  # 2 s: inside the final evaluation
    assert "stopped by SIGTERM after iteration 4/4" in stdout, stdout[-2000:] + stderr[-2000:]
    ckpt = torch.load(out / "ckpt.pt", weights_only=True)
    assert (ckpt["iter"], ckpt["val_loss"], ckpt["eval_pending"]) == (4, None, True)
    assert not [r for r in read_log(out) if r["kind"] == "eval"]
    assert run(["--init_from=resume", f"--out_dir={out}", "--eval_iters=2"])["stopped"] is None
    assert [r["iter"] for r in read_log(out) if r["kind"] == "eval"] == [4]


INNER_TESTS = '''
import os, time
import train, test_train

def test_one():
    real = train.get_batch
    def slow(*args):
        time.sleep(0.05)
        return real(*args)
    train.get_batch = slow
    ds = test_train.make_dataset(os.environ["SCALEVEC_DS"])
    result = test_train.run(test_train.tiny_args(ds, os.environ["SCALEVEC_OUT"], "--max_iters=5000"))
    open(os.environ["SCALEVEC_MARK"], "w").write(str(result["stopped"]))

def test_two():
    open(os.environ["SCALEVEC_MARK"] + ".next", "w").write("ran")
'''


def test_a_sigterm_ends_a_test_run_that_is_inside_train(tmp_path):
    """pytest with this suite's conftest, a test training in-process: SIGTERM from outside lets that
    run save and stop (its StopSignals), then ends the test run (exit 143), the next test not run."""
    (tmp_path / "test_inner.py").write_text(INNER_TESTS)
    out, mark = tmp_path / "out", tmp_path / "mark"
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "tests"), "SCALEVEC_OUT": str(out),
           "SCALEVEC_DS": str(tmp_path / "ds"), "SCALEVEC_MARK": str(mark), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                             str(tmp_path / "test_inner.py")], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            log = out / "log.jsonl"
            if log.exists() and log.read_text().count('"kind": "train"') >= 3:
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, output[-2000:]
    assert mark.read_text() == "SIGTERM" and not os.path.exists(str(mark) + ".next"), output[-2000:]
    assert "stopped by SIGTERM during" in output
    assert torch.load(out / "ckpt.pt", weights_only=True)["iter"] >= 3  # the run saved where it stopped


def test_a_leftover_that_cannot_be_removed_is_said_so_not_reported_removed(tmp_path, capsys, monkeypatch):
    """Another user's killed export in a shared folder: the removal fails, and the line says it could not
    remove it (it said 'removed' while the folder stayed)."""
    dead = dead_pid()
    leftover = tmp_path / f".export-{dead}-abc"
    (leftover / "hf").mkdir(parents=True)

    def refused(path, *a, **k):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(disk.shutil, "rmtree", refused)
    assert disk.remove_leftovers(str(tmp_path), ".export-", "a half-written export") == []
    err = capsys.readouterr().err
    assert leftover.exists() and err.startswith(f"could not remove {leftover} (Permission denied)"), err


def test_a_folder_at_a_files_temporary_name_is_one_line_and_kept(tmp_path):
    """atomic_write's cleanup removed 'its' temporary: a folder there (someone's) was IsADirectoryError's
    traceback. Now one line before anything is written; the folder and the file stay as they were."""
    from plumbing.checkpoint import atomic_write
    (tmp_path / "run.png").write_text("old")
    (tmp_path / "run.png.tmp").mkdir()
    (tmp_path / "run.png.tmp" / "theirs").write_text("keep")
    with pytest.raises(UserError, match=r"run\.png\.tmp is a folder, where run\.png's temporary is written"):
        with atomic_write(str(tmp_path / "run.png")) as f:
            f.write("new")
    assert (tmp_path / "run.png").read_text() == "old" and (tmp_path / "run.png.tmp" / "theirs").read_text() == "keep"
