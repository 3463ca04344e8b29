"""Every entry of every registry held to the same tests, the entries read from the registries
themselves (model.CHOICES and optim.CHOICES: scale classes, placements, optimizers, schedules and
weight-decay recipes; a fork's entry as well, which tests/test_forks.py runs them on): each trains a
few steps at tiny size and resumes bit for bit, folds its trained scales without moving the logits,
exports or says in one line why not, and, for the entries that shape the model, reads a Hugging Face
folder exactly or says what changed. What other files already hold every entry to is referenced, not
repeated: the formulas and folding over every switch combination (tests/test_norms.py: all_variants),
the optimizer groups (tests/test_optim.py), the inert-key notes and did-you-means (tests/test_config.py)."""

import contextlib
import json

import pytest
import torch

import configurator
import model
import norms
import optim
from configurator import DEFAULTS, UserError
from conftest import BASELINE, add_row
from test_train import make_dataset, read_log, run, tiny_args

# The registries: every config key whose values name the entries of a dict beside their code (SCALES and
# DUAL_SITES are words the model's code reads, no entries).
REGISTRIES = {key: registry for key, registry in {**model.CHOICES, **optim.CHOICES}.items() if isinstance(registry, dict)}
ENTRIES = [(key, name) for key, registry in REGISTRIES.items() for name in registry]
SHAPES_THE_MODEL = [(key, name) for key, name in ENTRIES if key in model.CHOICES]  # (a checkpoint's reading)


def flags(switches):
    return [f"--{k}={v}" for k, v in switches.items()]


def trains_and_resumes_exactly(tmp_path, switches):
    """4 iterations straight, and 2 then 2 more resumed: the same log row for row, bit for bit (losses,
    LR), and the same final weights and optimizer state. Returns the straight run's folder."""
    ds = make_dataset(tmp_path / "ds")
    common = ["--max_iters=4", "--eval_interval=2", *flags(switches)]
    run(tiny_args(ds, tmp_path / "a", *common))
    run(tiny_args(ds, tmp_path / "b", *common[1:], "--max_iters=2"))
    run(tiny_args(ds, tmp_path / "b", "--init_from=resume", "--max_iters=4"))
    straight = read_log(tmp_path / "a")
    resumed = [r for r in read_log(tmp_path / "b") if r["kind"] != "resume"]  # max_iters 2 -> 4, recorded
    assert [(r["kind"], r["iter"]) for r in resumed] == [(r["kind"], r["iter"]) for r in straight]
    for a, b in zip(straight, resumed):
        assert {k: a[k] for k in {"loss", "val_loss", "lr"} & a.keys()} == {k: b[k] for k in {"loss", "val_loss", "lr"} & a.keys()}
    a, b = (torch.load(tmp_path / o / "ckpt.pt", weights_only=True) for o in ("a", "b"))
    assert a["model"].keys() == b["model"].keys() and all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    states = [[t for o in ckpt["optimizers"] for s in o["state"].values() for t in s.values() if torch.is_tensor(t)]
              for ckpt in (a, b)]
    assert len(states[0]) == len(states[1]) > 0 and all(torch.equal(x, y) for x, y in zip(*states))
    assert straight[-1]["val_loss"] < 10  # finite, and it trained from ln(40) = 3.7
    return tmp_path / "a"


def folds(out_dir):
    """The trained checkpoint's input-role scales fold into its weights (GPT.fold_scales, sample.py
    --fold's path): every one is 1 after, the output-role ones are kept, the logits stay."""
    from plumbing.checkpoint import load_model
    gpt, _ = load_model(str(out_dir / "ckpt.pt"))
    idx = torch.randint(0, 40, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = gpt(idx, idx)[0]
        kept = {n: s().clone() for n, s in gpt.scale_vectors() if s.untied_role == "output"}
        assert any(not torch.equal(s(), torch.ones_like(s())) for _, s in gpt.scale_vectors())  # trained: not 1
        with pytest.warns(UserWarning, match="untying") if gpt.config.tie_embeddings else contextlib.nullcontext():
            gpt.fold_scales()
        for n, s in gpt.scale_vectors():
            assert torch.equal(s(), kept[n]) if n in kept else torch.allclose(s(), torch.ones_like(s()), atol=1e-6), n
        torch.testing.assert_close(gpt(idx, idx)[0], before, rtol=1e-4, atol=1e-4)


def exports(out_dir, refused=None, writes=False):
    """tools/export.py writes a folder whose logits transformers reproduces (it checks), or refuses in one
    line (which says `refused`, when given: then it must refuse; writes=True: it must write)."""
    pytest.importorskip("transformers", reason="optional extra: pip install -e '.[export]'")
    from tools import export

    try:
        export.main([f"--out_dir={out_dir}", f"--export_dir={out_dir / 'hf'}"])
    except UserError as e:
        assert "\n" not in str(e) and not (out_dir / "hf").exists()
        assert not writes and (refused is None or refused in str(e)), str(e)
        return
    assert refused is None, f"exported, where it should have refused: {refused}"
    assert json.loads((out_dir / "hf" / "config.json").read_text())["architectures"]


def reads_a_folder(folder, hf, switches):
    """A Hugging Face folder (test_hf_model.hf_folder) read into the model of `switches`: with no note its
    logits are transformers' (within test_hf_model's tolerance); each note says the function changes,
    and then it has; or it is refused in one line (UserError). Returns the notes (None: refused)."""
    from test_hf_model import assert_same_logits, ours
    try:
        gpt, notes = ours(folder, **switches)
    except UserError as e:
        assert "\n" not in str(e) and "--hf_model" in str(e), str(e)
        return None
    if not notes:
        assert_same_logits(gpt, hf)
    else:
        assert all("the function changes" in note for note in notes), notes
        idx = torch.randint(0, 96, (2, 24), generator=torch.Generator().manual_seed(4))
        with torch.no_grad():
            theirs = hf(idx).logits
            assert (gpt(idx, idx)[0] - theirs).abs().max() > 1e-3 * theirs.abs().max()
    return notes


@pytest.fixture(scope="module", name="llama_folder")
def llama_folder_fixture(tmp_path_factory):
    """A random Llama folder (test_hf_model.hf_folder): (its path, transformers' model of it)."""
    from test_hf_model import hf_folder
    return hf_folder(tmp_path_factory.mktemp("llama"))


# -----------------------------------------------------------------------------


@pytest.mark.parametrize("key, name", ENTRIES, ids=[f"{k}={n}" for k, n in ENTRIES])
def test_every_entry_trains_resumes_bit_for_bit_folds_and_exports_or_says_why_not(tmp_path, key, name):
    """On the default run (the unified strategy) with the entry switched in."""
    out = trains_and_resumes_exactly(tmp_path, {key: name})
    folds(out)
    exports(out)


@pytest.mark.parametrize("key, name", SHAPES_THE_MODEL, ids=[f"{k}={n}" for k, n in SHAPES_THE_MODEL])
def test_every_entry_that_shapes_the_model_reads_a_folder_exactly_or_says_what_changed(llama_folder, key, name):
    """On the Llama baseline with the entry switched in, with shared and with branch-specific (HG)
    scales. An optimizer, schedule or recipe never enters the reading (it happens before any step)."""
    folder, hf = llama_folder
    for hg in (False, True):
        reads_a_folder(folder, hf, {**BASELINE, "branch_scales": hg, key: name})


# The four recipes as optim.py held them before recipes were entries: (input-role decayed, output-role
# decayed, grouped by untied_role). Their groups now must be what that rule gave.
OLD_RULE = {"iwd": (True, False, False), "all": (True, True, False), "none": (False, False, False),
            "iwd_final": (True, False, True)}


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("recipe", OLD_RULE)
def test_the_shipped_recipes_give_the_groups_their_old_flags_gave(recipe, tie):
    """param_groups under each shipped recipe, against the groups computed here from the old flags:
    the same names, the same tensors in the same order, the same weight decay, LR and optimizer."""
    from test_optim import ALL_ON, opt_cfg, tiny
    decays_input, decays_output, untied = OLD_RULE[recipe]
    gpt = tiny(tie_embeddings=tie, **ALL_ON)
    cfg = opt_cfg(scale_wd=recipe, magnitude_lr_mult=4.0)
    groups = optim.param_groups(gpt, cfg)
    expected, seen = {}, set()  # the scale groups by the old rule: {name: (weight decay, [tensors])}, each tensor once
    for _, sv in gpt.named_modules():
        if isinstance(sv, norms.ScaleVector):
            role = sv.untied_role if untied else sv.role
            wd = cfg.weight_decay if (decays_input if role == "input" else decays_output) else 0.0
            magnitude = [sv.get_parameter(sv.magnitude_name)] if sv.has_magnitude() else []
            for group, params in ((f"magnitude_{role}", magnitude), (f"scale_{role}", list(sv.parameters()))):
                for p in params:
                    if id(p) not in seen:
                        seen.add(id(p))
                        expected.setdefault(group, (wd, []))[1].append(p)
    found = {g["name"]: (g["weight_decay"], g["params"]) for g in groups if g["name"] in expected}
    assert found.keys() == expected.keys()
    for name, (wd, params) in expected.items():
        assert found[name][0] == wd and [id(p) for p in found[name][1]] == [id(p) for p in params], name
    others = {g["name"]: (g["weight_decay"], g["lr"], g["optimizer"]) for g in groups if g["name"] not in expected}
    assert others == {g["name"]: (g["weight_decay"], g["lr"], g["optimizer"])
                      for g in optim.param_groups(gpt, opt_cfg(scale_wd="none", magnitude_lr_mult=4.0)) if g["name"] not in expected}


def test_a_key_whose_row_sits_in_a_model_section_is_no_model_key(monkeypatch):
    """The model's keys are GPTConfig's fields (model.MODEL_KEYS), not the rows of a section: a key a
    fork adds beside the scale-vector switches (as docs/forks.md's recipe guide does) reaches no
    GPTConfig, and a resume may change it."""
    add_row(monkeypatch, "scale vectors", "my_knob", configurator.added(1.0, configurator.GE0, "a fork's", absent=1.0))
    assert "my_knob" not in model.MODEL_KEYS and model.MODEL_KEYS <= DEFAULTS.keys()
    assert model.model_config({**DEFAULTS, "my_knob": 2.0}) == model.model_config(DEFAULTS)


def test_each_instrument_fails_where_its_claim_is_false(tmp_path, monkeypatch, llama_folder):
    """A resume that drops AdamW's moments is not bit for bit; a folding relation that leaves out DNP's
    u_up (MLP.folds) leaves an input-role scale unfolded; a reading that puts no pre-norm gamma gives
    another function without a note."""
    from plumbing import hf_folder as folder_io
    with monkeypatch.context() as m:
        m.setattr(torch.optim.AdamW, "load_state_dict", lambda self, state: None)
        with pytest.raises(AssertionError):
            trains_and_resumes_exactly(tmp_path / "resume", {})
    out = trains_and_resumes_exactly(tmp_path / "fold", {"mlp_placement": "dual_norm"})
    with monkeypatch.context() as m:
        m.setattr(model.MLP, "folds", lambda self: (t for lin in (self.gate, self.up, self.down) for t in lin.folds()))
        with pytest.raises(AssertionError):
            folds(out)
    folder, hf = llama_folder
    monkeypatch.setattr(folder_io, "put_gamma", lambda gamma, shared, branches: None)
    with pytest.raises(AssertionError):
        reads_a_folder(folder, hf, BASELINE)
