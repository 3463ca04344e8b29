"""tools/lm_eval_tasks.py: lm-evaluation-harness on an export, offline, with the run's own held-out text."""

import importlib.util
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from plumbing.checkpoint import load_model
from conftest import ROOT
from test_export import needs_transformers
from test_hf_model import WORDS, tokenizer_json
from test_train import run

LINKED_LINES = 24  # lines per document of the chained corpus


def chained_doc(rng):
    """Lines of two words, each line starting with the word the line before ended with, so the true
    next line is the one whose first word is the last word seen: learnable in a few hundred steps."""
    words = [str(w) for w in rng.choice(sorted(set(WORDS)), LINKED_LINES + 1)]
    return "\n".join(f"{a} {b}" for a, b in zip(words, words[1:])) + "\n"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A width-64 model trained 300 iterations on the chained corpus in its own BPE, exported, and
    the two tasks written beside it."""
    needs_transformers()
    if importlib.util.find_spec("lm_eval") is None:
        pytest.skip("needs lm-eval: pip install -e '.[eval]'")
    from test_corpus import corpus
    tmp = tmp_path_factory.mktemp("lm_eval")
    tokenizer_json(tmp / "tok")
    rng = np.random.default_rng(0)
    (tmp / "docs").mkdir()
    for i in range(120):
        (tmp / "docs" / f"{i:03d}.txt").write_text(chained_doc(rng))
    corpus.main([str(tmp / "docs"), f"--out={tmp / 'ds'}", f"--tokenizer={tmp / 'tok'}", "--val_docs=20",
                 "--workers=1"])
    out = tmp / "o"
    run([f"--dataset={tmp / 'ds'}", f"--out_dir={out}", "--n_layer=2", "--n_head=2", "--n_embd=64",
         "--block_size=64", "--batch_size=16", "--max_iters=300", "--eval_interval=300", "--eval_iters=4",
         "--sample_tokens=0", "--log_interval=100", "--learning_rate=1e-2", "--warmup_iters=20"])
    subprocess.run([sys.executable, "-m", "tools.export", f"--out_dir={out}"], cwd=ROOT, check=True,
                   capture_output=True)
    done = subprocess.run([sys.executable, "-m", "tools.lm_eval_tasks", f"--out_dir={out}", "--items=100"],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    command = done.stdout.strip().splitlines()[-1].removeprefix("then: ")
    return out, command


def rolling_nll(model, ids, prefix, length):
    """Our model's negative log-likelihood (nats) of ids, in lm-eval's rolling windows: the first
    `length` tokens after the prefix token, then each next `length` tokens after the `length` before."""
    total, windows, done = 0.0, 0, 0
    while done < len(ids):
        end = min(done + length, len(ids))
        context = ([prefix] + ids)[max(0, end - length): end] if done == 0 else ids[end - length - 1: end - 1]
        x = torch.tensor([context])
        with torch.no_grad():
            logp = model(x, x)[0][0].log_softmax(-1)
        targets = ids[done:end]
        total -= logp[-len(targets):].gather(1, torch.tensor(targets)[:, None]).sum().item()
        windows, done = windows + 1, end
    return total, windows


@pytest.mark.slow  # trains 300 iterations and runs lm-eval (about 40 s on 2 cores)
def test_lm_eval_bits_per_byte_equal_ours_and_next_line_beats_chance(trained, tmp_path):
    """lm-eval's bits per byte on the held-out documents equals our model's own negative
    log-likelihood over the same windows, converted to bits per byte (relative 1e-4: float32, two
    implementations); the next-line task scores well above chance (0.25) on the chained corpus."""
    out, command = trained
    args = command.split()[1:] + ["--output_path", str(tmp_path / "res")]
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "lm_eval", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "res") for f in fs if f.endswith(".json")]
    results = json.load(open(found[0]))["results"]
    theirs = results["scalevec_val"]["bits_per_byte,none"]
    acc = results["scalevec_next_line"]["acc,none"]

    model, ckpt = load_model(str(out / "ckpt.pt"))
    from plumbing.dataset import make_codec
    encode, _ = make_codec(ckpt["meta"], model.config.vocab_size)
    prefix = int(command.split("prefix_token_id=")[1].split()[0])
    nll = n_bytes = 0
    with open(out / "lm_eval" / "scalevec_val.jsonl") as f:
        for line in f:
            text = json.loads(line)["text"]
            doc_nll, _ = rolling_nll(model, encode(text), prefix, model.config.block_size)
            nll, n_bytes = nll + doc_nll, n_bytes + len(text.encode("utf-8"))
    ours = nll / n_bytes / math.log(2)
    assert theirs == pytest.approx(ours, rel=1e-4)
    assert acc > 0.6, acc  # 100 items: chance would be 0.25 +- 0.04


def test_the_tasks_need_a_checkpoint_and_a_writable_folder(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tools.lm_eval_tasks", f"--out_dir={tmp_path}"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.startswith("error: no checkpoint at") and \
        done.stderr.count("\n") == 1


def char_run(tmp_path, block_size=32, *extra):
    """A 2-iteration run on character data of short lines, one in five empty (as a play's blank lines:
    a context of only newlines is what lm-eval cannot score); returns its out_dir."""
    from test_train import make_dataset
    itos = sorted(set("abcdefghij \n"))
    ds = make_dataset(tmp_path / "ds", vocab=len(itos))
    import pickle
    with open(os.path.join(ds, "meta.pkl"), "wb") as f:
        pickle.dump({"vocab_size": len(itos), "itos": itos, "stoi": {c: i for i, c in enumerate(itos)}}, f)
    rng = np.random.default_rng(0)
    lines = ["".join(rng.choice(list("abcdefghij "), rng.integers(3, 20))) if rng.random() > 0.2 else ""
             for _ in range(3000)]
    ids = [itos.index(c) for c in "\n".join(lines)]
    for split in ("train", "val"):
        np.array(ids, dtype=np.uint16).tofile(os.path.join(ds, f"{split}.bin"))
    out = tmp_path / f"o{block_size}"
    run([f"--dataset={ds}", f"--out_dir={out}", "--n_layer=1", "--n_head=2", "--n_embd=32",
         f"--block_size={block_size}", "--batch_size=4", "--max_iters=2", "--eval_iters=1", "--sample_tokens=0", *extra])
    return out


def test_tasks_fit_the_model_and_say_when_the_export_is_missing_or_old(tmp_path, capsys):
    """Every next-line item (context and its longest choice) fits the run's block_size, and no
    context is only whitespace (lm-eval would move it into the continuation and stop on an empty
    context); no export yet, or one older than the checkpoint, is said with the command that fixes it."""
    from tools import lm_eval_tasks
    out = char_run(tmp_path)
    capsys.readouterr()
    lm_eval_tasks.write_tasks(str(out), str(out / "lm_eval"), n_items=50, context_lines=4)
    assert f"note: no export in {out / 'hf'} yet: python -m tools.export" in capsys.readouterr().out
    with open(out / "lm_eval" / "scalevec_next_line.jsonl") as f:
        items = [json.loads(line) for line in f]
    assert len(items) >= 20 and all(len(i["context"] + max(i["choices"], key=len)) < 32 for i in items)
    assert all(i["context"].strip() for i in items)


@pytest.mark.slow
def test_a_block_too_short_for_any_item_writes_no_next_line_task_and_bad_flags_are_one_line(tmp_path, capsys):
    """At block_size 4 no line and choice fit: the next-line task is not written, the note says why,
    and the command names scalevec_val alone; a seed numpy refuses, and an export whose weights were
    cut short, are one line."""
    from configurator import UserError
    from tools import lm_eval_tasks
    out = char_run(tmp_path, block_size=4)
    capsys.readouterr()
    exported(out)
    command = lm_eval_tasks.write_tasks(str(out), str(out / "lm_eval"))
    assert "no next-line item fits block_size=4" in capsys.readouterr().out
    assert "--tasks scalevec_val " in command and "next_line" not in command
    assert sorted(os.listdir(out / "lm_eval")) == [lm_eval_tasks.MARKER, "scalevec_val.jsonl", "scalevec_val.yaml"]
    with pytest.raises(UserError, match=r"--seed=-1: numpy's generators take a seed in \[0, 2\*\*32 - 1\]"):
        lm_eval_tasks.main([f"--out_dir={out}", "--seed=-1"])
    (out / "hf" / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")  # a cut header
    with pytest.raises(UserError, match=r"hf/model.safetensors is damaged .*export the run anew"):
        lm_eval_tasks.main([f"--out_dir={out}"])


@pytest.mark.slow  # two exports and two lm-eval runs (about a minute on 2 cores)
@pytest.mark.parametrize("block_size", [16, 64])
def test_the_printed_command_scores_every_task_it_names(tmp_path, block_size):
    """The command lm_eval_tasks prints, run as printed on a character-level run with blank lines in
    its text: lm-eval gives a number for each task it names, at a short and a longer context."""
    needs_transformers()
    if importlib.util.find_spec("lm_eval") is None:
        pytest.skip("needs lm-eval: pip install -e '.[eval]'")
    out = char_run(tmp_path, block_size)
    subprocess.run([sys.executable, "-m", "tools.export", f"--out_dir={out}"], cwd=ROOT, check=True,
                   capture_output=True)
    done = subprocess.run([sys.executable, "-m", "tools.lm_eval_tasks", f"--out_dir={out}", "--items=40",
                           "--max_docs=5"], cwd=ROOT, capture_output=True, text=True, check=True)
    command = done.stdout.strip().splitlines()[-1].removeprefix("then: ")
    tasks = command.split("--tasks ")[1].split()[0].split(",")
    assert tasks == ["scalevec_val", "scalevec_next_line"]
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    ran = subprocess.run([sys.executable, "-m", "lm_eval", *command.split()[1:], "--output_path",
                          str(tmp_path / "res")], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    found = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "res") for f in fs if f.endswith(".json")]
    results = json.load(open(found[0]))["results"]
    assert math.isfinite(results["scalevec_val"]["bits_per_byte,none"])
    assert 0 <= results["scalevec_next_line"]["acc,none"] <= 1


@pytest.mark.slow  # four kills at random moments (about 10 s)
def test_a_kill_while_the_tasks_are_written_leaves_each_file_whole(tmp_path):
    """SIGKILL at random points of lm_eval_tasks writing over an earlier call's tasks: every file left
    is either the earlier one or the new one, whole (each is written to .tmp and renamed), and the
    next call writes them all."""
    import random
    import signal
    import time
    out = char_run(tmp_path)
    cmd = [sys.executable, "-m", "tools.lm_eval_tasks", f"--out_dir={out}", "--items=200", "--max_docs=100"]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    tasks = out / "lm_eval"
    before = {f: (tasks / f).read_bytes() for f in os.listdir(tasks)}
    rng = random.Random(0)
    for _ in range(4):
        proc = subprocess.Popen(cmd + ["--seed=1"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.5, 3.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for name in os.listdir(tasks):
            if name.endswith(".tmp"):
                continue  # an unfinished write: never read (the yaml names the .jsonl)
            data = (tasks / name).read_bytes()
            if name.endswith(".jsonl"):
                assert all(json.loads(line) for line in data.decode().splitlines())  # whole lines only
            assert data == before.get(name) or data.endswith(b"\n"), name
    subprocess.run(cmd + ["--seed=1"], cwd=ROOT, check=True, capture_output=True)
    assert not [f for f in os.listdir(tasks) if f.endswith(".tmp")]


# -----------------------------------------------------------------------------
# The printed command runs no folder's code but this project's own, and the tasks are written only in a
# folder of their own


OWN_MAP = {"AutoConfig": "modeling_scalevec.ScalevecConfig", "AutoModelForCausalLM": "modeling_scalevec.ScalevecForCausalLM"}
EVIL_MAP = {"AutoConfig": "evil.Evil", "AutoModelForCausalLM": "evil.Evil"}


@pytest.fixture(scope="module")
def char_out(tmp_path_factory):
    """A 2-iteration character run, shared, exported to hf/: each test writes its tasks and exports elsewhere."""
    out = char_run(tmp_path_factory.mktemp("char"))
    exported(out)
    return out


def fake_export(folder, config, module=True, **files):
    """An export's code-bearing files only (no weights: the command's checks read none without them):
    config.json, this project's modeling file (module=True), and files {relative path: text}."""
    from tools import lm_eval_tasks
    os.makedirs(folder)
    (folder / "config.json").write_text(json.dumps(config))
    if module:
        with open(lm_eval_tasks.MODULE, "rb") as f:
            (folder / "modeling_scalevec.py").write_bytes(f.read())
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def exported(out, export_dir=None):
    needs_transformers()
    export_dir = export_dir or out / "hf"
    subprocess.run([sys.executable, "-m", "tools.export", f"--out_dir={out}", f"--export_dir={export_dir}"],
                   cwd=ROOT, check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return export_dir


@pytest.fixture(scope="module")
def base_out(tmp_path_factory):
    """A 2-iteration run of the baseline (a Llama export) on the same character data, exported to hf/."""
    from model import BASELINE
    out = char_run(tmp_path_factory.mktemp("base"), 32, *(f"--{k}={v}" for k, v in BASELINE.items()))
    exported(out)
    return out


@pytest.mark.slow
def test_the_command_trusts_the_projects_own_module_and_nothing_more(char_out, base_out, tmp_path):
    from tools import lm_eval_tasks
    ours = exported(char_out, tmp_path / "ours")
    command = lm_eval_tasks.write_tasks(str(char_out), str(tmp_path / "t1"), export_dir=str(ours))
    assert ",trust_remote_code=True," in command
    plain = base_out / "hf"
    assert json.loads((plain / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    command = lm_eval_tasks.write_tasks(str(base_out), str(tmp_path / "t2"), export_dir=str(plain))
    assert "trust_remote_code" not in command and f"pretrained={plain}," in command


def copied_run(out, tmp_path):
    import shutil
    shutil.copytree(out, tmp_path / "run", ignore=shutil.ignore_patterns("lm_eval"))
    return tmp_path / "run"


def edit_json(path, **fields):
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def rewrite_weights(path, change=lambda weights: None, metadata=None):
    from safetensors import safe_open
    from safetensors.torch import save_file
    with safe_open(str(path), framework="pt") as f:
        weights, kept = {k: f.get_tensor(k) for k in f.keys()}, f.metadata()
    change(weights)
    save_file(weights, str(path), metadata={**kept, **(metadata or {})})


@pytest.mark.parametrize("case, words", [
    ("layers", "config.json declares num_hidden_layers=3 where the checkpoint's model has 1"),
    ("llama_layers", "config.json declares num_hidden_layers=3 but the weights hold blocks 0..0"),
    ("llama_heads", "config.json declares num_attention_heads x head_dim and hidden_size of (64, 32)"),
    ("tokenizer", "tokenizer.json is not the tokenizer the checkpoint's data was encoded with (another one)"),
    ("no_tokenizer", "tokenizer.json is not the tokenizer the checkpoint's data was encoded with (missing)"),
    ("weights", "model.layers.0.mlp.down_proj.weight differs from the checkpoint's export at the same iteration (2)"),
    ("another_run", "weights are not an export of this run (their metadata holds a run config of another model or data)"),
    ("cut", "model.safetensors is damaged"),
    ("empty", "model.safetensors is damaged"),
    ("no_weights", "no model.safetensors (or its index) there"),
    ("index_outside", "model.safetensors lies outside"),
])
def test_an_export_that_is_not_the_checkpoints_prints_no_command(char_out, base_out, tmp_path, case, words):
    """What tools.hf_check refuses (config.json's sizes over other weights: transformers would build 3 blocks
    and fill 2 at random), a foreign tokenizer, weights changed in hf/ after the export, another run's
    export, a cut, empty or missing weights file: one line naming it and the fix; no command, nothing written."""
    from configurator import UserError
    from tools import lm_eval_tasks
    out = copied_run(base_out if case.startswith("llama") or case == "index_outside" else char_out, tmp_path)
    hf = out / "hf"
    if case in ("layers", "llama_layers"):
        edit_json(hf / "config.json", num_hidden_layers=3)
    elif case == "llama_heads":
        edit_json(hf / "config.json", num_attention_heads=4, head_dim=16, num_key_value_heads=4)
    elif case == "tokenizer":
        tokenizer_json(tmp_path / "tok")
        (hf / "tokenizer.json").write_bytes((tmp_path / "tok" / "tokenizer.json").read_bytes())
    elif case == "no_tokenizer":
        os.remove(hf / "tokenizer.json")
    elif case == "weights":
        rewrite_weights(hf / "model.safetensors", lambda w: w["model.layers.0.mlp.down_proj.weight"].mul_(1.5))
    elif case == "another_run":
        config = torch.load(out / "ckpt.pt", weights_only=True)["config"]
        rewrite_weights(hf / "model.safetensors", metadata={"scalevec_config": json.dumps({**config, "dataset": "x"})})
    elif case == "cut":
        data = (hf / "model.safetensors").read_bytes()
        (hf / "model.safetensors").write_bytes(data[:len(data) // 2])
    elif case == "empty":
        (hf / "model.safetensors").write_bytes(b"")
    elif case == "no_weights":
        os.remove(hf / "model.safetensors")
    elif case == "index_outside":
        os.rename(hf / "model.safetensors", tmp_path / "model.safetensors")
        (hf / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
            "model.embed_tokens.weight": "../../model.safetensors"}}))
    with pytest.raises(UserError) as e:
        lm_eval_tasks.write_tasks(str(out), str(tmp_path / "tasks"))
    assert words in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert "python -m tools.export" in str(e.value) and not (tmp_path / "tasks").exists()


def test_an_export_of_an_earlier_iteration_is_said_as_such(char_out, tmp_path, capsys):
    """The run went on after its export: the note names both iterations (not a file's age, which a copy resets)."""
    from tools import lm_eval_tasks
    out = copied_run(char_out, tmp_path)
    run(["--init_from=resume", f"--out_dir={out}", "--max_iters=4"])
    capsys.readouterr()
    command = lm_eval_tasks.write_tasks(str(out), str(tmp_path / "tasks"))
    assert f"note: {out / 'hf'} holds iteration 2 of this run and the checkpoint is at 4 (the run went on since)" \
        in capsys.readouterr().out and command.startswith("lm_eval ")


@pytest.mark.parametrize("payload, words", [
    ("planted", "config.json: auto_map={'AutoConfig': 'evil.Evil'"),
    ("edited_module", "modeling_scalevec.py differs from this project's modeling_scalevec.py"),
    ("extra_code", "custom_generate/generate.py is Python code that is not this project's"),
    ("tokenizer_map", "tokenizer_config.json: auto_map="),
    ("hub_reference", "auto_map={'AutoConfig': 'someone/repo--modeling_scalevec.ScalevecConfig'}"),
    ("nested_map", "config.json: text_config.auto_map="),
    ("unnamed_module", "modeling_scalevec.py is shipped but config.json's auto_map does not name it"),
    ("linked_folder", "is a symbolic link"),
])
def test_the_command_is_not_printed_for_an_export_with_other_code(char_out, tmp_path, payload, words):
    """The review's payload (an auto_map to a planted module) and six more ways an export could lead
    lm-eval, told trust_remote_code=True, to code that is not this project's modeling_scalevec.py:
    one line naming the file and the fix (a new export); nothing written, no command."""
    from test_security_hf import code_that_marks
    from configurator import UserError
    from tools import lm_eval_tasks
    marker, hf = tmp_path / "ran", tmp_path / "hf"
    config = {"model_type": "scalevec", "auto_map": OWN_MAP}
    if payload == "planted":
        fake_export(hf, {"model_type": "evil", "auto_map": EVIL_MAP}, module=False, **{"evil.py": code_that_marks(marker)})
    elif payload == "edited_module":
        fake_export(hf, config)
        with open(hf / "modeling_scalevec.py", "a") as f:
            f.write(f"open({str(marker)!r}, 'w')\n")
    elif payload == "extra_code":
        fake_export(hf, config, **{"custom_generate/generate.py": code_that_marks(marker)})
    elif payload == "tokenizer_map":
        fake_export(hf, config, **{"tokenizer_config.json": json.dumps({"auto_map": {"AutoTokenizer": ["evil.Evil", None]}})})
    elif payload == "hub_reference":
        fake_export(hf, {**config, "auto_map": {"AutoConfig": "someone/repo--modeling_scalevec.ScalevecConfig"}})
    elif payload == "nested_map":
        fake_export(hf, {**config, "text_config": {"auto_map": EVIL_MAP}})
    elif payload == "unnamed_module":
        fake_export(hf, {"model_type": "llama"})
    elif payload == "linked_folder":
        os.symlink(fake_export(tmp_path / "elsewhere", config), hf)
    with pytest.raises(UserError) as e:
        lm_eval_tasks.write_tasks(str(char_out), str(tmp_path / "tasks"), export_dir=str(hf))
    assert words in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert "no lm_eval command is printed" in str(e.value) and "python -m tools.export" in str(e.value)
    assert not (tmp_path / "tasks").exists() and not marker.exists()


def test_the_reviews_planted_export_prints_no_command(char_out, tmp_path):
    """As the review ran it: `python -m tools.lm_eval_tasks --out_dir=D` with a planted auto_map and
    module in D/hf (here a copy of the run): exit 1, one line, no lm_eval command, nothing ran."""
    from test_security_hf import code_that_marks
    import shutil
    out = tmp_path / "run"
    shutil.copytree(char_out, out, ignore=shutil.ignore_patterns("lm_eval", "hf"))
    fake_export(out / "hf", {"model_type": "evil", "auto_map": EVIL_MAP}, module=False,
                **{"evil.py": code_that_marks(tmp_path / "ran")})
    done = subprocess.run([sys.executable, "-m", "tools.lm_eval_tasks", f"--out_dir={out}"], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"error: {out / 'hf' / 'config.json'}: auto_map=") and done.stderr.count("\n") == 1
    assert "trust_remote_code=True" not in done.stdout and "then:" not in done.stdout
    assert not (out / "lm_eval").exists() and not (tmp_path / "ran").exists()


def snapshot(root):
    """{relative path: bytes (None for a folder)} of everything under root."""
    return {os.path.relpath(os.path.join(d, n), root): (None if n in dirs else open(os.path.join(d, n), "rb").read())
            for d, dirs, files in os.walk(root) for n in dirs + files}


def test_the_tasks_are_written_only_in_a_folder_of_their_own(char_out, tmp_path):
    """The review's payload (out_dir/lm_eval a link to a folder holding scalevec_next_line.* files, which
    a call deleted), then an unmarked folder of someone's files, a hard-linked task file, a linked
    .tmp and a linked marker: each one line naming it, and nothing outside written or deleted."""
    from configurator import UserError
    from tools import lm_eval_tasks
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("scalevec_next_line.jsonl", "scalevec_next_line.yaml", "notes.txt"):
        (outside / name).write_text("someone's\n")
    (outside / "linked.txt").write_text("someone's\n")
    before = snapshot(outside)

    def refused(tasks, *words):
        with pytest.raises(UserError) as e:
            lm_eval_tasks.write_tasks(str(char_out), str(tasks), export_dir=str(tmp_path / "no-export"))
        assert all(w in str(e.value) for w in words) and "\n" not in str(e.value), str(e.value)
        assert snapshot(outside) == before

    os.symlink(outside, tmp_path / "link")
    done = subprocess.run([sys.executable, "-m", "tools.lm_eval_tasks", f"--out_dir={char_out}",
                           f"--tasks_dir={tmp_path / 'link'}"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})  # as the review ran it
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "a symbolic link (to" in done.stderr, done.stderr
    assert snapshot(outside) == before
    refused(tmp_path / "link", "--tasks_dir=", "a symbolic link (to")
    refused(outside, "holds 'linked.txt' and 3 more, which this command did not write (no .lm_eval_tasks marker)")
    mine = tmp_path / "mine"
    assert lm_eval_tasks.write_tasks(str(char_out), str(mine), export_dir=str(tmp_path / "no-export")) is None
    assert (mine / lm_eval_tasks.MARKER).is_file()  # made here: its own files are replaced on the next call
    os.remove(mine / "scalevec_val.jsonl")
    os.link(outside / "linked.txt", mine / "scalevec_val.jsonl")
    refused(mine, "scalevec_val.jsonl has 2 hard links")
    os.remove(mine / "scalevec_val.jsonl")
    os.symlink(outside / "notes.txt", mine / "scalevec_val.yaml.tmp")
    refused(mine, "scalevec_val.yaml.tmp is a symbolic link")
    os.remove(mine / "scalevec_val.yaml.tmp")
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "data.txt").write_text("someone's\n")
    os.symlink(mine / lm_eval_tasks.MARKER, planted / lm_eval_tasks.MARKER)
    refused(planted, "no .lm_eval_tasks marker")
    assert (planted / "data.txt").read_text() == "someone's\n"
    assert lm_eval_tasks.write_tasks(str(char_out), str(mine), export_dir=str(tmp_path / "no-export")) is None


def test_an_exports_weights_that_are_a_fifo_are_one_line_not_a_hang(char_out, tmp_path):
    """safe_open would wait forever on a FIFO where model.safetensors is expected."""
    from configurator import UserError
    from tools import lm_eval_tasks
    plain = fake_export(tmp_path / "plain", {"model_type": "llama"}, module=False)
    os.mkfifo(plain / "model.safetensors")
    with pytest.raises(UserError, match=r"model.safetensors is not a regular file: export the run anew"):
        lm_eval_tasks.write_tasks(str(char_out), str(tmp_path / "tasks"), export_dir=str(plain))
    assert not (tmp_path / "tasks").exists()
