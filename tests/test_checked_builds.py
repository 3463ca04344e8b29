"""A checkpoint's config is compared with its weights' shapes and this machine's memory before any command
builds the model it describes (sample.py, tools.export, tools.lm_eval_tasks), as train.py's resume checks
its config before building."""

import subprocess
import sys

import pytest
import torch

from conftest import ROOT
from configurator import UserError
from plumbing import checkpoint, memory
from test_train import make_dataset, run, tiny_args


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("builds")
    ds = make_dataset(tmp / "ds")
    run(tiny_args(ds, tmp / "o", "--max_iters=2"))
    return tmp / "o" / "ckpt.pt"


def edited(saved, tmp_path, **config):
    ckpt = torch.load(saved, weights_only=True)
    ckpt["config"].update(config)
    (tmp_path / "e").mkdir()
    torch.save(ckpt, tmp_path / "e" / "ckpt.pt")
    return tmp_path / "e"


COMMANDS = {"sample": ["sample.py", "--start=ab", "--max_new_tokens=2", "--device=cpu"],
            "export": ["-m", "tools.export", "--no_check"],
            "lm_eval_tasks": ["-m", "tools.lm_eval_tasks"]}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("config, words", [
    ({"n_embd": 4_000_000}, "config says n_embd=4,000,000 but its token embedding wte.weight is (64, 32)"),
    ({"n_layer": 10**6}, "config says n_layer=1,000,000 but its weights hold blocks 0..0"),
    ({"n_head": 4, "n_embd": 32, "d_ff": 64}, "blocks.0.mlp.gate.weight is (128, 32), the config makes (64, 32)"),
    ({"n_head": -1}, "config: n_head=-1"),
], ids=["width", "layers", "d_ff", "range"])
def test_a_config_past_its_weights_is_one_line_before_anything_is_built(saved, tmp_path, command, config, words):
    """n_embd 4,000,000 was an allocator traceback and n_layer 10**6 built blocks until the process was killed."""
    out = edited(saved, tmp_path, **config)
    done = subprocess.run([sys.executable, *COMMANDS[command], f"--out_dir={out}"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and words in done.stderr, done.stderr[-1500:]
    assert not (out / "hf").exists() and not (out / "lm_eval").exists()


def test_a_model_past_the_machines_memory_is_refused_before_it_is_built(saved, monkeypatch):
    """The comparison train.py's start makes (memory.memory_limit), at 4 bytes a float32 parameter."""
    ckpt = checkpoint.load_checkpoint(str(saved))
    memory.check_buildable(ckpt["config"], checkpoint.saved_shapes(ckpt), "ckpt.pt")  # fits
    monkeypatch.setattr(memory, "memory_limit", lambda device: (1000, "a test's 1 kB"))
    with pytest.raises(UserError, match=r"ckpt.pt's model has about .* more than the 1e-06 GB of a test's 1 kB"):
        memory.check_buildable(ckpt["config"], checkpoint.saved_shapes(ckpt), "ckpt.pt")
