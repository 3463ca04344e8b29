"""Every command gets train.py's treatment: a table of its flags and input paths, each met with the
values users mistype (wrong type, negative, zero, huge, NaN/inf, empty, missing, a folder for a file
and a file for a folder, a place nobody can write). Each call runs the command's main() in this
process under a time cap: it must end in one line (a UserError, argparse's own error, a SystemExit
with a message) or run to completion with any note it gives; never a traceback, and never the work
a huge count asks for (that is refused or noted before it starts). train.py's own keys have their
fuzz in test_config.py."""

import importlib
import os
import signal
from contextlib import contextmanager

import pytest

from conftest import ROOT
from configurator import UserError

CAP_S = int(os.environ.get("FUZZ_CAP_S", 30))  # a call that runs past it did the work of a huge count instead of refusing it

INT = ["abc", "-1", "0", "99999999999999999999", "", "1.5"]
FLOAT = ["abc", "-1", "0", "nan", "inf", "-inf", "1e300", ""]
IN_FOLDER = ["", "{missing}", "{file}"]
IN_FILE = ["", "{missing}", "{folder}"]
OUT_FOLDER = ["", "{file}", "/proc/self/nope"]
OUT_FILE = ["", "{folder}", "/proc/self/nope.md"]
KINDS = {"int": INT, "float": FLOAT, "in_folder": IN_FOLDER, "in_file": IN_FILE, "out_folder": OUT_FOLDER,
         "out_file": OUT_FILE}

# command -> (module, the argv a correct call has ({run}, {export}, {hf}, {ablation}, ... are the
# fixture's paths), {flag: kind} of its flags; a positional argument is "#<index in argv>")
COMMANDS = {
    "sample": ("sample", ["--out_dir={run}", "--max_new_tokens=4"],
               {"--out_dir": "in_folder", "--num_samples": "int", "--max_new_tokens": "int", "--temperature": "float",
                "--top_k": "int", "--seed": "int"}),
    "export": ("tools.export", ["--out_dir={run}", "--export_dir={new}"],
               {"--out_dir": "in_folder", "--export_dir": "out_folder", "--tol": "float"}),
    "lm_eval_tasks": ("tools.lm_eval_tasks", ["--out_dir={run}", "--tasks_dir={new}"],
                      {"--out_dir": "in_folder", "--tasks_dir": "out_folder", "--export_dir": "in_folder",
                       "--max_docs": "int", "--items": "int",
                       "--context_lines": "int", "--doc_chars": "int", "--seed": "int"}),
    "gguf_check": ("tools.gguf_check", ["--export_dir={export}", "--llama_cpp={missing}"],
                   {"--export_dir": "in_folder", "--llama_cpp": "in_folder", "--python": "in_file"}),
    "hf_check": ("tools.hf_check", ["{hf}", "--tokens=8"], {"#0": "in_folder", "--tokens": "int"}),
    "hf_model": ("train", ["--hf_model={hf}", "--dataset={hf_data}", "--out_dir={new}", "--block_size=16",
                           "--batch_size=2", "--max_iters=1", "--eval_iters=1", "--sample_tokens=0"],
                 {"--hf_model": "in_folder", "--dataset": "in_folder"}),
    "sweep": ("research.sweep", ["{ablation}", "--dry_run", "--results={folder}", "--out_root={new}"],
              {"#0": "in_file", "--results": "out_folder", "--out_root": "out_folder", "--parallel": "int",
               "--threads": "int"}),
    "slurm": ("research.sweep", ["{ablation}", "--slurm", "--dry_run", "--gpus_per_node=0", "--results={folder}",
                                 "--out_root={new}"],
              {"--nodes": "int", "--gpus_per_node": "int", "--cpus_per_task": "int", "--time_min": "int",
               "--signal_delay_s": "int"}),
    "ladder": ("research.ladder", ["{small_ladder}"],
               {"#0": "in_file", "--gpu_memory_gb": "float", "--peak_tflops": "float", "--mfu": "float",
                "--gpu_check": "in_file", "--out": "out_file"}),
    "plot": ("research.plot", ["{ablation}", "--results={folder}", "--out={new}"],
             {"#0": "in_file", "--results": "in_folder", "--out": "out_folder", "--readme": "out_file"}),
    "adopt": ("research.adopt", ["{file}", "--results={folder}"], {"#0": "in_file", "--results": "in_folder"}),
    "plot_run": ("research.plot", ["--run={run}", "--out={new}"], {"--run": "in_folder", "--out": "out_folder"}),
    "bench": ("tools.bench", ["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=16", "--batch_size=2",
                              "--vocab_size=40", "--variants=baseline", "--steps=1", "--warmup=1", "--memory=False"],
              {"--steps": "int", "--warmup": "int"}),
    "step_profile": ("tools.step_profile", ["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=16",
                                            "--batch_size=2", "--vocab_size=40", "--variants=baseline", "--steps=1",
                                            "--warmup=1", "--profile_steps=1", "--device=cpu"],
                     {"--steps": "int", "--warmup": "int", "--profile_steps": "int", "--json": "out_file"}),
    "gpu_check": ("tools.gpu_check", ["--out={new}", "--device=cpu", "--budget_s=-1"],
                  {"--out": "out_folder", "--work": "out_folder"}),
    "toy": ("tools.toy_preconditioner", ["--steps=20", "--out={new}/toy.png"],
            {"--steps": "int", "--lr": "float", "--seed": "int", "--out": "out_file"}),
    "gguf_to_hf": ("tools.gguf_to_hf", ["--gguf={file}", "--out={new}"], {"--gguf": "in_file", "--out": "out_folder"}),
    "corpus": ("data.corpus.prepare", ["{text}", "--out={new}", "--workers=1"],
               {"#0": "in_file", "--out": "out_folder", "--val_share": "float", "--val_docs": "int", "--seed": "int",
                "--workers": "int", "--tokenizer": "in_folder"}),
    "fineweb": ("data.fineweb.prepare", ["--out={new}", "--train_tokens=-1"],
                {"--train_tokens": "float", "--val_tokens": "float", "--workers": "int", "--out": "out_folder"}),
}


def cases():
    for command, (_, base, flags) in COMMANDS.items():
        for flag, kind in flags.items():
            for value in KINDS[kind]:
                yield pytest.param(command, flag, value, id=f"{command}{flag}={value or 'empty'}")


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    """A finished tiny run (character data with line breaks), its export, a Hugging Face folder with data
    in its vocabulary, an ablation file, the ladder file, a text file and a folder."""
    import pickle

    import numpy as np
    from test_sweep import write_ablation
    from test_train import run

    tmp = tmp_path_factory.mktemp("fuzz")
    itos = sorted(set("abcdefghij \n"))
    ds = tmp / "ds"
    ds.mkdir()
    rng = np.random.default_rng(0)
    ids = rng.integers(0, len(itos), 6000).astype(np.uint16)
    for split in ("train", "val"):
        ids.tofile(ds / f"{split}.bin")
    with open(ds / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(itos), "itos": itos, "stoi": {c: i for i, c in enumerate(itos)}}, f)
    run([f"--dataset={ds}", f"--out_dir={tmp / 'run'}", "--n_layer=1", "--n_head=2", "--n_embd=32",
         "--block_size=16", "--batch_size=2", "--max_iters=2", "--eval_iters=1", "--sample_tokens=0"])
    p = {"run": str(tmp / "run"), "ablation": write_ablation(tmp / "abl"), "folder": str(tmp / "folder"),
         "file": str(tmp / "file.txt"), "missing": str(tmp / "missing"), "text": str(tmp / "doc.txt"),
         "small_ladder": small_ladder(tmp), "export": str(tmp / "export"),
         "hf": str(tmp / "hf"), "hf_data": str(tmp / "hf_data")}
    os.makedirs(p["folder"])
    (tmp / "file.txt").write_text("not what the flag wants\n")
    (tmp / "doc.txt").write_text("a document of a few words.\n" * 20)
    if importlib.util.find_spec("transformers"):
        from test_hf_model import SHAPE, hf_folder
        from test_train import make_dataset
        from tools import export
        export.main([f"--out_dir={p['run']}", f"--export_dir={p['export']}"])
        hf_folder(tmp / "hf")
        make_dataset(tmp / "hf_data", vocab=SHAPE["vocab_size"])
        with open(tmp / "hf_data" / "meta.pkl", "wb") as f:
            pickle.dump({"vocab_size": SHAPE["vocab_size"]}, f)
    return p


def small_ladder(tmp):
    """A ladder file of three tiny rungs: the ladder command's every path, without building 0.12B-2.8B
    models on the meta device for each case."""
    from test_sweep import write_ablation
    body = ("variants = {'baseline': {}, 'unified': {'reparam': 'or'}}\n"
            "settings = {f'r{w}': {'n_embd': w, 'n_head': 2, 'optimizer': 'adamw'} for w in (32, 64, 128)}\n"
            "ladders = {'dense': ['r32', 'r64', 'r128']}\nseeds = [1]\n")
    return write_ablation(tmp / "ladder", body, name="small_ladder")


@contextmanager
def time_cap(seconds):
    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s: a huge value must be refused before the work")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def fill(text, paths, new):
    return text.format(**paths, new=new)


@pytest.mark.parametrize("command, flag, value", list(cases()))
def test_every_command_meets_bad_values_with_one_line(command, flag, value, paths, tmp_path, capsys, monkeypatch):
    module, base, _ = COMMANDS[command]
    if any(key in "".join(base) + value for key in ("{export}", "{hf}")) and not os.path.exists(paths["hf"]):
        pytest.skip("needs transformers: pip install -e '.[export]'")
    monkeypatch.chdir(tmp_path)  # whatever a command writes by default lands here
    new = str(tmp_path / "new")
    argv = [fill(a, paths, new) for a in base]
    value = fill(value, paths, new)
    if flag.startswith("#"):
        argv[int(flag[1:])] = value
    else:
        argv = [a for a in argv if not a.startswith(flag + "=")] + [f"{flag}={value}"]
    main = importlib.import_module(module).main
    try:
        with time_cap(CAP_S):
            main(argv)
    except UserError as e:
        assert "\n" not in str(e).strip(), str(e)
    except SystemExit as e:  # argparse's own error (usage and one error line, exit 2), or a message
        if isinstance(e.code, str):
            assert "\n" not in e.code.strip(), e.code
        else:
            assert e.code in (0, 1, 2, None), e.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err[-2000:]


def test_the_table_names_every_command_a_user_runs():
    """A command added to tools/, research/ or data/ without a row here is a failure: its flags get the fuzz."""
    commands = {m for m, _, _ in COMMANDS.values()} | {"train", "research.stats", "research.ablation",
                                                        "tools.modeling_scalevec", "data.shakespeare.prepare",
                                                        "data.shakespeare_char.prepare"}
    found = set()
    for folder in ("tools", "research"):
        for name in os.listdir(os.path.join(ROOT, folder)):
            if name.endswith(".py") and name != "__init__.py":
                found.add(f"{folder}.{name[:-3]}")
    for name in os.listdir(os.path.join(ROOT, "data")):
        if os.path.isfile(os.path.join(ROOT, "data", name, "prepare.py")):
            found.add(f"data.{name}.prepare")
    # modules the commands use, not run themselves
    libraries = {"research.slurm", "research.records", "research.regime", "research.comparisons", "research.tables",
                 "research.trends", "research.multipliers", "research.summary", "research.figures",
                 "research.mechanism_figures", "research.mechanism_question", "research.run_figures",
                 "research.headlines", "research.power", "research.miniature", "tools.gpu_report", "tools.variants"}
    missing = found - commands - libraries
    assert not missing, f"commands without a fuzz row: {sorted(missing)}"
