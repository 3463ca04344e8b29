"""configurator.py: the one table of defaults, and the layout rule that commands never import train.py."""

import ast
import os
from dataclasses import MISSING, fields

from conftest import ROOT
from configurator import DEFAULTS, MODEL_KEYS, SECTIONS
from model import model_config
from model import GPTConfig


def test_the_model_config_takes_every_default_from_the_one_table():
    assert MODEL_KEYS == {f.name for f in fields(GPTConfig)}
    for f in fields(GPTConfig):
        assert f.default is not MISSING and f.default == DEFAULTS[f.name], f.name
    # d_ff, expert_d_ff and vocab_size of 0 mean "derived": the built config resolves them, nothing else moves
    built, derived = model_config(DEFAULTS), {"d_ff", "expert_d_ff", "vocab_size"}
    assert {k: getattr(built, k) for k in MODEL_KEYS - derived} == {k: DEFAULTS[k] for k in MODEL_KEYS - derived}


def test_every_key_has_a_meaning_and_sits_in_one_section():
    keys = [k for section in SECTIONS.values() for k in section]
    assert len(keys) == len(set(keys)) == len(DEFAULTS)
    assert all(isinstance(m, str) and m.strip() for section in SECTIONS.values() for _, m in section.values())


def imported_modules(path):
    """The top-level module names a Python file imports (at any depth of its code)."""
    tree = ast.parse(open(path).read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_commands_import_the_small_modules_never_train_py_or_each_other():
    commands = {"train", "sample", "bench", "sweep", "plot", "export", "gpu_check", "toy_preconditioner"}
    for name in sorted(commands):
        used = imported_modules(os.path.join(ROOT, f"{name}.py")) & commands - {name}
        assert not used, f"{name}.py imports the command(s) {sorted(used)}: move what it needs to a small module"


def test_the_config_module_loads_without_torch():
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", "import sys, configurator; print('torch' in sys.modules)"],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.stdout.strip() == "False", r.stderr
