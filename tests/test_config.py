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
    # d_ff, expert_d_ff, n_kv_head, head_dim and vocab_size of 0 mean "derived": the built config
    # resolves them, nothing else moves
    built, derived = model_config(DEFAULTS), {"d_ff", "expert_d_ff", "n_kv_head", "head_dim", "vocab_size"}
    assert {k: getattr(built, k) for k in MODEL_KEYS - derived} == {k: DEFAULTS[k] for k in MODEL_KEYS - derived}


def test_every_key_has_a_meaning_and_sits_in_one_section():
    keys = [k for section in SECTIONS.values() for k in section]
    assert len(keys) == len(set(keys)) == len(DEFAULTS)
    assert all(isinstance(m, str) and m.strip() for section in SECTIONS.values() for _, _, m, *_ in section.values())


def imported_modules(path):
    """The module names a Python file imports (at any depth of its code), dotted as written:
    `from research import sweep` gives "research" and "research.sweep"."""
    tree = ast.parse(open(path).read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return names


def project_modules():
    """{module name: path} of every module of the project (the top level, research/, tools/)."""
    found = {}
    for folder in ("", "research", "tools"):
        for name in os.listdir(os.path.join(ROOT, folder)):
            if name.endswith(".py") and name != "__init__.py":
                found[".".join(filter(None, (folder, name[:-3])))] = os.path.join(ROOT, folder, name)
    return found


COMMANDS = {"train", "sample", "tools.bench", "research.sweep", "research.plot", "tools.export", "tools.gpu_check",
            "tools.toy_preconditioner"}


def test_commands_import_the_small_modules_never_train_py_or_each_other():
    modules = project_modules()
    assert COMMANDS <= modules.keys()
    for name in sorted(COMMANDS):
        used = imported_modules(modules[name]) & COMMANDS - {name}
        assert not used, f"{name} imports the command(s) {sorted(used)}: move what it needs to a small module"


def test_no_top_level_module_imports_a_folder_and_train_py_stays_readable():
    """The reading path and its small modules import nothing from tools/ or research/ (the folders hold
    commands and the workflow, which import the top level, never the reverse); train.py stays about
    nanoGPT's size, and no function of the product runs past ~80 lines."""
    import ast
    modules = project_modules()
    for name, path in modules.items():
        if "." not in name:
            upward = {m for m in imported_modules(path) & modules.keys() if "." in m}
            assert not upward, f"{name}.py imports {sorted(upward)}: move what it needs to the top level"
    assert sum(1 for _ in open(modules["train"])) <= 330
    long = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80:
                long.append(f"{name}.{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not long, f"functions over ~80 lines: {long}"


def test_the_config_module_is_a_leaf_and_the_imports_have_no_cycle():
    modules = project_modules()
    graph = {name: imported_modules(path) & modules.keys() - {name} for name, path in modules.items()}
    assert graph["configurator"] == set()
    state = {}

    def visit(name, path):
        state[name] = "open"
        for dep in graph[name]:
            assert state.get(dep) != "open", f"import cycle: {' -> '.join(path + [dep])}"
            if dep not in state:
                visit(dep, path + [dep])
        state[name] = "done"

    for name in graph:
        if name not in state:
            visit(name, [name])


def test_the_config_module_loads_without_torch():
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", "import sys, configurator; print('torch' in sys.modules)"],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.stdout.strip() == "False", r.stderr
