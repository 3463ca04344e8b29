"""Every command that prints, reads or writes a run folder meets, at each path it reads or writes, a
symbolic link leaving the folder (absolute, or relative through ..), a hard link to a file elsewhere
and a FIFO. Each case runs the command as a user does (its own process, stdin closed) under a time
cap: it must end (a FIFO never holds it), print no traceback, and write nothing outside the folders
it was given (a folder beside them, which the links point into, is the same file for file, mtime for
mtime, afterwards). Whether it refuses the path in one line or reads it is the command's affair: a
link to a run's own file elsewhere is no harm to read; what it writes through is.

A table: command -> (argv, the paths it reads or writes); each path gets one hazard of its kind, in
turn (cases(); FUZZ_EVERY_HAZARD=1 runs every hazard at every path).
Slow (a process per case, about 2-5 s each on 2 cores); the in-process checks of each kind are in
tests/test_security.py, tests/test_token_files.py and
(the Slurm claim files) tests/test_slurm.py."""

import os
import pickle
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, snapshot

CAP_S = 60  # a case still running after it waits on a FIFO (the slowest, a resume of 2 steps, takes ~5 s)

# the paths each command reads or writes, as {name} templates of the case's copy of the fixture:
# {run} a finished run (ckpt.pt, log.jsonl, .lock; its export hf/ and tasks lm_eval/), {ds} its
# dataset, {gguf} a tiny GGUF, {made} a folder gguf_to_hf wrote, {plots} plot --run's output,
# {out_root}/{results} a finished sweep's runs and records ({a_run}, {record}: one of each), {new} a
# path nothing is at yet; a path a command writes may be absent before it runs (ABSENT)
FILE, FOLDER = "file", "folder"
# `python -c SUBMITTER ...`: research.sweep whose jobs are local processes even on a Slurm host (a test submits none)
SUBMITTER = ("from plumbing.common import cli; from research import slurm, sweep; "
             "slurm.import_submitit().AutoExecutor.which = staticmethod(lambda: 'local'); cli(sweep.main)")
COMMANDS = {
    "train": (["train.py", "--init_from=auto", "--out_dir={run}", "--dataset={ds}", "--max_iters=4",
               "--eval_interval=2", "--device=cpu"],
              {"{run}/ckpt.pt": FILE, "{run}/log.jsonl": FILE, "{run}/.lock": FILE, "{run}/ckpt.pt.tmp": FILE,
               "{run}/log.jsonl.tmp": FILE, "{ds}/train.bin": FILE, "{ds}/val.bin": FILE, "{ds}/meta.pkl": FILE}),
    "sample": (["sample.py", "--out_dir={run}", "--max_new_tokens=2", "--device=cpu", "--start=a"],
               {"{run}/ckpt.pt": FILE}),
    "sample_dcp": (["sample.py", "--out_dir={sharded}", "--max_new_tokens=2", "--device=cpu", "--start=a"],
                   {"{sharded}/ckpt.dcp": FOLDER, "{sharded}/ckpt.dcp/.metadata": FILE,
                    "{sharded}/ckpt.dcp/run.pt": FILE, "{sharded}/ckpt.dcp/__0_0.distcp": FILE}),
    "train_dcp": (["train.py", "--init_from=auto", "--out_dir={sharded}", "--dataset={ds}", "--max_iters=4",
                   "--eval_interval=2", "--device=cpu"],
                  {"{sharded}/ckpt.dcp/.metadata": FILE, "{sharded}/ckpt.dcp/run.pt": FILE,
                   "{sharded}/ckpt.dcp/__0_0.distcp": FILE, "{sharded}/ckpt.dcp.tmp": FOLDER}),
    "export": (["-m", "tools.export", "--out_dir={run}", "--no_check"],
               {"{run}/ckpt.pt": FILE, "{run}/hf": FOLDER, "{run}/hf/config.json": FILE,
                "{run}/hf/model.safetensors": FILE}),
    "lm_eval_tasks": (["-m", "tools.lm_eval_tasks", "--out_dir={run}"],
                      {"{run}/ckpt.pt": FILE, "{run}/hf/model.safetensors": FILE, "{run}/hf/config.json": FILE,
                       "{run}/hf/modeling_scalevec.py": FILE, "{run}/lm_eval": FOLDER,
                       "{run}/lm_eval/scalevec_val.yaml": FILE, "{ds}/val.bin": FILE}),
    "gguf_to_hf": (["-m", "tools.gguf_to_hf", "--gguf={gguf}", "--out={made}"],
                   {"{gguf}": FILE, "{made}": FOLDER, "{made}/config.json": FILE, "{made}/model.safetensors": FILE}),
    "hf_check": (["-m", "tools.hf_check", "{run}/hf", "--tokens=8"],
                 {"{run}/hf/config.json": FILE, "{run}/hf/model.safetensors": FILE, "{run}/hf/tokenizer.json": FILE}),
    "plot_run": (["-m", "research.plot", "--run={run}", "--out={plots}"],
                 {"{run}/log.jsonl": FILE, "{plots}": FOLDER, "{plots}/run.png": FILE}),
    "plot": (["-m", "research.plot", "{ablation}", "--results={results}", "--out={new}"],
             {"{record}": FILE, "{results}": FOLDER, "{new}": FOLDER}),
    "sweep": (["-m", "research.sweep", "{ablation}", "--results={results}", "--out_root={out_root}"],
              {"{record}": FILE, "{results}": FOLDER, "{a_run}/log.jsonl": FILE, "{a_run}/ckpt.pt": FILE,
               "{a_run}/provenance.json": FILE}),
    # (the same sweep, with one run's record and files gone: it trains that run again, writing them)
    "sweep_runs": (["-m", "research.sweep", "{ablation}", "--results={results}", "--out_root={out_root}"],
                   {"{a_run}/train.log": FILE, "{a_run}/provenance.json": FILE, "{a_run}/log.jsonl": FILE}),
    # (that run submitted as a job instead, to submitit's local executor even where Slurm is: its claim files)
    "sweep_slurm": (["-c", SUBMITTER, "{ablation}", "--slurm", "--gpus_per_node=0", "--cpus_per_task=1",
                     "--time_min=10", "--results={results}", "--out_root={out_root}"],
                    {"{a_run}/slurm_job": FILE, "{a_run}/slurm_job.lock": FILE}),
    "ladder": (["-m", "research.ladder", "{ladder}", "--out={new}.md", "--gpu_check={gpu_check}"],
               {"{new}.md": FILE, "{gpu_check}": FILE}),
}
ABSENT = (".tmp", ".lock", "{new}", "slurm_job")
# removed from a case's copy before the hazard is planted
GONE = {"sweep_runs": ("{record}", "{a_run}"), "sweep_slurm": ("{record}", "{a_run}")}
HAZARDS = {FILE: ("symlink", "relative symlink", "hard link", "FIFO"), FOLDER: ("symlink", "relative symlink", "FIFO")}


def cases(every=os.environ.get("FUZZ_EVERY_HAZARD") == "1"):
    """Each path of each command meets one hazard of its kind, the hazards taken in turn along the
    command's paths of that kind (every hazard meets every command that has as many paths of its kind,
    and each hazard a different path of it from one command to the next); FUZZ_EVERY_HAZARD=1 gives
    every path every hazard (four times the cases)."""
    for c, (command, (_, slots)) in enumerate(COMMANDS.items()):
        seen = {}  # kind -> how many of this command's paths of that kind came before
        for slot, kind in slots.items():
            j, seen[kind] = seen.get(kind, 0), seen.get(kind, 0) + 1
            turn = HAZARDS[kind] if every else [HAZARDS[kind][(j + c) % len(HAZARDS[kind])]]
            for hazard in turn:
                yield pytest.param(command, slot, hazard, id=f"{command}:{slot.strip('{}')}:{hazard}")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The folders every case copies (names as in COMMANDS): one tiny run of character data with line
    breaks, and what each command made of it, once."""
    pytest.importorskip("transformers", reason="export, lm_eval_tasks and hf_check: pip install -e '.[export]'")
    from test_fsdp import as_sharded
    from test_fuzz import small_ladder
    from test_security_hf import tiny_gguf
    from test_sweep import write_ablation
    from test_train import run

    from research import plot, sweep
    from tools import export, gguf_to_hf, lm_eval_tasks

    tmp = tmp_path_factory.mktemp("fuzz_paths")
    itos = sorted(set("abcdefghij \n"))
    ds = tmp / "ds"
    ds.mkdir()
    ids = np.random.default_rng(0).integers(0, len(itos), 6000).astype(np.uint16)
    for split in ("train", "val"):
        ids.tofile(ds / f"{split}.bin")
    with open(ds / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(itos), "itos": itos, "stoi": {c: i for i, c in enumerate(itos)}}, f)
    p = {name: tmp / name for name in ("run", "ds", "made", "plots", "out_root", "results")}
    run([f"--dataset={ds}", f"--out_dir={p['run']}", "--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=16",
         "--batch_size=2", "--max_iters=2", "--eval_interval=2", "--eval_iters=1", "--sample_tokens=0"])
    export.main([f"--out_dir={p['run']}", "--no_check"])
    lm_eval_tasks.main([f"--out_dir={p['run']}", "--max_docs=4", "--items=4"])
    p["sharded"] = tmp / "sharded"  # the run as an fsdp=True run saves it (ckpt.dcp)
    as_sharded(p["run"], p["sharded"])
    shutil.copy(p["run"] / "log.jsonl", p["sharded"])
    p["gguf"] = tiny_gguf(tmp / "gguf" / "m.gguf")
    gguf_to_hf.main([f"--gguf={p['gguf']}", f"--out={p['made']}"])
    plot.main([f"--run={p['run']}", f"--out={p['plots']}"])
    p["ablation"] = write_ablation(tmp / "abl", name="tiny")
    assert sweep.main([p["ablation"], f"--results={p['results']}", f"--out_root={p['out_root']}",
                       "--parallel=1", "--threads=1"]) == 0
    p["a_run"], p["record"] = (p[k] / sorted(os.listdir(p[k]))[0] for k in ("out_root", "results"))
    p["ladder"] = small_ladder(tmp)
    p["gpu_check"] = tmp / "summary.json"
    p["gpu_check"].write_text('{"stages": []}\n')
    for slots in (s for _, s in COMMANDS.values()):  # the table names what the commands made
        for slot, kind in slots.items():
            path = fill(slot, {**p, "new": tmp / "new"})
            assert any(a in slot for a in ABSENT) or (os.path.isdir(path) if kind == FOLDER else os.path.isfile(path)), path
    return tmp, p


def fill(text, paths):
    return text.format(**{k: str(v) for k, v in paths.items()})


def plant(path, hazard, outside):
    """Put hazard at path: the file or folder that was there (or, if none, a file of bytes nobody may
    lose) moves to a new name in outside, and path becomes a link to it (a symbolic one, absolute or
    through .., or a hard link) or a FIFO."""
    target = os.path.join(outside, f"{len(os.listdir(outside))}_{os.path.basename(path)}")
    if os.path.lexists(path):
        shutil.move(path, target)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(target, "w") as f:
            f.write("precious\n")
    if hazard == "FIFO":
        shutil.rmtree(target) if os.path.isdir(target) else None
        os.mkfifo(path)
    elif hazard == "hard link":
        os.link(target, path)
    else:
        os.symlink(target if hazard == "symlink" else os.path.relpath(target, os.path.dirname(path)), path)


def command_line(argv, paths):
    """argv with the case's paths filled in and a script named by its place in the repository (the case
    runs in its own folder, where `train.py` alone names nothing)."""
    return [os.path.join(ROOT, a) if i == 0 and a.endswith(".py") else fill(a, paths) for i, a in enumerate(argv)]


def point_at_dataset(ckpt_path, ds):
    """The copied run's checkpoint names the copied dataset (a reader of it, as lm_eval_tasks, meets the
    case's hazard there), its mtime kept (an export older than its checkpoint is refused as stale)."""
    import torch
    st = os.stat(ckpt_path)
    ckpt = torch.load(ckpt_path, weights_only=True)
    ckpt["config"]["dataset"] = str(ds)
    torch.save(ckpt, ckpt_path)
    os.utime(ckpt_path, ns=(st.st_atime_ns, st.st_mtime_ns))


def run_capped(args, cwd, preexec_fn=None):
    """(return code, stdout, stderr) of `python args`, or None when it is still running after CAP_S (it
    and every process it started are then killed); preexec_fn runs in the child before exec."""
    with subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True, preexec_fn=preexec_fn,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT}) as proc:
        try:
            out, err = proc.communicate(timeout=CAP_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return None
    return proc.returncode, out, err


@pytest.mark.slow
@pytest.mark.parametrize("command, slot, hazard", list(cases()))
def test_a_link_or_fifo_at_any_path_of_a_run_folder_never_hangs_a_command_nor_writes_outside(
        made, tmp_path, command, slot, hazard):
    src, p = made
    case = tmp_path / "case"
    shutil.copytree(src, case, symlinks=True)
    paths = {k: case / os.path.relpath(v, src) for k, v in p.items()} | {"new": case / "new"}
    point_at_dataset(paths["run"] / "ckpt.pt", paths["ds"])
    outside = tmp_path / "outside"
    outside.mkdir()
    argv, _ = COMMANDS[command]
    for gone in GONE.get(command, ()):
        path = fill(gone, paths)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    plant(fill(slot, paths), hazard, str(outside))
    before = snapshot(outside)
    done = run_capped(command_line(argv, paths), cwd=tmp_path)
    assert done is not None, f"{command} still running after {CAP_S} s with {slot} a {hazard}"
    code, out, err = done
    assert "Traceback" not in err, err[-3000:]
    assert snapshot(outside) == before, f"{command} wrote outside through {slot} ({hazard}): {out[-1000:]}{err[-1000:]}"


# -----------------------------------------------------------------------------
# Permission: a path this user may not read (a file) or write (a folder), the process without the
# capabilities that let root past file modes


def drop_file_capabilities():
    """In the child before exec: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the bounding set,
    so a root process is held to file modes as any user is (a cluster's shared folders bind users)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH (linux/capability.h)
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def bound_by_modes():
    """The preexec_fn that holds a child to file modes (None when this user already is), or pytest.skip."""
    if os.geteuid() != 0:
        return None
    try:
        subprocess.run([sys.executable, "-c", "pass"], preexec_fn=drop_file_capabilities, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"root here cannot drop the capabilities that bypass file modes ({e})")
    return drop_file_capabilities


# the Python files a command reads (an ablation file): their links and FIFOs are configurator's affair
# (tests/test_config.py); their modes are checked here with the rest
PERMISSION_ONLY = {"plot": {"{ablation}": FILE}, "sweep": {"{ablation}": FILE}, "ladder": {"{ladder}": FILE}}


def permission_cases():
    for command, (_, slots) in COMMANDS.items():
        for slot, kind in {**slots, **PERMISSION_ONLY.get(command, {})}.items():
            made_by_it = any(a in slot for a in ABSENT) or any(slot.startswith(g) for g in GONE.get(command, ()))
            if not made_by_it:  # (a path the command makes has no mode to deny before it)
                yield pytest.param(command, slot, kind, id=f"{command}:{slot.strip('{}')}")


@pytest.mark.slow
@pytest.mark.parametrize("command, slot, kind", list(permission_cases()))
def test_a_path_this_user_may_not_read_or_write_ends_in_one_line_and_loses_nothing(
        made, tmp_path, command, slot, kind):
    """Each path a command reads or writes, made unreadable (a file: mode 000) or unwritable (a folder:
    mode 555), the process bound by file modes: it ends within the cap, with no traceback; when it
    fails, its last line is one 'error:', naming permission unless the command fails the same way with
    nothing denied; the denied path holds what it held."""
    preexec = bound_by_modes()
    src, p = made
    case = tmp_path / "case"
    shutil.copytree(src, case, symlinks=True)
    paths = {k: case / os.path.relpath(v, src) for k, v in p.items()} | {"new": case / "new"}
    point_at_dataset(paths["run"] / "ckpt.pt", paths["ds"])
    for gone in GONE.get(command, ()):
        path = fill(gone, paths)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    target = fill(slot, paths)
    before = snapshot(target) if kind == FOLDER else open(target, "rb").read()
    os.chmod(target, 0o555 if kind == FOLDER else 0)
    argv, _ = COMMANDS[command]
    try:
        done = run_capped(command_line(argv, paths), cwd=tmp_path, preexec_fn=preexec)
    finally:
        os.chmod(target, 0o755 if kind == FOLDER else 0o644)
    assert done is not None, f"{command} still running after {CAP_S} s with {slot} denied"
    code, _, err = done
    assert "Traceback" not in err, err[-3000:]
    if code != 0:  # (it may replace a file it writes, when it can: its own output)
        last = err.strip().splitlines()[-1]
        assert last.startswith("error: "), err[-2000:]
        assert (snapshot(target) if kind == FOLDER else open(target, "rb").read()) == before
        if "ermission denied" not in last:  # another cause: then it fails with nothing denied too (not "damaged")
            again = run_capped(command_line(argv, paths), cwd=tmp_path)
            assert again is not None and again[0] != 0, f"denied {slot}, it said another cause: {last}"


@pytest.mark.slow
@pytest.mark.parametrize("mode, words", [(0o000, "may not look inside {ds} (no search permission"),
                                         (0o555, None)])
def test_a_dataset_folder_this_user_may_not_open_is_said_as_locked_not_missing(made, tmp_path, mode, words):
    """A dataset folder without search permission was 'data file ... not found' (os.path.exists answers
    False where it may not look): now one line saying it is locked, naming it; a folder that is only
    unwritable trains (a dataset is read)."""
    preexec = bound_by_modes()
    src, p = made
    ds = tmp_path / "ds"
    shutil.copytree(p["ds"], ds)
    argv = [os.path.join(ROOT, "train.py"), f"--dataset={ds}", f"--out_dir={tmp_path / 'out'}", "--n_layer=1",
            "--n_head=2", "--n_embd=32", "--block_size=16", "--batch_size=2", "--max_iters=2", "--eval_interval=2",
            "--eval_iters=1", "--sample_tokens=0", "--device=cpu", "--compile=False"]
    os.chmod(ds, mode)
    try:
        done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=CAP_S, cwd=tmp_path,
                              preexec_fn=preexec, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT})
    finally:
        os.chmod(ds, 0o755)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    if words is None:
        assert done.returncode == 0, done.stderr[-2000:]
    else:
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert words.format(ds=ds) in done.stderr and "not found" not in done.stderr, done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("command, planted", [
    ("export", ["{run}/.export-{dead}-abc"]),
    ("gguf_to_hf", ["{made}.tmp{dead}-abc", "{made}.old{dead}-abc"]),
])
def test_a_writers_rerun_removes_what_its_killed_run_left(made, tmp_path, command, planted):
    """A SIGKILL runs no cleanup: export's hidden folder (a full copy of the weights) and gguf_to_hf's
    temporary and set-aside folders stay. Each carries its writer's process id; the next run of the
    command removes those whose process is gone, saying so, then does its work."""
    from test_reliability import dead_pid
    src, p = made
    case = tmp_path / "case"
    shutil.copytree(src, case, symlinks=True)
    paths = {k: case / os.path.relpath(v, src) for k, v in p.items()} | {"new": case / "new"}
    point_at_dataset(paths["run"] / "ckpt.pt", paths["ds"])
    shutil.rmtree(paths["run"] / "hf")  # (export writes a new one)
    dead = dead_pid()
    left = [fill(name, {**paths, "dead": dead}) for name in planted]
    for path in left:
        os.makedirs(path)
        with open(os.path.join(path, "model.safetensors"), "wb") as f:
            f.write(b"\0" * 4096)
    argv, _ = COMMANDS[command]
    done = run_capped(command_line(argv, paths), cwd=tmp_path)
    assert done is not None and done[0] == 0, done
    assert not any(os.path.exists(path) for path in left)
    assert all(f"removed {path}: " in done[2] for path in left), done[2]


def test_the_table_names_every_command_that_reads_or_writes_a_run_folder():
    """A command of the reading path (train, sample, export, the task writer, the converters, the research
    commands over runs and records) without a row is a failure: its paths get no fuzz."""
    named = {argv[0] if argv[0].endswith(".py") else argv[1] for argv, _ in COMMANDS.values()}
    assert named >= {"train.py", "sample.py", "tools.export", "tools.lm_eval_tasks", "tools.gguf_to_hf",
                     "tools.hf_check", "research.plot", "research.sweep", "research.ladder"}
    every = [p.values for p in cases(every=True)]
    assert sum(len(HAZARDS[kind]) for _, slots in COMMANDS.values() for kind in slots.values()) == len(every)
    turn = [p.values for p in cases()]  # each path once; each hazard at every command with paths enough of its kind
    assert sorted((c, s) for c, s, _ in turn) == sorted((c, s) for c, (_, slots) in COMMANDS.items() for s in slots)
    for command, (_, slots) in COMMANDS.items():
        for kind in HAZARDS:
            met = {h for c, s, h in turn if c == command and slots[s] == kind}
            assert len(met) == min(len(HAZARDS[kind]), list(slots.values()).count(kind)), (command, kind, met)
