"""Nothing a downloaded folder holds runs as code, and a run writes nothing outside its out_dir.

Each payload does something harmless but visible (it creates a marker file) and, where it can, also
returns what the real file held, so a reader that ran it would go on as if nothing happened. Every
command that reads the folder is run on it; the marker must never appear. Hugging Face and GGUF
folders: tests/test_security_hf.py.
"""

import os
import pickle
import shutil
import subprocess
import sys

import pytest
import torch

from plumbing.checkpoint import DcpMetadataUnpickler, load_checkpoint, newest_checkpoint
from configurator import UserError
from conftest import ROOT, data_keys
from test_train import cli, make_dataset, run, tiny_args


class Payload:
    """Unpickled by a reader that admits globals, it evaluates `code` (which creates the marker)."""

    def __init__(self, code):
        self.code = code

    def __reduce__(self):
        return eval, (self.code,)


def touching(marker, then="None"):
    """Code that creates marker, then evaluates to `then` (an expression)."""
    return f"(__import__('pathlib').Path({str(marker)!r}).touch(), {then})[1]"


def command(*args, cwd=ROOT, timeout=180):
    """A project command as a new user runs it: stdin closed (nothing to answer a prompt with)."""
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          stdin=subprocess.DEVNULL, timeout=timeout)


def one_line(proc, *names):
    """The command failed with one line (no traceback) that names each of names."""
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert all(str(n) in last for n in names), last


@pytest.fixture(scope="module")
def sharded_run(tmp_path_factory):
    """A tiny finished run whose checkpoint is a sharded ckpt.dcp folder (as an fsdp=True run saves it)."""
    from test_fsdp import as_sharded
    root = tmp_path_factory.mktemp("sharded")
    ds = make_dataset(root / "ds")
    run(tiny_args(ds, root / "pt", "--max_iters=2", "--eval_interval=2"))
    out = root / "run"
    out.mkdir()
    as_sharded(root / "pt", out)
    shutil.copy(root / "pt" / "log.jsonl", out)
    return ds, out


def with_metadata_payload(sharded_run, tmp_path, marker):
    """A copy of the sharded run whose ckpt.dcp/.metadata runs code and then returns the real metadata."""
    ds, src = sharded_run
    out = tmp_path / "downloaded"
    shutil.copytree(src, out)
    meta = out / "ckpt.dcp" / ".metadata"
    real = meta.read_bytes()
    meta.write_bytes(pickle.dumps(Payload(touching(marker, f"__import__('pickle').loads({real!r})"))))
    return ds, out


def test_the_payload_would_run_under_a_plain_pickle_load(sharded_run, tmp_path):
    """The payload is real: torch's own reader (a plain pickle.load) runs it and reads the folder on."""
    from torch.distributed.checkpoint import FileSystemReader
    marker = tmp_path / "ran"
    _, out = with_metadata_payload(sharded_run, tmp_path, marker)
    assert FileSystemReader(str(out / "ckpt.dcp")).read_metadata().storage_data
    assert marker.exists()


def test_a_real_sharded_checkpoint_reads_through_the_restricted_reader(sharded_run):
    _, out = sharded_run
    assert newest_checkpoint(str(out)) == (str(out / "ckpt.dcp"), [])
    with open(out / "ckpt.dcp" / ".metadata", "rb") as f:
        assert DcpMetadataUnpickler(f).load().storage_data


@pytest.mark.parametrize("route", ["auto", "resume", "scratch"])
def test_dcp_metadata_never_runs_when_train_starts(sharded_run, tmp_path, route):
    marker = tmp_path / "ran"
    ds, out = with_metadata_payload(sharded_run, tmp_path, marker)
    args = tiny_args(ds, out, "--max_iters=4", "--eval_interval=2", f"--init_from={route}")
    with pytest.raises(UserError, match="refused|already holds"):
        run(args)
    assert not marker.exists()


def test_dcp_metadata_never_runs_in_sample_export_or_the_task_writer(sharded_run, tmp_path):
    marker = tmp_path / "ran"
    _, out = with_metadata_payload(sharded_run, tmp_path, marker)
    for args in (["sample.py", f"--out_dir={out}", "--max_new_tokens=2"],
                 ["-m", "tools.export", f"--out_dir={out}", f"--export_dir={tmp_path / 'hf'}", "--no_check"]):
        one_line(command(*args), "ckpt.dcp", "refused")
        assert not marker.exists(), args
    assert not (tmp_path / "hf").exists()


def test_an_optimizer_entry_that_names_code_is_refused_on_resume(sharded_run, tmp_path):
    """torch.distributed.checkpoint stores non-tensor entries (the optimizer groups' lr, betas) as
    torch.save'd bytes and its planner loads them with weights_only=False: here one entry is replaced
    by a payload (appended to the shard file, the metadata pointed at it)."""
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata
    marker = tmp_path / "ran"
    ds, src = sharded_run
    out = tmp_path / "downloaded"
    shutil.copytree(src, out)
    folder = out / "ckpt.dcp"
    with open(folder / ".metadata", "rb") as f:
        meta = DcpMetadataUnpickler(f).load()
    key = next(k for k, v in meta.state_dict_metadata.items() if isinstance(v, BytesStorageMetadata))
    index, info = next((i, s) for i, s in meta.storage_data.items() if i.fqn == key)
    import io
    buf = io.BytesIO()
    torch.save(Payload(touching(marker, "1e-3")), buf)
    shard = folder / info.relative_path
    offset = shard.stat().st_size
    with open(shard, "ab") as f:
        f.write(buf.getvalue())
    info.offset, info.length = offset, len(buf.getvalue())
    with open(folder / ".metadata", "wb") as f:
        pickle.dump(meta, f)
    with pytest.raises(UserError, match="refused"):
        run(tiny_args(ds, out, "--max_iters=4", "--eval_interval=2", "--init_from=resume"))
    assert not marker.exists()


def test_a_dataset_folders_own_prepare_script_never_runs(tmp_path):
    """A folder named like a dataset this repository prepares, with a prepare.py of its own and no
    token files: one line naming the repository's way to make them; its script never runs."""
    marker = tmp_path / "ran"
    folder = tmp_path / "downloads" / "shakespeare_char"
    folder.mkdir(parents=True)
    (folder / "prepare.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    proc = cli(*tiny_args(folder, tmp_path / "out", "--max_iters=2"))
    one_line(proc, "train.bin", "data/corpus/prepare.py")
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_the_repositorys_own_prepare_script_makes_its_dataset(tmp_path, monkeypatch):
    """--dataset=shakespeare_char names this repository's data/shakespeare_char/, whose script runs
    when its files are missing (here a copy of the repository, so the real folder stays as it is)."""
    from plumbing import dataset
    from configurator import load_config
    from types import SimpleNamespace
    (tmp_path / "data" / "shakespeare_char").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "data", "shakespeare_text.py"), tmp_path / "data")
    shutil.copy(os.path.join(ROOT, "data", "shakespeare_char", "prepare.py"), tmp_path / "data" / "shakespeare_char")
    for part in ("plumbing", "configurator.py"):  # what the scripts import from the repository (cli, disk)
        (tmp_path / part).symlink_to(os.path.join(ROOT, part))
    monkeypatch.setattr(dataset, "ROOT", str(tmp_path))
    cfg, _ = load_config(["--dataset=shakespeare_char"])
    loaded = dataset.load_data(**data_keys(SimpleNamespace(**cfg)))
    assert os.path.getsize(loaded["train"]) // 2 > 4_000_000 and loaded["meta"]["vocab_size"] < 100


@pytest.mark.parametrize("name", ["log.jsonl", ".lock", "ckpt.pt", "ckpt.pt.tmp", "log.jsonl.tmp"])
def test_a_symlink_in_out_dir_is_refused_and_its_target_untouched(tmp_path, name):
    ds = make_dataset(tmp_path / "ds")
    out = tmp_path / "out"
    run(tiny_args(ds, out, "--max_iters=2", "--eval_interval=2"))
    target = tmp_path / "elsewhere.txt"
    target.write_text("precious\n")
    link = out / name
    if link.exists():
        link.unlink()
    link.symlink_to(target)
    with pytest.raises(UserError, match=f"{name}.*symbolic link"):
        run(tiny_args(ds, out, "--max_iters=4", "--eval_interval=2", "--init_from=resume"))
    assert target.read_text() == "precious\n"


def test_a_char_vocabulary_that_disagrees_with_its_size_is_refused(tmp_path):
    ds = make_dataset(tmp_path / "ds", vocab=40)
    meta_path = os.path.join(ds, "meta.pkl")
    with open(meta_path, "rb") as f:
        meta = pickle.load(f)
    for bad, says in (({**meta, "vocab_size": 1000}, "vocab_size=1000 for a character vocabulary of 40"),
                      ({**meta, "stoi": {c: i + 1 for i, c in enumerate(meta["itos"])}}, "not one vocabulary")):
        with open(meta_path, "wb") as f:
            pickle.dump(bad, f)
        with pytest.raises(UserError, match=says):
            run(tiny_args(ds, tmp_path / "out", "--max_iters=2"))
    assert not (tmp_path / "out").exists()


# --- what a damaged or odd file says: one line naming the value and the fix ---

@pytest.mark.parametrize("key, value", [("iter", "6"), ("iter", -3), ("tokens", 2.5), ("config", [1]),
                                        ("iter", True)])
def test_a_checkpoint_field_of_the_wrong_kind_is_one_line(tmp_path, key, value):
    ds = make_dataset(tmp_path / "ds")
    out = tmp_path / "out"
    run(tiny_args(ds, out, "--max_iters=2", "--eval_interval=2"))
    ckpt = torch.load(out / "ckpt.pt", weights_only=True)
    torch.save({**ckpt, key: value}, out / "ckpt.pt")
    with pytest.raises(UserError, match=f"holds {key}=.*it must be"):
        load_checkpoint(str(out / "ckpt.pt"))
    one_line(cli("--init_from=resume", f"--out_dir={out}", "--max_iters=4"), f"{key}=")


def test_a_torn_binary_last_log_line_is_dropped_and_one_inside_names_its_line(tmp_path):
    """A write cut mid-character leaves bytes that are not UTF-8 on the last line: torn, so dropped on
    resume like any torn line. The same bytes on an earlier line name that line and the fix."""
    from plumbing.ops import read_log
    ds = make_dataset(tmp_path / "ds")
    out = tmp_path / "out"
    run(tiny_args(ds, out, "--max_iters=2", "--eval_interval=2"))
    log = out / "log.jsonl"
    whole = log.read_bytes()
    log.write_bytes(whole + b'{"kind": "train", "iter": 3, "l\xff\xfe')
    rows = read_log(str(log))
    assert len(rows) == whole.count(b"\n") and rows[-1]["kind"] == "eval" and rows[-1]["iter"] == 2
    log.write_bytes(b'\xff\xfe\n' + whole)
    with pytest.raises(UserError, match=r"line 1: .* delete the line"):
        read_log(str(log))


def test_the_continue_command_is_quoted_for_a_shell(tmp_path, monkeypatch, capsys):
    import train as train_mod
    from test_reliability import signal_at
    ds = make_dataset(tmp_path / "ds")
    out = tmp_path / "my runs" / "it's"
    monkeypatch.setattr(train_mod, "get_batch", signal_at(1))
    assert run(tiny_args(ds, out, "--max_iters=4"))["stopped"] == "SIGTERM"
    monkeypatch.undo()
    line = capsys.readouterr().out.strip().splitlines()[-1]
    import shlex
    command = line.split("`")[1]
    assert shlex.split(command) == ["python", "train.py", "--init_from=resume", f"--out_dir={out}"]


def test_a_zero_muon_lr_is_refused_not_a_note():
    from configurator import load_config
    with pytest.raises(UserError, match="muon_lr=0.0 must be > 0"):
        load_config(["--optimizer=muon", "--muon_lr=0"])


# --- a run writes only its own files, and reads only regular files inside the folder that names them ---

@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A tiny finished run (ckpt.pt, log.jsonl) to copy: (dataset, out_dir)."""
    root = tmp_path_factory.mktemp("finished")
    ds = make_dataset(root / "ds")
    run(tiny_args(ds, root / "run", "--max_iters=2", "--eval_interval=2"))
    return ds, root / "run"


def copy_of(folder, tmp_path):
    out = tmp_path / "downloaded"
    shutil.copytree(folder, out)
    return out


def snapshot(folder):
    """{name: (inode, size, mtime)} of everything under folder: what a refused command must leave as it was."""
    return {str(p.relative_to(folder)): (p.lstat().st_ino, p.lstat().st_size, p.lstat().st_mtime_ns)
            for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("name, kind", [("log.jsonl", "hard link"), (".lock", "hard link"), ("ckpt.pt", "hard link"),
                                        ("ckpt.dcp/run.pt", "hard link"), ("log.jsonl", "FIFO"),
                                        ("ckpt.pt.tmp", "FIFO")])
def test_a_file_a_run_writes_that_is_not_its_own_is_refused_at_start(finished_run, sharded_run, tmp_path, name, kind):
    """A file under two names (a hard link, as an archive unpacked without a filter leaves) would have the run
    write outside its folder (its log rows, its pid in .lock); a FIFO would hold it forever. Either is one
    line naming the file and the fix, before anything is written."""
    from test_fuzz import time_cap
    ds, src = sharded_run if name.startswith("ckpt.dcp") else finished_run
    out = copy_of(src, tmp_path)
    outside = tmp_path / "outside"
    if (out / name).exists():  # the file as it was, now also kept elsewhere
        shutil.copy(out / name, outside)
    else:
        outside.write_text("precious\n")
    kept = outside.read_bytes()
    (out / name).unlink(missing_ok=True)
    os.link(outside, out / name) if kind == "hard link" else os.mkfifo(out / name)
    before = snapshot(out)
    says = f"{name} has 2 hard links.*cp -p" if kind == "hard link" else f"{name} is not a file but a named pipe"
    with time_cap(20), pytest.raises(UserError, match=says):
        run(tiny_args(ds, out, "--max_iters=4", "--eval_interval=2", "--init_from=auto"))
    assert outside.read_bytes() == kept and snapshot(out) == before


def test_the_hard_linked_run_of_the_report_is_one_line_from_the_command(finished_run, tmp_path):
    ds, src = finished_run
    out = copy_of(src, tmp_path)
    for name in ("log.jsonl", ".lock"):
        (tmp_path / name).write_text("precious\n")
        (out / name).unlink(missing_ok=True)
        os.link(tmp_path / name, out / name)
    one_line(cli(*tiny_args(ds, out, "--max_iters=4", "--init_from=auto")), "hard links", "--out_dir")
    assert all((tmp_path / name).read_text() == "precious\n" for name in ("log.jsonl", ".lock"))


def replace_by_fifo(path):
    path.unlink()
    os.mkfifo(path)


@pytest.mark.parametrize("name", ["ckpt.pt", "ckpt.dcp/.metadata", "ckpt.dcp/run.pt", "shard", "log.jsonl",
                                  "meta.pkl", "config.json"])
def test_a_fifo_where_a_file_is_read_is_one_line_never_a_wait(finished_run, sharded_run, tmp_path, name):
    """Each of these waited forever on a FIFO, printing nothing: sample.py's checkpoint (ckpt.pt; a sharded
    one's .metadata, run.pt, or a shard file its metadata names), train.py's log on a resume, the dataset's
    meta.pkl, and a folder's JSON (common.read_json). Each is now one line saying what the file is."""
    from plumbing.ops import read_log
    from plumbing.common import read_json
    from test_fuzz import time_cap
    ds, src = sharded_run if name.startswith(("ckpt.dcp", "shard")) else finished_run
    out = copy_of(src, tmp_path)
    if name == "shard":  # the metadata names a FIFO inside the folder as one weight's file
        out = with_shard_at(sharded_run, tmp_path / "s", "pipe.distcp")
        os.mkfifo(out / "ckpt.dcp" / "pipe.distcp")
        name = "ckpt.dcp/pipe.distcp"
    elif name == "meta.pkl":
        ds = copy_of(ds, tmp_path / "data")
        replace_by_fifo(ds / name)
    elif name == "config.json":
        os.mkfifo(out / name)
    else:
        replace_by_fifo(out / name)
    says = f"{name} is not a file but a named pipe"
    if name.startswith("ckpt"):  # a process of its own: torch opens some files in C, where no alarm ends a wait
        one_line(command("sample.py", f"--out_dir={out}", "--max_new_tokens=2", "--device=cpu", "--start=a",
                         timeout=60), says)
        return
    with time_cap(20), pytest.raises(UserError, match=says):
        if name == "log.jsonl":
            read_log(str(out / name))  # (train.py refuses it before reading: the test above)
        elif name == "meta.pkl":
            run(tiny_args(ds, tmp_path / "new", "--max_iters=2"))
        else:
            read_json(str(out / name))


def with_shard_at(sharded_run, tmp_path, relative):
    """A copy of the sharded run whose metadata names `relative` as the file of one model tensor."""
    ds, src = sharded_run
    out = copy_of(src, tmp_path)
    folder = out / "ckpt.dcp"
    with open(folder / ".metadata", "rb") as f:
        meta = DcpMetadataUnpickler(f).load()
    key = next(i for i in meta.storage_data if i.fqn.startswith("model."))
    meta.storage_data[key].relative_path = str(relative)
    with open(folder / ".metadata", "wb") as f:
        pickle.dump(meta, f)
    return out


def test_a_shard_file_outside_the_checkpoint_folder_is_refused_before_it_is_read(sharded_run, tmp_path):
    """A .metadata whose relative_path leaves ckpt.dcp: refused as leaving it, before any read (a payload
    there was read, then called a pickle that names code; a FIFO there held the reader forever)."""
    import io

    import sample
    from test_fuzz import time_cap
    marker = tmp_path / "ran"
    buf = io.BytesIO()
    torch.save(Payload(touching(marker)), buf)
    (tmp_path / "outside.distcp").write_bytes(buf.getvalue())
    os.mkfifo(tmp_path / "pipe.distcp")
    for relative in ("../../outside.distcp", tmp_path / "pipe.distcp"):
        out = with_shard_at(sharded_run, tmp_path / str(len(str(relative))), relative)
        with time_cap(20), pytest.raises(UserError, match="lies outside .*ckpt.dcp.*nothing of it was read"):
            sample.main([f"--out_dir={out}", "--max_new_tokens=2", "--device=cpu", "--start=a"])
    assert not marker.exists()


def test_the_stop_note_says_what_the_loop_does_where_the_signal_arrives(tmp_path, monkeypatch, capfd):
    """A SIGTERM inside an accumulation lets the step finish; one during an evaluation stops it at its next
    batch: the note printed as the signal arrives says both, not "after this step" alone."""
    import train as train_mod
    from test_reliability import signal_at, signal_at_val_batch
    ds = make_dataset(tmp_path / "ds")
    for name, at in (("accumulation", signal_at(2, micro_step=1)), ("evaluation", signal_at_val_batch(1 + 2 + 1))):
        monkeypatch.setattr(train_mod, "get_batch", at)
        assert run(tiny_args(ds, tmp_path / name, "--max_iters=4", "--eval_interval=2",
                             "--gradient_accumulation_steps=2"))["stopped"] == "SIGTERM"
        monkeypatch.undo()
        note = next(line for line in capfd.readouterr().err.splitlines() if line.startswith("SIGTERM:"))
        assert "the step under way finishes (every micro-step" in note, name
        assert "an evaluation stops at its next batch" in note, name


@pytest.mark.parametrize("row, says", [({"kind": "eval", "iter": 2, "val_loss": "low"}, "'val_loss' = 'low'"),
                                       ({"kind": "train", "iter": 2, "loss": float("nan")}, "'loss' = nan")])
def test_a_log_row_research_code_refuses_is_refused_at_resume(finished_run, tmp_path, row, says):
    """A row at the checkpoint's iteration that plot --run and the sweep refuse (a val_loss that is no
    number; a NaN loss) was kept by a resume, to be refused only after the run: now the resume says so."""
    import json
    ds, src = finished_run
    out = copy_of(src, tmp_path)
    log = out / "log.jsonl"
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    at = max(n for n, r in enumerate(rows) if (r["kind"], r["iter"]) == (row["kind"], row["iter"]))
    rows[at] = {**rows[at], **row}
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(UserError, match=f"line {at + 1}: .*{says}.* delete the line"):
        run(tiny_args(ds, out, "--max_iters=4", "--init_from=auto"))


# --- what the path fuzz (tests/test_fuzz_paths.py) found, each kind in one process ---

def test_a_token_file_swapped_for_a_fifo_after_the_start_is_never_opened(finished_run, tmp_path):
    """load_data opens train.bin and val.bin once, checked (common.open_checked); every batch maps that
    open file, so a FIFO (or another file) put at the path later is never opened: the batches are the
    ones the files held at the start, and nothing waits."""
    from types import SimpleNamespace

    import train as train_mod
    from configurator import load_config
    from plumbing.dataset import load_data
    from test_fuzz import time_cap
    ds = copy_of(finished_run[0], tmp_path)
    cfg = SimpleNamespace(**{**load_config(tiny_args(ds, tmp_path / "o"))[0], "vocab_size": 40})  # (make_dataset's)
    data = load_data(**data_keys(cfg))
    before = [train_mod.get_batch(data, split, 3, 0, cfg, torch.device("cpu"))[0] for split in ("train", "val")]
    for split in ("train", "val"):
        replace_by_fifo(ds / f"{split}.bin")
    with time_cap(20):
        after = [train_mod.get_batch(data, split, 3, 0, cfg, torch.device("cpu"))[0] for split in ("train", "val")]
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    os.remove(ds / "train.bin")
    with pytest.raises(UserError, match="train.bin is not a file but a named pipe"):  # the start says so
        os.mkfifo(ds / "train.bin")
        load_data(**data_keys(cfg))


def plant(path, kind, outside):
    """path made a symbolic link (absolute or relative), a hard link to outside (a file of "precious"
    bytes), or a FIFO; returns what outside holds."""
    outside.write_text("precious\n")
    if kind == "symlink":
        os.symlink(outside, path)
    elif kind == "relative symlink":
        os.symlink(os.path.relpath(outside, os.path.dirname(path)), path)
    elif kind == "hard link":
        os.link(outside, path)
    else:
        os.mkfifo(path)
    return outside.read_bytes(), outside.stat().st_mtime_ns


KINDS = ["symlink", "relative symlink", "hard link", "FIFO"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("at", ["path", "path.tmp"])
def test_every_file_written_whole_is_a_new_file_never_written_through(tmp_path, kind, at):
    """checkpoint.atomic_write, which every written checkpoint, record, table and figure goes through
    (research.figures.save_figure too): a link, a hard link or a FIFO at the name or at its .tmp is
    replaced by a new file, and never written through or waited on."""
    from plumbing.checkpoint import atomic_write
    from research.figures import save_figure
    from test_fuzz import time_cap
    outside = tmp_path / "outside.txt"
    path = tmp_path / "out" / "table.md"
    path.parent.mkdir()
    kept = plant(str(path) + (".tmp" if at == "path.tmp" else ""), kind, outside)
    with time_cap(20):
        with atomic_write(str(path)) as f:
            f.write("new\n")
        import matplotlib.pyplot as plt
        save_figure(plt.figure(), str(path.with_suffix(".png")))
    assert path.read_text() == "new\n" and not path.is_symlink() and path.stat().st_nlink == 1
    assert (outside.read_bytes(), outside.stat().st_mtime_ns) == kept
    assert sorted(os.listdir(path.parent)) == ["table.md", "table.png"]


@pytest.mark.parametrize("kind", ["symlink", "relative symlink"])
@pytest.mark.parametrize("trailing", ["", "/"])
def test_a_folder_a_command_writes_in_is_never_a_link(tmp_path, kind, trailing):
    """configurator.folder_problem, which every command asks before it writes in a folder (train.py's
    out_dir, export's, lm_eval_tasks', gguf_to_hf's, plot's and the sweep's): a symbolic link there is
    one line naming where it points, before its probe file is made (nothing happens in the target),
    while a real folder is fine."""
    from configurator import folder_problem
    target = tmp_path / "elsewhere"
    target.mkdir()
    mtime = target.stat().st_mtime_ns
    link = tmp_path / "out"
    os.symlink(target if kind == "symlink" else "elsewhere", link)
    problem = folder_problem(str(link) + trailing)
    assert problem.startswith("a symbolic link (to ") and str(target) in problem
    assert target.stat().st_mtime_ns == mtime and os.listdir(target) == []
    assert folder_problem(str(target)) is None


@pytest.mark.parametrize("kind", KINDS)
def test_a_record_a_summary_or_a_run_log_that_is_not_its_own_file_is_one_line(tmp_path, kind):
    """A FIFO as a run record or a gpu_check summary held plot, the sweep and the ladder forever: records,
    summaries, provenance and dataset hashes are read by common.open_checked (a link to a file is read
    as it). A run's train.log the sweep or a job appends to (records.open_run_log) must be the run's own:
    a link, a hard link or a FIFO is one line, and nothing outside is written."""
    from research.ladder import measured_mfu
    from research.records import open_run_log, read_record
    from test_fuzz import time_cap
    outside = tmp_path / "outside.json"
    record, summary = tmp_path / "r.json", tmp_path / "summary.json"
    for path in (record, summary):
        plant(str(path), kind, outside)
        outside.unlink() if path is record else None
    outside.write_text('{"stages": {"train": {"mfu_percent": 40}}}\n')
    with time_cap(20):
        for read, says in ((lambda: read_record(str(record)), "r.json"), (lambda: measured_mfu(str(summary)), "")):
            if kind == "FIFO":
                with pytest.raises(UserError, match="named pipe"):
                    read()
            else:  # a link to a file (or its second name): read as the file it is, one line for bad content
                try:
                    read()
                except UserError as e:
                    assert says in str(e)
    out = tmp_path / "run"
    out.mkdir()
    kept = plant(str(out / "train.log"), kind, tmp_path / "outside.log")
    with time_cap(20), pytest.raises(UserError, match="train.log is .*not the run's own file"):
        open_run_log({"out_dir": str(out)})
    assert ((tmp_path / "outside.log").read_bytes(), (tmp_path / "outside.log").stat().st_mtime_ns) == kept
    with open_run_log({"out_dir": str(tmp_path)}) as f:
        f.write("a line\n")
    assert (tmp_path / "train.log").read_text() == "a line\n"


@pytest.mark.parametrize("how", ["compressed", "stated past the file"])
def test_a_checkpoint_record_torch_save_never_writes_is_refused_before_it_is_read(tmp_path, how):
    """A ckpt.pt is a zip of stored records. One whose record is deflated (a 64 MiB tensor in some
    64 KiB: a zip bomb) or states a size past the file is refused from the archive's directory, in one
    line, before torch.load inflates anything; what torch.save writes passes the same check."""
    import zipfile

    from plumbing import checkpoint
    made = tmp_path / "made.pt"
    torch.save({"iter": 4, "w": torch.zeros(16)}, made)
    with zipfile.ZipFile(made) as z:
        assert all(i.compress_type == zipfile.ZIP_STORED for i in z.infolist())  # torch's own: stored
        records = {i.filename: z.read(i) for i in z.infolist()}
    path = tmp_path / "ckpt.pt"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in records.items():
            z.writestr(name, data)
        if how == "compressed":
            z.writestr("made/data/9", bytes(64 << 20), compress_type=zipfile.ZIP_DEFLATED)
    if how == "stated past the file":  # the directory's size field of the last record, raised to 2 GiB
        raw = bytearray(path.read_bytes())
        at = raw.rfind(b"PK\x01\x02")
        raw[at + 24:at + 28] = (2 << 30).to_bytes(4, "little")
        path.write_bytes(bytes(raw))
    with pytest.raises(UserError, match=r"is refused: its record .* (compressed|larger than the file)") as e:
        checkpoint.load_checkpoint(str(path))
    assert "\n" not in str(e.value)
    with open(made, "rb") as f:
        checkpoint.refuse_foreign_records(f, str(made))  # (raises nothing)
        assert f.tell() == 0 and torch.load(f, weights_only=True)["iter"] == 4
