"""A student can follow one training step: at the quick start's config (`python train.py`, fast paths on), a
plain iteration, from one optim.set_lr call to the next (no eval, no log flush), runs few files and functions of
the repository (README: Reading order). Counted with sys.setprofile, as a reader stepping through it meets them."""

import os
import sys
from collections import Counter

import train as train_mod
from plumbing import ops
from configurator import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_FILES, MAX_FUNCTIONS = 6, 30


def traced_step(tmp_path, monkeypatch, *extra):
    """{(file relative to the repository, function's qualified name): calls} of the repository's Python
    functions in iteration 1 of a short run at the default config (iteration 0's eval is before it)."""
    seen, calls = Counter(), [0]

    def profile(frame, event, arg):
        path = frame.f_code.co_filename
        if (event == "call" and path.startswith(ROOT + os.sep) and os.sep + "tests" + os.sep not in path
                and "site-packages" not in path):  # a virtual environment inside the checkout (CI's .venv) is not ours
            seen[(os.path.relpath(path, ROOT), getattr(frame.f_code, "co_qualname", frame.f_code.co_name))] += 1

    real = train_mod.set_lr

    def set_lr(*args, **kwargs):
        calls[0] += 1
        sys.setprofile(profile if calls[0] == 2 else None)  # from iteration 1's set_lr to iteration 2's
        return real(*args, **kwargs)

    monkeypatch.setattr(train_mod, "set_lr", set_lr)
    monkeypatch.setattr(ops, "PROGRESS_EVERY_S", float("inf"))  # a plain step: no line overdue on a slow machine
    cfg, given = load_config(["--max_iters=3", "--eval_iters=1", "--sample_tokens=0", f"--out_dir={tmp_path}", *extra])
    try:
        train_mod.train(cfg, given)
    finally:
        sys.setprofile(None)
    assert calls[0] == 3
    return seen


def test_one_plain_step_at_the_quick_starts_config_visits_few_files_and_functions(tmp_path, monkeypatch):
    seen = traced_step(tmp_path / "a", monkeypatch)
    files = Counter(path for path, _ in seen)
    listing = "\n".join(f"{path}: {sorted(q for p, q in seen if p == path)}" for path in sorted(files))
    assert len(files) <= MAX_FILES and len(seen) <= MAX_FUNCTIONS, listing
    # the step a reader follows: the loop, the model's forward, the scale vectors' formulas, the optimizer
    assert {"train.py", "model.py", "norms.py", "optim.py"} <= set(files), listing
    assert ("model.py", "Attention.forward") in seen and ("optim.py", "optimizer_step") in seen, listing


def test_the_count_sees_the_mechanism_statistics_when_a_run_turns_them_on(tmp_path, monkeypatch):
    """The instrument responds: with --mechanism_stats=on each step records the scale-free step (mechanism.py)."""
    seen = traced_step(tmp_path / "b", monkeypatch, "--mechanism_stats=on")
    assert ("plumbing/mechanism.py", "Mechanism.record_step") in seen
    assert len({path for path, _ in seen}) > MAX_FILES


def test_the_ablations_record_the_mechanism_statistics_and_a_run_says_whether_it_does(tmp_path, capsys):
    """Off by default (a plain step does none of their work), on in every ablation (their records and mechanism
    figures read them: configs/ablation_base.py), and the start of a run says which."""
    assert load_config([])[0]["mechanism_stats"] == "off"
    assert load_config([os.path.join(ROOT, "configs", "ablation_base.py")])[0]["mechanism_stats"] == "on"
    from research.ablation import load_ablation
    for name in sorted(os.listdir(os.path.join(ROOT, "configs", "ablations"))):
        if name.endswith(".py") and name != "ladder.py":
            spec = load_ablation(os.path.join(ROOT, "configs", "ablations", name))
            assert spec["base"].endswith("ablation_base.py") or "124m" in spec["base"], name
    train_mod.train(*load_config(["--max_iters=0", "--eval_iters=1", "--sample_tokens=0", f"--out_dir={tmp_path}"]))
    assert "mechanism statistics (claim C3): off (mechanism_stats='off'; --mechanism_stats=on logs them)" in \
        capsys.readouterr().out
