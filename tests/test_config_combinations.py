"""Keys that change nothing under the rest of the config (ops.inert_keys): a key given
explicitly in such a combination gets one note at the start of the run, a default never does."""

import glob
import os

import pytest

from configurator import DEFAULTS, load_config
from ops import inert_keys, inert_notes
from conftest import ROOT
from test_train import make_dataset, run, tiny_args


def notes(args):
    cfg, given = load_config(args)
    return inert_notes(cfg, given)


MUON = "optimizer is 'adamw' (only optimizer 'muon' reads it)"
WSD = "lr_schedule is 'cosine' (only lr_schedule 'wsd' reads it)"
CONSTANT = "lr_schedule is 'constant' (only lr_schedule 'cosine', 'wsd' or 'linear' reads it)"
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


def test_a_key_given_in_a_config_file_is_noted_as_one_on_the_command_line(tmp_path):
    path = tmp_path / "cfg.py"
    path.write_text("muon_lr = 0.01\nlr_schedule = 'constant'\nmin_lr = 0.0\n")
    assert notes([str(path)]) == [f"note: --muon_lr=0.01 has no effect: {MUON}; it is ignored",
                                  f"note: --min_lr=0.0 has no effect: {CONSTANT}; it is ignored"]
    assert notes([str(path), "--optimizer=muon"]) == [f"note: --min_lr=0.0 has no effect: {CONSTANT}; it is ignored"]


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
    noted = [n.split("=", 1)[0].removeprefix("note: --") for n in notes([path])]
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
