"""How every command ends when its terminal closes (SIGHUP), its stdout or stderr is closed (`>&-`) or its
stdout's reader goes away mid-run (EPIPE), and when a second Ctrl-C falls inside a checkpoint's save: one
line, exit 128 + the signal's number, the run saved at its step."""

import os
import signal
import subprocess
import sys

import pytest
import torch

import train as train_mod
from conftest import ROOT
from test_reliability import SLOW_TRAIN, TERMINATED, signal_at, wait_for_train_row
from test_train import make_dataset, run, tiny_args


def from_a_terminal():
    """A child started as a terminal starts it: SIGHUP at its default. Under nohup, or a CI runner that
    ignores SIGHUP, the child would inherit the ignore (as it should: see the nohup test)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def shell(command, **kw):
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, cwd=ROOT, timeout=300, **kw)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stops")
    ds = make_dataset(tmp / "ds")
    run(tiny_args(ds, tmp / "o", "--max_iters=2"))
    return ds, tmp


@pytest.mark.parametrize("closed", [pytest.param(">&-", marks=pytest.mark.slow), pytest.param("2>&-", marks=pytest.mark.slow),
                                    ">&- 2>&-"])
def test_train_and_sample_finish_cleanly_with_their_output_closed(tiny_run, closed):
    """Python sets sys.stdout (sys.stderr) to None for a closed descriptor: cli's flush was an
    AttributeError after the work was done, and the first file opened took descriptor 1."""
    ds, tmp = tiny_run
    out = tmp / f"closed{len(closed)}"
    args = " ".join(map(str, tiny_args(ds, out, "--max_iters=2", "--sample_tokens=8")))
    done = shell(f"{sys.executable} train.py {args} {closed}; echo rc=$?")
    assert done.stdout.strip().endswith("rc=0"), done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert torch.load(out / "ckpt.pt", weights_only=True)["iter"] == 2
    assert (out / ".lock").read_text().split()[0].isdigit()  # the lock holds its pid, no progress line
    sampled = shell(f"{sys.executable} sample.py --out_dir={out} --max_new_tokens=4 --start=ab --device=cpu {closed}; echo rc=$?")
    assert sampled.stdout.strip().endswith("rc=0") and "Traceback" not in sampled.stderr, sampled.stderr


def test_a_cli_command_with_stdout_closed_runs_its_children_without_writing_into_its_files(tmp_path):
    """A closed descriptor 1 is /dev/null again before anything is opened: a file the command opens, and
    the child that writes to its inherited stdout, are never the same."""
    script = (f"import os, subprocess, sys; sys.path.insert(0, {ROOT!r}); from plumbing import common\n"
              f"def main(argv):\n"
              f"    f = open({str(tmp_path / 'own.txt')!r}, 'w')\n"
              f"    subprocess.run(['echo', 'child output'])\n"
              f"    print('parent output')\n"
              f"    f.close()\n"
              f"    return 0\n"
              f"common.cli(main)\n")
    (tmp_path / "cmd.py").write_text(script)
    done = shell(f"{sys.executable} {tmp_path / 'cmd.py'} >&-; echo rc=$?")
    assert done.stdout.strip() == "rc=0" and done.stderr == "", done.stderr
    assert (tmp_path / "own.txt").read_text() == ""


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM], ids=["SIGHUP", "SIGTERM"])
def test_sighup_stops_train_py_at_its_step_saved_as_sigterm_does(tiny_run, sig):
    ds, tmp = tiny_run
    out = tmp / f"hup{sig.value}"
    proc = subprocess.Popen([sys.executable, "-c", SLOW_TRAIN, *map(str, tiny_args(ds, out, "--max_iters=200"))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            preexec_fn=from_a_terminal)
    try:
        wait_for_train_row(out, 3, proc)
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig.value, stderr[-2000:]
    at = torch.load(out / "ckpt.pt", weights_only=True)["iter"]
    assert 3 <= at < 200 and stdout.splitlines()[-1].startswith(f"stopped by {sig.name} after iteration {at}/200")
    assert "Traceback" not in stderr


def test_under_nohup_sighup_stays_ignored_and_the_run_finishes(tiny_run):
    ds, tmp = tiny_run
    out = tmp / "nohup"
    proc = subprocess.Popen([sys.executable, "-c", SLOW_TRAIN, *map(str, tiny_args(ds, out, "--max_iters=12"))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        wait_for_train_row(out, 2, proc)
        proc.send_signal(signal.SIGHUP)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "done: 12 iterations" in stdout, stderr[-2000:]


def test_sighup_runs_a_commands_cleanup_and_ends_in_one_line(tmp_path):
    tmp = str(tmp_path / "x.tmp")
    with subprocess.Popen([sys.executable, "-c", TERMINATED.format(root=ROOT, tmp=tmp)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, preexec_fn=from_a_terminal) as proc:
        assert proc.stdout.readline() == "started\n"
        proc.send_signal(signal.SIGHUP)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 129 and err.startswith("terminated (SIGHUP)") and err.count("\n") == 1, err
    assert not os.path.exists(tmp)


def test_a_stdout_reader_that_goes_away_mid_run_stops_train_py_saved_with_its_line_on_stderr(tiny_run):
    """EPIPE at a progress line: the run saves at its step, as for SIGTERM, and says so on stderr (exit 141,
    what a shell reports for SIGPIPE); the resume finishes the run."""
    ds, tmp = tiny_run
    out = tmp / "pipe"
    proc = subprocess.Popen([sys.executable, "-c", SLOW_TRAIN, *map(str, tiny_args(ds, out, "--max_iters=200"))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        wait_for_train_row(out, 3, proc)
        proc.stdout.close()
        stderr = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        proc.kill()
    at = torch.load(out / "ckpt.pt", weights_only=True)["iter"]
    assert proc.returncode == 141 and 3 <= at < 200, stderr[-2000:]
    assert f"stopped by SIGPIPE after iteration {at}/200" in stderr and "Traceback" not in stderr, stderr[-2000:]
    assert run(["--init_from=auto", f"--out_dir={out}", "--max_iters=20"])["stopped"] is None


def test_a_second_ctrl_c_inside_the_stops_save_waits_for_the_checkpoint_then_quits(tmp_path, monkeypatch):
    """The first Ctrl-C stops the run at its step; a second one while that step is being saved used to
    break torch.save in the middle (its writer's own error chained to the KeyboardInterrupt: a
    traceback, no checkpoint of the step). Now the file is written whole, then the run quits."""
    ds = make_dataset(tmp_path / "ds")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    real = train_mod.save_run_checkpoint

    def interrupted_save(path, model, optimizers, state, master):
        if state["val_loss"] is None:  # the stop's save (an eval's has its loss)
            signal.raise_signal(signal.SIGINT)
        return real(path, model, optimizers, state, master)
    monkeypatch.setattr(train_mod, "get_batch", signal_at(5, (signal.SIGINT,)))
    monkeypatch.setattr(train_mod, "save_run_checkpoint", interrupted_save)
    try:
        with pytest.raises(KeyboardInterrupt):
            run(tiny_args(ds, tmp_path / "o", "--max_iters=8", "--eval_interval=4"))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert torch.load(tmp_path / "o" / "ckpt.pt", weights_only=True)["iter"] == 5


@pytest.mark.slow
def test_sigterm_while_rank_0_waits_for_its_peer_is_acted_on_at_once(tiny_run):
    """The rendezvous waited in one C++ call, where no signal handler runs: a SIGTERM was acted on only when
    --ddp_timeout_s (600 s by default) ran out. A scheduler's grace before SIGKILL is typically 30 s."""
    import socket
    import time
    ds, tmp = tiny_run
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
    args = tiny_args(ds, tmp / "ddp", "--device=cpu", "--gradient_accumulation_steps=2")
    proc = subprocess.Popen([sys.executable, "train.py", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:  # listening on MASTER_PORT: in the rendezvous
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        time.sleep(1)
        sent = time.monotonic()
        proc.terminate()
        _, stderr = proc.communicate(timeout=60)
        waited = time.monotonic() - sent
    finally:
        proc.kill()
    assert proc.returncode == 143 and waited < 10, (waited, stderr[-2000:])
    assert stderr.strip().splitlines()[-1].startswith("terminated (SIGTERM)") and "Traceback" not in stderr, stderr


def test_sigterm_during_a_commands_imports_is_one_line(tmp_path):
    """Before cli installs its handler, torch's import takes seconds: Python's default ended the process
    with no line."""
    script = tmp_path / "cmd.py"
    script.write_text(f"import sys; sys.path.insert(0, {ROOT!r})\nfrom plumbing import common\n"
                      f"print('imported', flush=True)\nimport time; time.sleep(60)\n")
    with subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:
        assert proc.stdout.readline() == "imported\n"
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and err == "terminated (SIGTERM) while starting: nothing was done; run the same " \
        "command again\n", err


FULL = "/dev/full"  # Linux's device that takes no write: ENOSPC, as a full disk


def needs_dev_full():
    if not os.path.exists(FULL):
        pytest.skip(f"{FULL} (a device every write to fails with 'no space') is Linux's")


def test_a_stdout_that_refuses_writes_is_one_line_naming_where_it_goes(tmp_path):
    """`> /dev/full` (a full disk where stdout goes): the line said the disk was full and advised
    `df -h of the folder it writes`, with no path; argparse's --help swallowed the error and exited 0."""
    needs_dev_full()
    script = tmp_path / "cmd.py"
    script.write_text(f"import argparse, sys; sys.path.insert(0, {ROOT!r}); from plumbing import common\n"
                      f"def main(argv):\n"
                      f"    argparse.ArgumentParser(description='x' * 100).parse_args(argv)\n"
                      f"    print('a result')\n"
                      f"    return 0\n"
                      f"common.cli(main)\n")
    for args in ("", "--help"):
        done = shell(f"{sys.executable} {script} {args} > {FULL}; echo rc=$?")
        assert done.stdout.strip() == "rc=1", (args, done.stderr)
        assert done.stderr.count("\n") == 1 and done.stderr.startswith(
            f"error: No space left on device at {FULL} (this command's standard output): the disk is full"), done.stderr
        assert "(df -h /dev)," in done.stderr
    assert shell(f"{sys.executable} {script} --help | head -1").stderr == ""  # a reader that left early: quiet


def cli_commands():
    """Every command that runs under common.cli and takes --help (argparse's, or train.py's configurator)."""
    found = []
    for folder, _, files in os.walk(ROOT):
        if any(part.startswith(".") and part != "." or part in ("tests", "build")
               for part in os.path.relpath(folder, ROOT).split(os.sep)):
            continue
        for name in files:
            text = open(os.path.join(folder, name)).read() if name.endswith(".py") else ""
            if "__main__" in text and "cli(" in text and ("ArgumentParser" in text or name == "train.py"):
                found.append(os.path.relpath(os.path.join(folder, name), ROOT))
    return sorted(found)


@pytest.mark.slow
def test_every_commands_help_into_a_full_stdout_is_one_line():
    needs_dev_full()
    commands = cli_commands()
    assert {"train.py", "sample.py", "research/sweep.py", "tools/export.py"} <= set(commands), commands
    for command in commands:
        done = shell(f"{sys.executable} {command} --help > {FULL}; echo rc=$?")
        assert done.stdout.strip() == "rc=1", (command, done.stderr)
        assert done.stderr.count("\n") == 1 and f"at {FULL} (this command's standard output)" in done.stderr, \
            (command, done.stderr)


FILLS_UP = f"""
import os, sys
sys.path.insert(0, {ROOT!r})
from plumbing import common
import train
real_get_batch, calls = train.get_batch, [0]
def get_batch(*args):  # at the 30th batch stdout's disk fills up: descriptor 1 becomes {FULL}
    calls[0] += 1
    if calls[0] == 30:
        os.dup2(os.open({FULL!r}, os.O_WRONLY), 1)
    return real_get_batch(*args)
train.get_batch = get_batch
common.cli(train.main)
"""


def test_a_stdout_that_fills_up_mid_run_stops_train_py_saved_with_its_line_on_stderr(tiny_run):
    """A full disk under a logged stdout is a reader that went away: the run saves at its step and says
    why on stderr (exit 141, as for EPIPE), instead of a traceback that loses the iterations since the
    last checkpoint; the resume finishes the run."""
    needs_dev_full()
    ds, tmp = tiny_run
    out = tmp / "full"
    done = subprocess.run([sys.executable, "-c", FILLS_UP, *map(str, tiny_args(ds, out, "--max_iters=400"))],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    at = torch.load(out / "ckpt.pt", weights_only=True)["iter"]
    assert done.returncode == 141 and 20 <= at < 400, done.stderr[-2000:]
    assert f"SIGPIPE: stdout ({FULL}) refused a write: No space left on device" in done.stderr
    assert f"stopped by SIGPIPE after iteration {at}/400" in done.stderr and "Traceback" not in done.stderr
    assert run(["--init_from=auto", f"--out_dir={out}", f"--max_iters={at + 2}"])["stopped"] is None
