"""The config: configurator.py's one table of keys (defaults, allowed values, usual ranges, meanings),
every key met with bad values, the notes on keys that do nothing under the rest of the config
(ops.inert_keys), the memory refusal, config files, and the layout rules around the config module
(a leaf; commands never import train.py or each other)."""

import ast
import glob
import math
import os
import re
from dataclasses import MISSING, fields
from types import SimpleNamespace

import pytest
import torch

import configurator
from plumbing import memory
import optim
from plumbing.common import DEVICE_FORMS
from configurator import ALLOWED, DEFAULTS, SECTIONS, UserError, load_config, usage, value_problem
from conftest import ROOT
from plumbing.memory import estimate_size
from model import MODEL_KEYS, GPTConfig, model_config
from plumbing.ops import check_config, inert_keys, inert_notes
from research.ablation import load_ablation
from test_train import make_dataset, run, tiny_args


def test_the_model_config_takes_every_default_from_the_one_table():
    assert MODEL_KEYS == {f.name for f in fields(GPTConfig)} and MODEL_KEYS <= DEFAULTS.keys()  # every field has a row
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
    """{module name: path} of every module of the project (the top level, plumbing/, research/, tools/)."""
    found = {}
    for folder in ("", "plumbing", "research", "tools"):
        for name in os.listdir(os.path.join(ROOT, folder)):
            if name.endswith(".py") and name != "__init__.py":
                found[".".join(filter(None, (folder, name[:-3])))] = os.path.join(ROOT, folder, name)
    return found


COMMANDS = {"train", "sample", "tools.bench", "research.sweep", "research.plot", "tools.export", "tools.gpu_check",
            "tools.toy_preconditioner", "tools.step_profile"}


def test_commands_import_the_small_modules_never_train_py_or_each_other():
    modules = project_modules()
    assert COMMANDS <= modules.keys()
    for name in sorted(COMMANDS):
        used = imported_modules(modules[name]) & COMMANDS - {name}
        assert not used, f"{name} imports the command(s) {sorted(used)}: move what it needs to a small module"


# The first screen: the reading path (train, model, norms, optim) and nanoGPT's companions (sample, the
# config). Anything else goes in a folder: plumbing/ (what every command shares, one concept a module),
# research/, tools/.
TOP_LEVEL = {"train", "model", "norms", "optim", "sample", "configurator"}  # the reading path and nanoGPT's companions
MODULE_LINES = 600  # no module of the product longer (model.py, the model itself, dense and MoE, aside)
MODEL_LINES = 850  # a cap with room for a fork's additions (a placement, a block type), not a pin


def test_no_top_level_module_imports_a_command_folder_and_train_py_stays_readable():
    """The top level is the reading path and nanoGPT's companions, the shared modules live in plumbing/;
    neither imports anything from tools/ or research/ (the folders hold commands and the workflow,
    which import the product, never the reverse); train.py stays about nanoGPT's size, and no function
    of the product runs past ~80 lines."""
    modules = project_modules()
    top = {name for name in modules if "." not in name}
    assert top == TOP_LEVEL, (f"the top level holds {sorted(top - TOP_LEVEL)} beyond the reading path and nanoGPT's "
                              f"companions: put it in plumbing/ (what every command shares) or another folder")
    for name in top | {name for name in modules if name.startswith("plumbing.")}:
        upward = {m for m in imported_modules(modules[name]) & modules.keys() if m.split(".")[0] in ("research",
                                                                                                  "tools")}
        assert not upward, f"{name}.py imports {sorted(upward)}: move what it needs to the top level"
    assert sum(1 for _ in open(modules["train"])) <= 330
    long = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80:
                long.append(f"{name}.{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not long, f"functions over ~80 lines: {long}"
    over = {name: n for name, path in modules.items() if name.split(".")[0] not in ("tests",)
            and (n := sum(1 for _ in open(path))) > (MODEL_LINES if name == "model" else MODULE_LINES)}
    assert not over, (f"modules over {MODULE_LINES} lines (model.py: {MODEL_LINES}), each more than one concept: {over}; "
                      f"move a concept of its own (a block type, a statistic) into a module beside it")


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


def load_and_check(argv):
    cfg, _ = load_config(argv)
    check_config(cfg)
    return cfg


def config_file(tmp_path, text):
    path = tmp_path / "bad_config.py"
    path.write_text(text)
    return str(path)


# (command-line arguments, or a config file's text; what the one-line error must name)
BAD = [
    (["--seed=-1"], ["seed=-1", "[0, 4294967295]", "set --seed"]),
    (["--seed=4294967296"], ["seed=4294967296", "[0, 4294967295]", "set --seed"]),
    (["--rope_theta=1e999"], ["rope_theta=inf", "not a finite number", "set --rope_theta"]),
    (["--grad_clip=nan"], ["grad_clip=nan", "not a finite number", "set --grad_clip"]),
    (["--beta1=inf"], ["beta1=inf", "[0, 1)", "set --beta1"]),
    (["--norm_eps=-inf"], ["norm_eps=-inf", "> 0", "set --norm_eps"]),
    (["--dropout=1.0"], ["dropout=1.0", "[0, 1)", "set --dropout"]),
    (["--learning_rate=1" + "0" * 400], ["learning_rate=10000000...", "too large for a float", "set --learning_rate"]),
    ("learning_rate = float('nan')\n", ["learning_rate=nan", "> 0", "set --learning_rate"]),
    ("min_lr = float('nan')\n", ["min_lr=nan", ">= 0", "set --min_lr"]),
    ("weight_decay = float('inf')\n", ["weight_decay=inf", ">= 0", "set --weight_decay"]),
    ("aux_loss_coef = float('nan')\n", ["aux_loss_coef=nan", ">= 0", "set --aux_loss_coef"]),
    ("muon_momentum = float('nan')\n", ["muon_momentum=nan", "[0, 1)", "set --muon_momentum"]),
    (["--n_embd=1000000000"], ["n_embd=1000000000", "billion parameters", "GB", "lower --n_embd"]),
    ("import sys\nsys.exit(3)\n", ["bad_config.py, line 2", "sys.exit(3)", "remove the call"]),
    ("raise KeyboardInterrupt\n", ["bad_config.py, line 1", "KeyboardInterrupt"]),
    (["--seed=1", "--seed=2"], ["seed is given twice", "'--seed=1' and '--seed=2'", "give it once"]),
]


@pytest.mark.parametrize("source, names", BAD, ids=[" ".join(n[:1]) for _, n in BAD])
def test_a_bad_value_is_one_line_naming_the_key_the_value_and_the_fix(tmp_path, monkeypatch, source, names):
    import model

    def build(*args, **kwargs):
        raise AssertionError("a model was built before the config was checked")

    monkeypatch.setattr(model.GPT, "__init__", build)
    argv = source if isinstance(source, list) else [config_file(tmp_path, source)]
    with pytest.raises(UserError) as e:
        load_and_check(argv)
    message = str(e.value)
    assert "\n" not in message
    for name in names:
        assert name in message, (name, message)


def test_a_key_set_in_a_config_file_may_be_set_again_on_the_command_line(tmp_path):
    cfg, given = load_config([config_file(tmp_path, "seed = 5\n"), "--seed=7"])
    assert cfg["seed"] == 7 and "seed" in given


def test_every_key_declares_its_allowed_values_and_every_default_passes():
    assert list(ALLOWED) == list(DEFAULTS)  # one row a key, in SECTIONS' order
    for key, allowed in ALLOWED.items():
        if allowed is not None:
            assert allowed.allows(DEFAULTS[key]), key
    check_config(dict(DEFAULTS))


def test_a_registrys_choices_are_declared_once_checked_by_its_code_and_listed_by_help():
    import model
    import optim
    from plumbing.ops import choices

    registries = {**model.CHOICES, **optim.CHOICES}
    assert registries.keys() <= DEFAULTS.keys()
    text = usage("doc", choices())
    for key, registry in registries.items():
        assert ALLOWED[key] is None, key  # no second list here: the registry is the one
        assert all(repr(name) in text for name in registry), key
        with pytest.raises(UserError, match=f"{key}='nonesuch' is not one of"):
            check_config({**DEFAULTS, key: "nonesuch"})
    assert ", ".join(map(repr, ALLOWED["device"].values)) == DEVICE_FORMS
    assert all(ALLOWED["device"].allows(d) for d in ("auto", "cpu", "cuda", "cuda:3", "mps"))
    assert not any(ALLOWED["device"].allows(d) for d in ("CPU", "", "cuda:x", "tpu"))


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "configs", "*.py"))), ids=os.path.basename)
def test_every_committed_config_file_passes(path):
    load_and_check([path])


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "configs", "ablations", "*.py"))),
                         ids=os.path.basename)
def test_every_ablation_run_config_passes(path):
    load_ablation(path)  # checks every run's config


@pytest.mark.parametrize("overrides", [
    dict(vocab_size=65),
    dict(vocab_size=65, n_layer=3, n_embd=96, n_head=4, tie_embeddings=False, d_ff=200),
    dict(vocab_size=65, n_experts=4, top_k=2, moe_every=2, shared_expert=True, expert_d_ff=64),
])
def test_the_parameter_estimate_is_close_to_the_built_model(overrides):
    from model import GPT

    cfg = {**DEFAULTS, **overrides}
    built = sum(p.numel() for p in GPT(model_config(cfg)).parameters())
    estimate, activations = estimate_size(cfg)
    assert 0.9 * built <= estimate <= 1.1 * built and activations > 0


def test_on_cuda_the_device_memory_is_the_limit(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: SimpleNamespace(total_memory=10**9, name="a small GPU"))
    cfg = {**DEFAULTS, "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257}  # ~124M params: ~2 GB
    for device in ("auto", "cuda", "cuda:0"):
        with pytest.raises(UserError, match=r"n_embd=768, .* more than the 1 GB of CUDA device 0 \(a small GPU\)"):
            check_config({**cfg, "device": device})
    check_config({**cfg, "device": "cpu"})  # this machine's RAM holds it


def test_help_shows_the_allowed_values_without_torch():
    text = usage("doc")
    assert "--seed=1337" in text and "[in [0, 4294967295]]" in text and "[> 0]" in text
    assert configurator.allowed_note(ALLOWED["beta1"], "AdamW, in [0, 1)") == ""  # the meaning says it already


# -----------------------------------------------------------------------------
# The config fuzz: every key, several bad values, one line or a named note, never a traceback

BAD_VALUES = {int: ["abc", "1.5", "-1", "0", "99999999999999999999", ""],
              float: ["abc", "-1", "0", "1e300", "nan", "inf", "-inf", ""],
              bool: ["maybe", "2", ""], str: ["", "nonesuch", "/nonexistent/path"]}


@pytest.mark.parametrize("key", list(DEFAULTS))
def test_every_key_meets_bad_values_with_one_line_or_a_note(key):
    """Each value is refused by the start-up checks with a one-line UserError naming the key, or
    accepted (then any note about it names the key); nothing else may escape. A numeric key has a
    declared range, so a key added without one fails here."""
    from plumbing import ops

    default = DEFAULTS[key]
    if isinstance(default, (int, float)) and not isinstance(default, bool):
        assert isinstance(ALLOWED[key], configurator.Range), f"{key} declares no range"
    for text in BAD_VALUES[type(default)]:
        try:
            cfg, given = load_config([f"--{key}={text}"])
            check_config(cfg)
        except UserError as e:
            assert "\n" not in str(e) and key in str(e), (key, text, str(e))
            continue
        notes = ops.inert_notes(cfg, given) + ops.unusual_notes(cfg)
        assert all(key in n or f"--{key}" in n for n in notes if key in n), notes


@pytest.mark.parametrize("key, value", [("norm_eps", 1e6), ("norm_eps", 1.0), ("norm_eps", 1e10),
                                        ("rope_theta", 1e300), ("rope_theta", 1e-10), ("grad_clip", 1e-30),
                                        ("weight_decay", 1e9), ("learning_rate", 50.0), ("dropout", 0.9)])
def test_a_legal_but_implausible_value_gets_a_note_naming_it(key, value):
    from plumbing import ops

    cfg = {**DEFAULTS, key: value}
    check_config(cfg)  # legal
    assert [n for n in ops.unusual_notes(cfg) if n.startswith(f"note: {key}=")], (key, value)


# Keys whose every value in range is a size, a count or a seed: no value is "degenerate", so none
# declares a usual range (an HF folder's or the ladder's sizes get no notes). Every other numeric key
# (rates, betas, momenta, eps, coefficients, dropout, fractions) must declare one.
SIZES_COUNTS_SEEDS = {"eval_interval", "eval_iters", "log_interval", "sample_tokens", "batch_size",
                      "gradient_accumulation_steps", "block_size", "n_layer", "n_head", "n_kv_head", "head_dim",
                      "n_embd", "d_ff", "vocab_size", "n_experts", "top_k", "moe_every", "expert_d_ff",
                      "warmup_iters", "max_iters", "seed", "ddp_timeout_s"}


@pytest.mark.parametrize("key", [k for k, v in DEFAULTS.items() if type(v) in (int, float)])
def test_every_numeric_key_but_sizes_counts_and_seeds_declares_a_usual_range(key):
    assert (ALLOWED[key].usual is None) == (key in SIZES_COUNTS_SEEDS), \
        f"{key}: declare Range(..., usual=(low, high)) in its configurator row, or list it here as a size/count/seed"


@pytest.mark.parametrize("flags, named", [
    (["--beta2=0"], {"beta2"}), (["--beta1=0.999999", "--beta2=0"], {"beta1", "beta2"}),
    (["--optimizer=muon", "--muon_momentum=0.999999"], {"muon_momentum"}), (["--min_lr=5"], {"min_lr"}),
])
def test_degenerate_betas_and_momenta_are_noted(flags, named):
    from plumbing import ops
    cfg, _ = load_config(flags)
    assert {n.split("=")[0].removeprefix("note: ") for n in ops.unusual_notes(cfg)} == named


@pytest.mark.parametrize("flags", [["--weight_decay=1e30"], ["--magnitude_lr_mult=1e30"], ["--beta2=0"]])
def test_a_divergence_names_the_keys_outside_their_usual_range_before_the_learning_rate(tmp_path, flags):
    from plumbing import ops
    cfg, _ = load_config(flags)
    run = SimpleNamespace(cfg=SimpleNamespace(**cfg), ckpt_path=str(tmp_path / "ckpt.pt"))
    message = ops.diverged(run, "train", float("nan"), 7, first_step=False)
    key = flags[0].split("=")[0].removeprefix("--")
    assert f"first check {key}=" in message and message.index(key) < message.index("lower learning_rate")
    assert "first check" not in ops.diverged(SimpleNamespace(cfg=SimpleNamespace(**DEFAULTS), ckpt_path="x"),
                                             "train", float("nan"), 7, first_step=False)


def test_moe_coefficients_and_a_frozen_muon_are_noted_only_where_they_act():
    from plumbing import ops

    huge = {**DEFAULTS, "aux_loss_coef": 1e30, "z_loss_coef": 1e30}
    assert not ops.unusual_notes(huge)  # a dense model: the coefficients do nothing (an inert note if given)
    assert {n.split("=")[0] for n in ops.unusual_notes({**huge, "n_experts": 4})} == \
        {"note: aux_loss_coef", "note: z_loss_coef"}
    assert not ops.unusual_notes({**DEFAULTS, "muon_lr": 0.0})  # AdamW: muon_lr does nothing
    assert ops.unusual_notes({**DEFAULTS, "muon_lr": 0.0, "optimizer": "muon"})[0].startswith("note: muon_lr=0.0")


def test_the_defaults_and_every_committed_config_are_usual():
    from plumbing import ops

    assert configurator.unusual(DEFAULTS) == []
    for path in sorted(glob.glob(os.path.join(ROOT, "configs", "*.py"))):
        cfg, _ = load_config([path])
        assert ops.unusual_notes(cfg) == [], path


def test_the_memory_check_counts_activations_and_logits_and_names_a_batch_that_fits(monkeypatch):
    """A micro-batch whose activations and logits alone overflow memory is refused before anything is
    built, naming the largest batch_size the estimate fits; that batch_size then passes."""
    monkeypatch.setattr(memory, "memory_limit", lambda device: (8e9, "a machine of 8 GB"))
    cfg = {**DEFAULTS, "batch_size": 256, "block_size": 1024, "vocab_size": 50304}
    params, activations = estimate_size(cfg)
    assert 16 * params < 8e9 < 16 * params + activations  # the weights fit, the micro-batch does not
    with pytest.raises(UserError, match=r"use --batch_size=(\d+) or less") as e:
        check_config(cfg)
    fits = int(re.search(r"--batch_size=(\d+)", str(e.value))[1])
    assert fits == int((8e9 - 16 * params) / (activations / 256))
    check_config({**cfg, "batch_size": fits})


def test_a_model_past_one_device_is_told_how_many_fsdp_processes_hold_it(monkeypatch):
    """Weights, gradients and AdamW states that no micro-batch fits beside under DDP name --fsdp=True
    with the processes whose shards (16 bytes a parameter over N) fit; with that many it passes."""
    monkeypatch.setattr(memory, "memory_limit", lambda device: (4e9, "a GPU of 4 GB"))
    cfg = {**DEFAULTS, "n_layer": 24, "n_embd": 1024, "n_head": 16, "vocab_size": 50304, "batch_size": 4}
    params, activations = estimate_size(cfg)
    need = math.ceil(16 * params / (4e9 - activations / 4))
    assert 16 * params > 4e9 and need > 1  # ~0.35B parameters: ~5.6 GB of state
    with pytest.raises(UserError, match=rf"shard them with --fsdp=True under torchrun over {need} or more processes"):
        check_config(cfg)
    monkeypatch.setenv("WORLD_SIZE", str(need))
    with pytest.raises(UserError, match=r"more than the 4 GB of a GPU of 4 GB"):  # DDP: a whole copy per GPU
        check_config(cfg)
    with pytest.raises(UserError, match=r"sharded over"):  # still a micro-batch of 4 too many
        check_config({**cfg, "fsdp": True, "batch_size": 64})
    check_config({**cfg, "fsdp": True, "batch_size": 1})
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(UserError) as e:  # Muon cannot step shards: no such advice
        check_config({**cfg, "optimizer": "muon"})
    assert "fsdp" not in str(e.value)


def registry_entries():
    import model
    import optim
    return [(key, name) for key, registry in {**model.CHOICES, **optim.CHOICES}.items() for name in registry]


@pytest.mark.parametrize("key, name", registry_entries())
def test_a_mistyped_choice_of_every_registry_entry_gets_a_did_you_mean(key, name):
    """Each entry of every registry (scale, reparam, placements, dual_sites, optimizer, schedule,
    scale_wd), a fork's included, typed with one letter too many: one line naming the entry."""
    cfg, _ = load_config([f"--{key}={name}x"])
    with pytest.raises(UserError, match=rf"{key}='{name}x' is not one of .*\(did you mean '{name}'\?\)") as e:
        check_config(cfg)
    assert "\n" not in str(e.value)


def test_a_forks_scale_class_is_a_did_you_mean_target(monkeypatch):
    import norms
    from test_forks import SoftplusScale
    monkeypatch.setitem(norms.SCALE_CLASSES, "softplus", SoftplusScale)
    cfg, _ = load_config(["--reparam=sofplus"])
    with pytest.raises(UserError, match=r"reparam='sofplus' is not one of .*'softplus' \(did you mean 'softplus'\?\)"):
        check_config(cfg)


def notes(args):
    cfg, given = load_config(args)
    return inert_notes(cfg, given)


def readers(key, registry):
    """The entries of `registry` that read `key`, as a note names them ('a', 'b' or 'c'): from the registry, a fork's
    entry too, never a list here."""
    names = [repr(name) for name, entry in registry.items() if key in entry.keys]
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]


MUON = "optimizer is 'adamw' (only optimizer 'muon' reads it)"
WSD = "lr_schedule is 'cosine' (only lr_schedule 'wsd' reads it)"
CONSTANT = f"lr_schedule is 'constant' (only lr_schedule {readers('min_lr', optim.LR_SCHEDULES)} reads it)"
DENSE = "n_experts is 0 (a dense model: no expert, no router)"
NO_MOE_BLOCK = "moe_every=5 is above n_layer=4, so no block is a mixture of experts"
NOT_DUAL = ("attn_placement is 'in' and mlp_placement 'in' (it says where the dual placements put scales, and "
            "neither is one)")
NO_SCALES = "scale is 'none' (no scale vectors)"
PLAIN = "reparam is 'plain' (no separate magnitude parameter)"
NO_WD = "weight_decay is 0 (every scale_wd decays scales by 0)"
UNTIED = "tie_embeddings is False (every scale then has its untied role: the run is the one of scale_wd='iwd')"
SCALE_NONE = ["--scale=none", "--reparam=plain", "--branch_scales=False", "--mlp_placement=in"]

# (the key given, its value, a context in which it is inert, the reason, contexts in which it acts)
CASES = [
    ("muon_lr", "0.01", [], MUON, [["--optimizer=muon"]]),
    ("muon_momentum", "0.9", [], MUON, [["--optimizer=muon"]]),
    ("wsd_decay_frac", "0.3", [], WSD, [["--lr_schedule=wsd"]]),
    ("min_lr", "0.0001", ["--lr_schedule=constant"], CONSTANT,
     [[], ["--lr_schedule=wsd"], ["--lr_schedule=linear"]]),
    ("top_k", "1", [], DENSE, [["--n_experts=4"]]),
    ("moe_every", "2", [], DENSE, [["--n_experts=4"]]),
    ("expert_d_ff", "64", [], DENSE, [["--n_experts=4"]]),
    ("shared_expert", "True", [], DENSE, [["--n_experts=4"]]),
    ("aux_loss_coef", "0.02", [], DENSE, [["--n_experts=4"]]),
    ("z_loss_coef", "0.001", [], DENSE, [["--n_experts=4"]]),
    ("n_experts", "4", ["--moe_every=5"], NO_MOE_BLOCK, [["--moe_every=4"], ["--moe_every=5", "--n_layer=5"]]),
    ("dual_sites", "all", ["--mlp_placement=in"], NOT_DUAL,
     [[], ["--mlp_placement=dual"], ["--mlp_placement=in", "--attn_placement=dual"]]),
    ("magnitude_lr_mult", "4.0", ["--reparam=plain"], PLAIN, [[], ["--reparam=er"]]),
    ("magnitude_lr_mult", "4.0", SCALE_NONE, NO_SCALES, [[]]),
    ("scale_wd", "all", SCALE_NONE, NO_SCALES, [[], ["--reparam=plain"]]),
    ("scale_wd", "all", ["--weight_decay=0"], NO_WD, [[], ["--weight_decay=0.1"]]),
    ("scale_wd", "iwd_final", ["--tie_embeddings=False"], UNTIED, [[]]),
]


@pytest.mark.parametrize("key, value, inert, why, acting", CASES,
                         ids=[f"{c[0]}-{'-'.join(a[2:] for a in c[2]) or 'default'}" for c in CASES])
def test_an_inert_key_given_gets_exactly_its_note(key, value, inert, why, acting):
    arg = f"--{key}={value}"
    assert notes(inert + [arg]) == [f"note: {arg} has no effect: {why}; it is ignored"]
    assert not [n for n in notes(inert) if n.startswith(f"note: --{key}=")]  # not given: the default says nothing
    cfg, given = load_config(inert + [arg])
    assert (key, why) in inert_keys(cfg) and inert_notes(cfg, given - {key}) == []  # inert, noted only if given
    for context in acting:  # where it acts: no note
        assert notes(context + [arg]) == []
        assert key not in dict(inert_keys(load_config(context + [arg])[0]))


def test_a_value_that_acts_under_an_untied_head_gets_no_note():
    assert notes(["--tie_embeddings=False", "--scale_wd=iwd"]) == []
    assert notes(["--tie_embeddings=False", "--scale_wd=all"]) == []


def test_a_key_given_in_a_config_file_is_noted_as_the_files(tmp_path):
    """A note names where the value came from: the config file that set it (not a flag the user never
    typed), or the command line, which wins over the file."""
    path = tmp_path / "cfg.py"
    path.write_text("muon_lr = 0.01\nlr_schedule = 'constant'\nmin_lr = 0.0\n")
    assert notes([str(path)]) == [f"note: muon_lr=0.01 (in {path}) has no effect: {MUON}; it is ignored",
                                  f"note: min_lr=0.0 (in {path}) has no effect: {CONSTANT}; it is ignored"]
    assert notes([str(path), "--optimizer=muon"]) == [
        f"note: min_lr=0.0 (in {path}) has no effect: {CONSTANT}; it is ignored"]
    assert notes([str(path), "--min_lr=0"]) == [f"note: muon_lr=0.01 (in {path}) has no effect: {MUON}; it is ignored",
                                                f"note: --min_lr=0.0 has no effect: {CONSTANT}; it is ignored"]


def test_several_reasons_give_one_note_per_key():
    args = SCALE_NONE + ["--weight_decay=0", "--scale_wd=all", "--magnitude_lr_mult=2.0"]
    assert notes(args) == [f"note: --magnitude_lr_mult=2.0 has no effect: {NO_SCALES}; it is ignored",
                           f"note: --scale_wd=all has no effect: {NO_SCALES}; it is ignored"]


def test_with_no_mixture_of_experts_block_each_expert_key_given_gets_its_note():
    args = ["--n_experts=4", "--moe_every=5", "--top_k=1", "--shared_expert=True"]
    assert notes(args) == [f"note: --n_experts=4 has no effect: {NO_MOE_BLOCK}; it is ignored",
                           f"note: --top_k=1 has no effect: {NO_MOE_BLOCK}; it is ignored",
                           f"note: --shared_expert=True has no effect: {NO_MOE_BLOCK}; it is ignored"]
    assert notes(args + ["--n_layer=5"]) == []  # block 4 is one


def test_the_default_config_gives_no_inert_key():
    cfg, given = load_config([])
    assert cfg == DEFAULTS and given == set() and inert_notes(cfg, given) == []
    # defaults that are inert (muon_lr under AdamW, ...) are never noted, even passed along as given
    assert inert_notes(cfg, set()) == []


# The committed configs that set a key their own other keys switch off: ablation_base.py sets
# muon_lr and wsd_decay_frac for its settings "muon_wsd" (they act there) and "adamw_cosine" (not).
COMMITTED = {"ablation_base.py": ["muon_lr", "wsd_decay_frac"]}


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "configs", "*.py"))), ids=os.path.basename)
def test_committed_configs_note_only_keys_they_truly_set_inert(path):
    noted = [n.split("=", 1)[0].removeprefix("note: ").removeprefix("--") for n in notes([path])]
    assert noted == COMMITTED.get(os.path.basename(path), [])
    if noted:  # and under the setting they are there for, none
        assert notes([path, "--optimizer=muon", "--lr_schedule=wsd"]) == []


def test_train_prints_the_notes_at_start(tmp_path, capsys):
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=2", "--muon_lr=0.01", "--dual_sites=all",
                  "--mlp_placement=in", "--top_k=1"))
    lines = capsys.readouterr().out.splitlines()
    expected = [f"note: --muon_lr=0.01 has no effect: {MUON}; it is ignored",
                f"note: --top_k=1 has no effect: {DENSE}; it is ignored",
                f"note: --dual_sites=all has no effect: {NOT_DUAL}; it is ignored"]
    assert [ln for ln in lines if "has no effect" in ln] == expected
    assert lines.index(expected[0]) < next(i for i, ln in enumerate(lines) if ln.startswith("iter "))


INT_KEYS = [k for k, v in DEFAULTS.items() if isinstance(v, int) and not isinstance(v, bool)]


@pytest.mark.parametrize("key", INT_KEYS)
def test_an_integer_past_any_real_size_is_one_line_on_the_command_line_and_in_a_file(tmp_path, key):
    """10**400 in any integer key was an OverflowError in the size estimates or torch's empty(): now one
    line naming the key, from --key= and from a config file alike; 2**53 itself is still read as a number."""
    big = 10**400
    cfg_file = tmp_path / "c.py"
    cfg_file.write_text(f"{key} = 10**400\n")
    for argv in ([f"--{key}={big}"], [str(cfg_file)]):
        with pytest.raises(UserError) as e:
            load_config(argv)
        assert f"{key}=a number of 401 digits is past any real size" in str(e.value) and "\n" not in str(e.value)
    assert "past any real size" not in (value_problem(key, 2**53) or "")


def test_the_memory_check_reads_a_cgroups_memory_max(tmp_path):
    """A container's or a Slurm job's cgroup v2 memory.max below the machine's RAM is the limit the run is
    held to (the allocator fails there with a traceback); 'max' (none) and an unreadable file are no limit."""
    from plumbing.memory import process_limits
    (tmp_path / "proc").write_text("0::/job/42\n")
    (tmp_path / "job" / "42").mkdir(parents=True)
    (tmp_path / "job" / "42" / "memory.max").write_text("2147483648\n")
    limits = process_limits(str(tmp_path), str(tmp_path / "proc"))
    assert (2147483648, "this process's cgroup memory.max (/job/42)") in limits
    (tmp_path / "job" / "42" / "memory.max").write_text("max\n")
    assert not [x for x in process_limits(str(tmp_path), str(tmp_path / "proc")) if "cgroup" in x[1]]


def test_the_memory_check_refuses_a_config_over_the_processs_address_space_limit():
    """Under `ulimit -v` (RLIMIT_AS) of 16 GB, a config needing about 20 GB (under this machine's RAM on
    a large box, over it on a small one) is one line naming the smaller of the two limits."""
    import subprocess
    import sys
    code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (16 * 2**30, resource.RLIM_INFINITY))\n"
            "from plumbing.memory import check_memory\nfrom configurator import DEFAULTS, UserError\n"
            "try:\n    check_memory({**DEFAULTS, 'n_embd': 4096, 'n_layer': 6, 'vocab_size': 1000, 'device': 'cpu'})\n"
            "except UserError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60).stdout
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    expected = "RLIMIT_AS" if ram > 16 * 2**30 else "this machine's RAM"
    assert expected in out and out.count("\n") == 1, out
