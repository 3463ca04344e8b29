"""Multi-process training with torchrun + DDP on CPU (gloo): results do not depend on the
number of processes."""

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import ROOT, data_keys
from model import GPT
from test_train import make_dataset, read_log, tiny_args
from configurator import UserError, load_config
from model import model_config
from plumbing.dataset import load_data
from train import get_batch
from types import SimpleNamespace

K = 4  # optimizer steps


def torchrun(nproc, script, *args, timeout=180):
    """subprocess.run of `torchrun --standalone --nproc_per_node=nproc script args` from the repository,
    its output captured. When the wait ends early (the timeout, or a Ctrl-C or SIGTERM ending the test
    run) torchrun is told to stop its ranks (SIGTERM) and then killed, so no rank is left training."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           os.path.join(ROOT, script), *map(str, args)]
    # a rank that dies in C++ (SIGABRT, SIGSEGV) leaves its Python stack and torch's C++ one in stderr
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1", "TORCH_SHOW_CPP_STACKTRACES": "1"}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env,
                          start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            # torchrun starts each rank in a session of its own: a SIGTERM makes it stop them all itself
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            finally:
                with contextlib.suppress(ProcessLookupError):  # (gone already: the usual case)
                    os.killpg(proc.pid, signal.SIGKILL)
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.mark.slow
def test_a_torchrun_cut_short_leaves_no_rank_running(tmp_path):
    """The helper's wait ended early, once both ranks run (here by a signal to the test process, as a
    Ctrl-C or a SIGTERM to the test run ends it; its timeout ends it the same way): torchrun and every
    rank are gone, not left training."""
    import threading

    class Ended(Exception):
        pass

    def end(signum, frame):
        raise Ended

    def end_once_both_ranks_run():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all((tmp_path / f"rank{r}").exists() for r in (0, 1)):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGUSR1)

    script = tmp_path / "sleeper.py"
    script.write_text(f"import os, time\npath = {str(tmp_path)!r} + f'/rank{{os.environ[\"RANK\"]}}'\n"
                      f"open(path + '.tmp', 'w').write(str(os.getpid()))\nos.rename(path + '.tmp', path)\n"
                      f"time.sleep(600)\n")
    previous = signal.signal(signal.SIGUSR1, end)
    try:
        threading.Thread(target=end_once_both_ranks_run, daemon=True).start()
        with pytest.raises(Ended):
            torchrun(2, str(script), timeout=300)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    pids = [int((tmp_path / f"rank{r}").read_text()) for r in (0, 1)]  # both ranks had started
    for pid in pids:
        for _ in range(100):  # killed; reaped by init once torchrun is gone
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"rank process {pid} is still running")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One 2-process run (accumulation 4 = 2 per rank) and one 1-process run (accumulation 4); the
    train rows flushed at 2 and 4 (the evals) and 3 (log_interval), each flush one all-reduce."""
    tmp = tmp_path_factory.mktemp("ddp")
    ds = make_dataset(tmp / "ds")
    common = [f"--max_iters={K}", f"--eval_interval={K // 2}", "--gradient_accumulation_steps=4",
              "--optimizer=muon", "--n_layer=2", "--log_interval=3"]
    out = {}
    for nproc in (2, 1):
        out[nproc] = tmp / f"n{nproc}"
        proc = torchrun(nproc, "tests/ddp_worker.py", *tiny_args(ds, out[nproc], *common))
        assert proc.returncode == 0, proc.stderr[-3000:]
    return SimpleNamespace(ds=ds, out=out, common=common, tmp=tmp)


@pytest.mark.slow
def test_two_processes_match_one_process(runs):
    one = torch.load(runs.out[1] / "params_rank0.pt")
    r0 = torch.load(runs.out[2] / "params_rank0.pt")
    r1 = torch.load(runs.out[2] / "params_rank1.pt")
    worst = 0.0
    for name in one:
        assert torch.equal(r0[name], r1[name]), f"{name} differs between ranks"
        worst = max(worst, ((r0[name] - one[name]).abs().max() / one[name].abs().max().clamp_min(1e-12)).item())
        torch.testing.assert_close(r0[name], one[name], rtol=1e-4, atol=1e-5, msg=name)
    print(f"largest relative difference, 2 processes vs 1: {worst:.2e}")


@pytest.mark.slow
def test_logged_loss_is_the_mean_over_ranks_and_micro_steps(runs):
    rows2 = [r for r in read_log(runs.out[2]) if r["kind"] == "train"]
    rows1 = [r for r in read_log(runs.out[1]) if r["kind"] == "train"]
    assert [r["iter"] for r in rows2] == list(range(1, K + 1))
    for a, b in zip(rows2, rows1):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    # iteration 1 from scratch: rank r's loss is the mean over micro-steps j = r, r + 2
    cfg, _ = load_config(tiny_args(runs.ds, runs.out[2], *runs.common))
    cfg = SimpleNamespace(**cfg)
    cfg.vocab_size = 40
    model = GPT(model_config(cfg), seed=cfg.seed)
    data = load_data(**data_keys(cfg), prepare_here=False)
    with torch.no_grad():
        micro = [model(*get_batch(data, "train", 0, j, cfg, torch.device("cpu")))[1].item() for j in range(4)]
    ranks = [(micro[0] + micro[2]) / 2, (micro[1] + micro[3]) / 2]
    assert rows2[0]["loss"] == pytest.approx(sum(ranks) / 2, rel=1e-5)


@pytest.mark.slow
def test_checkpoint_from_two_processes_resumes_under_one(runs):
    """Resume the 2-process run's final checkpoint in 1 process for K more steps; the same as
    the 1-process run resumed the same way."""
    for n in (2, 1):
        proc = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "--init_from=resume",
                               f"--out_dir={runs.out[n]}", f"--max_iters={2 * K}"],
                              capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
    a, b = read_log(runs.out[2]), read_log(runs.out[1])
    assert max(r["iter"] for r in a) == 2 * K
    for x, y in zip(a, b):
        for key in {"loss", "val_loss"} & x.keys():
            assert x[key] == pytest.approx(y[key], rel=1e-4), (x, y)


@pytest.mark.slow
def test_bad_split_is_a_clear_error_on_every_rank(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    proc = torchrun(2, "train.py", *tiny_args(ds, tmp_path / "o", "--gradient_accumulation_steps=3"))
    assert proc.returncode != 0
    message = "gradient_accumulation_steps=3 does not divide by WORLD_SIZE=2"
    printed = proc.stderr[:proc.stderr.index("Failures:")]  # what the ranks printed (lines may interleave)
    assert printed.count(f"error: {message}") == 2, proc.stderr[-3000:]
    # torchrun's failure summary, the end of the output, quotes the line (not a link to its docs)
    root_cause = proc.stderr[proc.stderr.index("Root Cause"):]
    assert f"traceback : error: {message}" in root_cause and "To enable traceback" not in root_cause


@pytest.mark.parametrize("accum,batch,world", [(1, 32, 2), (2, 12, 3), (4, 8, 8), (3, 5, 2)])
def test_the_split_error_gives_settings_that_divide_and_keep_the_batch(monkeypatch, accum, batch, world):
    """The one-line fix it names divides by WORLD_SIZE, and keeps the sequences per iteration when
    batch_size allows (the default run under 2 processes: 2 micro-steps of 16)."""
    import re
    from plumbing.common import check_processes
    monkeypatch.setenv("WORLD_SIZE", str(world))
    with pytest.raises(UserError) as info:
        check_processes(accum, batch, fsdp=False)
    new_accum = int(re.search(r"--gradient_accumulation_steps=(\d+)", str(info.value))[1])
    new_batch = re.search(r"--batch_size=(\d+)", str(info.value))
    assert new_accum % world == 0
    if batch * accum % new_accum == 0:
        assert int(new_batch[1]) * new_accum == batch * accum, str(info.value)
    else:
        assert new_batch is None and f"then {batch * new_accum} sequences" in str(info.value)


def test_a_process_ends_its_process_group_alike_on_every_rank_barrier_first_when_clean(tmp_path, monkeypatch):
    """common.end_distributed: clean, the host group's barrier comes before the groups are destroyed (no
    rank closes its connections while another is still in a collective); after an error no barrier
    (another rank may never reach it). Every group is gone after, the host group's reference too, on a
    real gloo group of one process; without a group it does nothing. train.main ends through it, clean
    exactly when train() returned."""
    import torch.distributed as dist

    import train as train_mod
    from plumbing import common
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    common._host_group = dist.new_group(backend="gloo")
    calls = []
    barrier = dist.barrier
    monkeypatch.setattr(dist, "barrier", lambda group=None: calls.append(("barrier", group)) or barrier(group=group))
    host = common._host_group
    common.end_distributed(clean=True)
    assert calls == [("barrier", host)] and not dist.is_initialized() and common._host_group is None
    common.end_distributed(clean=True)  # no group: nothing to do, nothing waits
    assert calls == [("barrier", host)]
    monkeypatch.setattr(dist, "is_initialized", lambda: True)  # as a rank whose run failed sees it
    monkeypatch.setattr(dist, "destroy_process_group", lambda: calls.append("destroy"))
    common.end_distributed(clean=False)
    assert calls == [("barrier", host), "destroy"]
    ended = []
    monkeypatch.setattr(train_mod, "end_distributed", ended.append)
    args = tiny_args(make_dataset(tmp_path / "ds"), tmp_path / "o")

    def trained(result):
        """A stand-in for train(): returns result, or raises it."""
        def run(cfg, given):
            if isinstance(result, Exception):
                raise result
            return result
        return run

    for result, code in (({"stopped": None}, 0), ({"stopped": "SIGTERM"}, 128 + signal.SIGTERM), (UserError("x"), None)):
        monkeypatch.setattr(train_mod, "train", trained(result))
        if code is None:
            with pytest.raises(UserError):
                train_mod.main(args)
        else:
            assert train_mod.main(args) == code
    assert ended == [True, True, False]


TORCHRUN_SET = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


@pytest.mark.parametrize("env, words", [
    ({}, None),  # one process
    (TORCHRUN_SET, None),  # what torchrun sets
    ({"RANK": "1"}, "RANK=1 is set but WORLD_SIZE is not"),  # a Slurm template's RANK: trained alone, saved nothing
    ({"LOCAL_RANK": "0"}, "LOCAL_RANK=0 is set but WORLD_SIZE is not"),
    ({**TORCHRUN_SET, "WORLD_SIZE": "abc"}, "WORLD_SIZE='abc' is not a whole number >= 1"),
    ({**TORCHRUN_SET, "WORLD_SIZE": "0"}, "WORLD_SIZE='0' is not a whole number >= 1"),
    ({**TORCHRUN_SET, "RANK": "-1"}, "RANK='-1' is not a whole number >= 0"),
    ({**TORCHRUN_SET, "RANK": "2"}, "RANK=2 is not below WORLD_SIZE=2"),
    ({k: v for k, v in TORCHRUN_SET.items() if k != "MASTER_ADDR"}, "WORLD_SIZE=2 is set but MASTER_ADDR is not"),
    ({k: v for k, v in TORCHRUN_SET.items() if k != "RANK"}, "WORLD_SIZE=2 is set but RANK is not"),
    ({**TORCHRUN_SET, "MASTER_PORT": "70000"}, "MASTER_PORT='70000' is not a port (1-65535)"),
    ({**TORCHRUN_SET, "MASTER_PORT": "x"}, "MASTER_PORT='x' is not a port (1-65535)"),
    ({**TORCHRUN_SET, "LOCAL_RANK": "3"}, "LOCAL_RANK=3 is not below WORLD_SIZE=2"),
    ({**TORCHRUN_SET, "MASTER_ADDR": "no.such.host.invalid"}, "MASTER_ADDR='no.such.host.invalid' does not resolve"),
])
def test_torchruns_variables_set_by_hand_are_one_line_naming_the_variable_and_the_fix(env, words):
    from plumbing.common import distributed_env_problem
    problem = distributed_env_problem(env)
    if words is None:
        assert problem is None
    else:
        assert words in problem and "run under torchrun" in problem and "\n" not in problem


@pytest.mark.parametrize("env", [{"RANK": "1"}, {"WORLD_SIZE": "abc"}])
def test_train_py_with_a_hand_set_rank_refuses_in_one_line_and_writes_nothing(tmp_path, env):
    """RANK=1 without WORLD_SIZE trained as rank 1 of a world of 1, printed nothing, saved nothing and
    exited 0; WORLD_SIZE=abc was a ValueError traceback."""
    import subprocess
    import sys
    from test_train import ROOT, make_dataset, tiny_args
    clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    done = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"),
                           *tiny_args(make_dataset(tmp_path / "ds"), tmp_path / "out", "--max_iters=2")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120, env={**clean, **env})
    assert done.returncode == 1 and done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


def free_port():
    """A port no process holds, below Linux's ephemeral range (32768-60999): a port bound to 0 comes from
    that range, where another test's outgoing connections may take it before rank 0 binds it."""
    import random
    import socket
    for port in random.Random().sample(range(20000, 32000), 50):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return str(port)
    raise RuntimeError("no free port in 20000-32000")


@pytest.mark.slow
@pytest.mark.parametrize("rank", ["0", "1"])
def test_a_peer_that_never_comes_is_said_within_seconds_and_the_timeout_is_one_line(tmp_path, rank):
    """WORLD_SIZE=2 with one process started: it says what it waits for after PEER_WAIT_NOTE_S (not
    silence until the timeout), then at --ddp_timeout_s one 'error:' line naming the address, exit 1,
    no traceback, nothing written. Rank 0 holds the store and waits for its peer; rank 1 waits for a
    store nobody holds."""
    import subprocess
    import sys
    from plumbing.common import PEER_WAIT_NOTE_S
    from test_train import ROOT, make_dataset, tiny_args
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env = {**clean, "RANK": rank, "LOCAL_RANK": rank, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
    timeout_s = PEER_WAIT_NOTE_S + 5
    done = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"),
                           *tiny_args(make_dataset(tmp_path / "ds"), tmp_path / "out", "--max_iters=2",
                                      "--gradient_accumulation_steps=2", f"--ddp_timeout_s={timeout_s}")],
                          capture_output=True, text=True, cwd=ROOT, timeout=timeout_s + 120, env=env)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert any(line.startswith(f"rank {rank}: waiting for the other processes of 2 at 127.0.0.1:{port}")
               for line in lines), done.stderr[-3000:]
    assert lines[-1].startswith(f"error: rank {rank}: the other processes of 2 did not join at 127.0.0.1:{port}"), lines[-1]
    assert not (tmp_path / "out").exists()


ALONE = """
import sys
sys.path.insert(0, {root!r})
import torch
from plumbing import common
from configurator import UserError

def main(argv):
    rank, _, world = common.setup_distributed("cpu", 60)
    if rank == 0:
        raise UserError("rank 0's own problem: its fix")
    torch.distributed.all_reduce(torch.ones(1))  # rank 0 never comes: gloo says the connection closed
    return 0

common.cli(main)
"""


@pytest.mark.slow
def test_a_rank_that_loses_its_peer_says_so_in_one_line_and_rank_0s_line_is_the_cause(tmp_path):
    """Rank 0 stops on its own error while rank 1 waits in a collective: rank 1 was a 15-line gloo
    traceback around rank 0's one line; now one line pointing at the peer's, and torchrun's summary
    ends with rank 0's line as the root cause."""
    from test_train import ROOT
    script = tmp_path / "alone.py"
    script.write_text(ALONE.format(root=ROOT))
    done = torchrun(2, str(script), timeout=120)
    assert done.returncode != 0
    assert "[rank1]: Traceback" not in done.stderr and "Connection closed by peer" not in done.stderr, done.stderr
    assert "error: rank 0's own problem: its fix" in done.stderr
    assert "rank 1: stopped: another process of this run ended first" in done.stderr
    cause = done.stderr.split("Root Cause")[-1]
    assert "rank      : 0" in cause and "error: rank 0's own problem: its fix" in cause, cause


@pytest.mark.slow
def test_a_master_port_in_use_is_one_line(tmp_path):
    """MASTER_PORT held by another process (a stale run): torch's 33-line DistNetworkError traceback
    (EADDRINUSE) before; now one line naming the port."""
    import socket
    import subprocess
    import sys
    from test_train import ROOT, make_dataset, tiny_args
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = str(held.getsockname()[1])
        clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
        env = {**clean, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
        done = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"),
                               *tiny_args(make_dataset(tmp_path / "ds"), tmp_path / "out", "--max_iters=2",
                                          "--ddp_timeout_s=30")],
                              capture_output=True, text=True, cwd=ROOT, timeout=150, env=env)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1].startswith(f"error: rank 0: MASTER_PORT={port} is in use"), done.stderr
