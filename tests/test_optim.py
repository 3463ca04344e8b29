"""Role-aware parameter groups, the CPU Muon against torch.optim.Muon, and LR schedules."""

import itertools
import math
import re
from types import SimpleNamespace

import pytest
import torch

import model as model_mod
import norms
import optim
from configurator import DEFAULTS
from conftest import BASELINE
from model import GPT, GPTConfig, Router
from norms import PlainScale, ScaledLinear, ScaleVector
from optim import LR_SCHEDULES, OPTIMIZERS, CPUMuon, build_optimizers, check, lr_multiplier, param_groups

ALL_ON = dict(branch_scales=True, attn_placement="dual", mlp_placement="dual_norm", reparam="or",
              qk_norm=True, output_norms=True)


def opt_cfg(**kw):
    base = dict(weight_decay=0.1, scale_wd="iwd", learning_rate=1e-3, muon_lr=0.02, optimizer="adamw",
                beta1=0.9, beta2=0.95, muon_momentum=0.95, magnitude_lr_mult=1.0)
    return SimpleNamespace(**{**base, **kw})


def tiny(**kw):
    return GPT(GPTConfig(**{**dict(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=50, **BASELINE), **kw}))


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("variant", [dict(), ALL_ON, dict(scale="none")], ids=["baseline", "all_on", "none"])
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))  # every registry entry, a fork's too
def test_groups_cover_every_parameter_exactly_once(variant, tie, optimizer):
    model = tiny(tie_embeddings=tie, **variant)
    groups = param_groups(model, opt_cfg(optimizer=optimizer))
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids))
    assert set(ids) == {id(p) for p in model.parameters()}
    assert sum(p.numel() for g in groups for p in g["params"]) == model.num_params()


@pytest.mark.parametrize("scale_wd, wd_in, wd_out", [("iwd", 0.1, 0.0), ("all", 0.1, 0.1), ("none", 0.0, 0.0)])
def test_weight_decay_follows_the_role(scale_wd, wd_in, wd_out):
    model = tiny(**ALL_ON)
    groups = {g["name"]: g for g in param_groups(model, opt_cfg(scale_wd=scale_wd))}
    assert groups["scale_input"]["weight_decay"] == wd_in
    assert groups["scale_output"]["weight_decay"] == wd_out
    assert groups["matrix"]["weight_decay"] == 0.1
    assert groups["embedding"]["weight_decay"] == 0.0
    by_role = {"input": set(), "output": set()}
    for _, sv in model.scale_vectors():
        by_role[sv.role] |= {id(p) for p in sv.parameters()}
    for role, wd in (("input", wd_in), ("output", wd_out)):  # the OR magnitudes: own group, same decay
        if f"magnitude_{role}" in groups:
            assert groups[f"magnitude_{role}"]["weight_decay"] == wd
        ids = {id(p) for g in (f"scale_{role}", f"magnitude_{role}") for p in groups.get(g, {"params": []})["params"]}
        assert ids == by_role[role]


def test_optim_reads_groups_from_module_attributes_not_model_classes():
    source = open(optim.__file__).read()
    assert not re.search(r"^\s*(import model|from model import)", source, re.M)
    assert Router.optim_group == "router"


def test_optim_reads_declared_fields_without_fallbacks():
    """No getattr/hasattr with a default: a field optim.py reads is declared on the class."""
    source = open(optim.__file__).read()
    assert not re.search(r"\b(getattr|hasattr)\(", source)
    assert ScaledLinear.optim_group == "matrix" and Router.optim_group == "router"


class OddGroupLinear(ScaledLinear):
    optim_group = "odd"


@pytest.mark.parametrize("extra, message", [
    (lambda: torch.nn.Linear(4, 4), r"module 'blocks.0.extra' \(Linear\) owns parameters \['weight', 'bias'\] "
                                    r"but fits no optimizer group"),
    (lambda: torch.nn.Embedding(16, 32), r"module 'blocks.0.extra' \(Embedding\) owns parameters \['weight'\]"),
    (lambda: OddGroupLinear(4, 4), r"OddGroupLinear.optim_group='odd' is not one of"),
], ids=["linear", "second_embedding", "unknown_group"])
def test_a_module_with_parameters_and_no_declared_group_fails_loudly(extra, message):
    """Only model.wte is the embedding and model.lm_head the head (by identity); anything else
    that owns parameters must be a ScaleVector or a ScaledLinear with a known optim_group."""
    model = tiny()
    model.blocks[0].extra = extra()
    with pytest.raises(ValueError, match=message):
        param_groups(model, opt_cfg())


@pytest.mark.parametrize("reparam, name", [("or", "magnitude"), ("er", "log_magnitude")])
@pytest.mark.parametrize("scale_wd", ["iwd", "all"])
def test_magnitude_has_its_own_group_lr_and_the_role_decay(reparam, name, scale_wd):
    model = tiny(reparam=reparam, qk_norm=True, output_norms=True)
    groups = {g["name"]: g for g in param_groups(model, opt_cfg(scale_wd=scale_wd, magnitude_lr_mult=4.0))}
    by_role = {"input": set(), "output": set()}
    for _, sv in model.scale_vectors():
        if sv.magnitude_name is not None:
            by_role[sv.role].add(id(getattr(sv, name)))
    assert by_role["input"] and by_role["output"]
    for role, wd in (("input", 0.1), ("output", 0.1 if scale_wd == "all" else 0.0)):
        g = groups[f"magnitude_{role}"]
        assert {id(p) for p in g["params"]} == by_role[role]
        assert g["lr"] == g["initial_lr"] == pytest.approx(4e-3) and g["weight_decay"] == wd
        assert not by_role[role] & {id(p) for p in groups[f"scale_{role}"]["params"]}
    assert groups["scale_input"]["lr"] == pytest.approx(1e-3)


def test_plain_scales_make_no_magnitude_group():
    names = {g["name"] for g in param_groups(tiny(), opt_cfg(magnitude_lr_mult=4.0))}
    assert not {"magnitude_input", "magnitude_output"} & names


def test_magnitude_lr_mult_moves_only_the_magnitude():
    """One AdamW step from the same state: the magnitude moves 4x as far, the direction as far."""
    steps = {}
    for mult in (1.0, 4.0):
        model = tiny(reparam="or")
        sv = model.norm_f.scale
        optimizers, _ = build_optimizers(model, opt_cfg(magnitude_lr_mult=mult, weight_decay=0.0), "cpu")
        before = (sv.magnitude.detach().clone(), sv.direction.detach().clone())
        gen = torch.Generator().manual_seed(0)
        model(torch.randint(0, 50, (2, 16), generator=gen), torch.randint(0, 50, (2, 16), generator=gen))[1].backward()
        optimizers[0].step()
        steps[mult] = ((sv.magnitude - before[0]).abs().item(), (sv.direction - before[1]).abs().max().item())
    assert steps[4.0][0] == pytest.approx(4 * steps[1.0][0], rel=1e-4)
    assert steps[4.0][1] == pytest.approx(steps[1.0][1], rel=1e-4)


def test_final_norm_scale_is_output_role_while_tied_and_input_role_untied():
    tied, untied = tiny(), tiny(tie_embeddings=False)
    assert tied.norm_f.scale.role == "output" and untied.norm_f.scale.role == "input"
    groups = {g["name"]: g for g in param_groups(tied, opt_cfg(scale_wd="iwd"))}
    assert id(tied.norm_f.scale.weight) in {id(p) for p in groups["scale_output"]["params"]}
    assert groups["scale_output"]["weight_decay"] == 0.0  # not decayed under IWD while tied


def test_muon_gets_only_hidden_matrices():
    model = tiny(tie_embeddings=False, **ALL_ON)
    optimizers, groups = build_optimizers(model, opt_cfg(optimizer="muon"), "cpu")
    muon = [o for o in optimizers if isinstance(o, torch.optim.Muon)]
    assert len(muon) == 1
    muon_params = {id(p) for g in muon[0].param_groups for p in g["params"]}
    hidden = {id(lin.weight) for b in model.blocks for lin in
              (b.attn.q, b.attn.k, b.attn.v, b.attn.o, b.mlp.gate, b.mlp.up, b.mlp.down)}
    assert muon_params == hidden
    assert id(model.wte.weight) not in muon_params and id(model.lm_head.weight) not in muon_params
    adamw = [o for o in optimizers if isinstance(o, torch.optim.AdamW)][0]
    assert {id(p) for g in adamw.param_groups for p in g["params"]} == \
        {id(p) for p in model.parameters()} - hidden


@pytest.mark.parametrize("shape", [(64, 64), (96, 48), (40, 120)])
def test_cpu_muon_update_matches_torch_muon(shape):
    """Same update as torch.optim.Muon (bf16 Newton-Schulz) to bf16 tolerance, over 3 steps
    with momentum and weight decay; bound: relative error < 2e-2."""
    gen = torch.Generator().manual_seed(0)
    w0 = torch.randn(shape, generator=gen)
    ref, ours = torch.nn.Parameter(w0.clone()), torch.nn.Parameter(w0.clone())
    kw = dict(lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=True)
    opt_ref, opt_ours = torch.optim.Muon([ref], **kw), CPUMuon([ours], **kw)
    for _ in range(3):
        grad = torch.randn(shape, generator=gen)
        start = ref.detach().clone()
        ours.data.copy_(start)  # compare one step's update from the same point and momentum
        opt_ours.state[ours]["momentum_buffer"] = opt_ref.state[ref]["momentum_buffer"].clone() \
            if ref in opt_ref.state else torch.zeros(shape)
        ref.grad, ours.grad = grad.clone(), grad.clone()
        opt_ref.step()
        opt_ours.step()
        u_ref, u_ours = ref.detach() - start, ours.detach() - start
        assert ((u_ours - u_ref).norm() / u_ref.norm()).item() < 2e-2
    # the update is an approximately orthogonal matrix times lr: singular values ~ 1
    s = torch.linalg.svdvals((u_ours + 0.02 * 0.1 * start) / -(0.02 * max(1, shape[0] / shape[1]) ** 0.5))
    assert 0.4 < s.min() and s.max() < 1.6


def sched(**kw):
    """Every key at its default (a fork's schedule keys too: configurator.DEFAULTS), then these."""
    base = dict(learning_rate=1e-3, min_lr=1e-4, warmup_iters=10, max_iters=100, wsd_decay_frac=0.2,
                lr_schedule="cosine", optimizer="adamw", scale_wd="iwd", fsdp=False)
    return SimpleNamespace(**{**DEFAULTS, **base, **kw})


@pytest.mark.parametrize("name", LR_SCHEDULES)
def test_schedule_warmup_starts_above_zero_and_rises_linearly(name):
    cfg = sched(lr_schedule=name)
    assert lr_multiplier(0, cfg) == pytest.approx(0.1)
    assert lr_multiplier(4, cfg) == pytest.approx(0.5)
    assert lr_multiplier(9, cfg) == pytest.approx(1.0)


def test_cosine_is_halfway_at_the_midpoint_and_ends_at_min_lr():
    cfg = sched()
    assert lr_multiplier(10, cfg) == pytest.approx(1.0)
    assert lr_multiplier(55, cfg) == pytest.approx(0.1 + 0.9 * 0.5)
    assert lr_multiplier(100, cfg) == pytest.approx(0.1)


def test_wsd_is_flat_then_decays_linearly_over_the_last_fraction():
    cfg = sched(lr_schedule="wsd")  # 20 decay steps, 80..99; the floor 0.1 is reached at 100
    assert all(lr_multiplier(it, cfg) == 1.0 for it in range(10, 80))
    assert lr_multiplier(80, cfg) == pytest.approx(1.0 - 0.9 * 1 / 21)
    assert lr_multiplier(99, cfg) == pytest.approx(1.0 - 0.9 * 20 / 21)
    values = [lr_multiplier(it, cfg) for it in range(79, 100)]
    assert all(a > b for a, b in zip(values, values[1:]))


@pytest.mark.parametrize("name", ["cosine", "wsd", "linear", "constant"])
def test_every_accepted_schedule_is_positive_continuous_and_decays_after_warmup(name):
    """A grid of (max_iters, warmup_iters, wsd_decay_frac, min_lr): refused, or a well-behaved LR."""
    accepted = refused = 0
    for max_iters, warmup, frac, min_lr in itertools.product(
            (1, 2, 3, 10, 37, 100), (0, 1, 5, 9, 10, 50), (0.0, 0.01, 0.2, 0.5, 0.8, 1.0), (0.0, 1e-4, 1e-3, 2e-3)):
        cfg = sched(lr_schedule=name, max_iters=max_iters, warmup_iters=warmup, wsd_decay_frac=frac, min_lr=min_lr)
        try:
            check(cfg)
        except ValueError as e:
            refused += 1
            assert "--" in str(e)  # names the key to change
            continue
        accepted += 1
        m = [lr_multiplier(it, cfg) for it in range(max_iters)]
        assert all(0 < v <= 1 for v in m), (cfg, m)
        if name == "constant" or max_iters <= warmup + (name != "wsd"):
            continue  # the run ends before any decay (train.py says so): nothing more to hold
        floor = min_lr / 1e-3
        decay_iters = max_iters - warmup if name != "wsd" else max(1, round(frac * max_iters))
        start = max_iters - decay_iters  # first decaying step
        assert start >= warmup, cfg  # the decay never starts inside warmup
        assert all(v == pytest.approx(1.0) for v in m[max(warmup - 1, 0):start + 1 if name != "wsd" else start])
        assert m[-1] < 1.0 or floor == 1.0, (cfg, m)  # a non-empty decay
        steps = [abs(a - b) for a, b in zip(m[max(warmup - 1, 0):], m[max(warmup, 1):])]
        assert max(steps, default=0) <= (1 - floor) * math.pi / 2 / decay_iters + 1e-9, (cfg, m)
    assert accepted > 100 and (refused > 0 or name in ("cosine", "linear", "constant"))


@pytest.mark.parametrize("name", LR_SCHEDULES)
def test_every_registered_schedule_warms_up_then_never_rises_and_stays_above_its_floor(name):
    """What any schedule must do, so a schedule a fork registers is held to it too: lr(0) > 0, a
    linear warmup to 1, then a multiplier in [floor, 1] that never rises, over a grid of budgets."""
    for max_iters, warmup, min_lr in itertools.product((3, 10, 100, 1000), (0, 1, 5), (0.0, 1e-4)):
        cfg = sched(lr_schedule=name, max_iters=max_iters, warmup_iters=warmup, min_lr=min_lr)
        try:
            check(cfg)
        except ValueError:
            continue  # refused in one line (the shipped schedules' refusals: the test above)
        m = [lr_multiplier(it, cfg) for it in range(max_iters)]
        assert m[:warmup] == [(it + 1) / warmup for it in range(warmup)][:max_iters] and m[0] > 0
        after = m[warmup:]
        assert all(min_lr / 1e-3 <= v <= 1.0 for v in after) and all(a >= b for a, b in zip(after, after[1:]))


@pytest.mark.parametrize("keys, message", [
    (dict(lr_schedule="wsd", max_iters=10, warmup_iters=5, wsd_decay_frac=0.8), "decay .* would start inside warmup"),
    (dict(lr_schedule="wsd", wsd_decay_frac=0.0), "wsd_decay_frac=0.0 must be in \\(0, 1\\]"),
    (dict(lr_schedule="cosine", min_lr=2e-3), "min_lr=0.002 is above learning_rate"),
    (dict(lr_schedule="no_such_schedule"), "lr_schedule='no_such_schedule' is not one of"),
])
def test_schedules_that_would_jump_or_stall_are_refused(keys, message):
    with pytest.raises(ValueError, match=message):
        check(sched(**keys))


def test_wsd_with_min_lr_zero_never_spends_a_step_at_zero():
    cfg = sched(lr_schedule="wsd", min_lr=0.0)
    check(cfg)
    assert min(lr_multiplier(it, cfg) for it in range(100)) == pytest.approx(1 / 21)


def test_linear_and_constant():
    assert lr_multiplier(55, sched(lr_schedule="linear")) == pytest.approx(1.0 - 0.9 * 0.5)
    assert lr_multiplier(99, sched(lr_schedule="constant")) == 1.0


def test_unknown_scale_wd_is_an_error():
    with pytest.raises(ValueError, match="scale_wd='some'"):
        param_groups(tiny(), opt_cfg(scale_wd="some"))


class SoftplusScale(ScaleVector):
    """A scale vector a fork might add: gamma = softplus(p), p init so that gamma == 1."""

    def __init__(self, dim, role):
        super().__init__(dim, role)
        self.raw = torch.nn.Parameter(torch.full((dim,), math.log(math.e - 1)))

    def forward(self):
        return torch.nn.functional.softplus(self.raw)

    @torch.no_grad()
    def reset_(self):
        self.raw.fill_(math.log(math.e - 1))


def test_a_new_scale_vector_subclass_lands_in_its_roles_group_without_optimizer_edits(monkeypatch):
    """docs/forks.md's guide: a ScaleVector subclass with a role needs no change to optim.py."""
    monkeypatch.setattr(model_mod, "make_scale",
                        lambda cfg, dim, role, magnitude_free=False: None if cfg.scale == "none"
                        else SoftplusScale(dim, role))
    model = tiny(tie_embeddings=False, **ALL_ON)
    svs = [sv for _, sv in model.scale_vectors()]
    assert svs and all(isinstance(sv, SoftplusScale) for sv in svs)
    assert {sv.role for sv in svs} == {"input", "output"}
    groups = {g["name"]: g for g in param_groups(model, opt_cfg())}
    for role, wd in (("input", 0.1), ("output", 0.0)):  # IWD by role
        mine = {id(sv.raw) for sv in svs if sv.role == role}
        assert mine <= {id(p) for p in groups["scale_" + role]["params"]}
        assert groups["scale_" + role]["weight_decay"] == wd
    ids = [id(p) for g in groups.values() for p in g["params"]]
    assert sorted(ids) == sorted(id(p) for p in model.parameters())
    x = torch.randint(0, 50, (2, 16))
    logits, loss, _ = model(x, x)
    loss.backward()
    assert all(sv.raw.grad is not None for sv in svs)
    with torch.no_grad():
        for sv in svs:
            sv.raw.add_(0.3 * torch.randn_like(sv.raw))  # trained scales, away from 1
        before = model(x)[0]
        model.fold_scales()  # folding goes through forward() and reset_(): the logits stay
        assert torch.allclose(model(x)[0], before, atol=1e-5)


@pytest.mark.parametrize("switches", [
    dict(branch_scales=True, attn_placement="dual", mlp_placement="dual_norm"),
    dict(branch_scales=True, attn_placement="dual", mlp_placement="dual_norm", qk_norm=True, output_norms=True),
], ids=["unified", "unified_qk_out"])
def test_a_scale_class_without_a_magnitude_is_built_at_every_site_once_in_the_table(monkeypatch, switches):
    """The fork guide's one edit, norms.SCALE_CLASSES["softplus"] = SoftplusScale: a class with
    no separate magnitude parameter is built at every scale site, the magnitude-free ones too
    (where OR, whose magnitude would get no gradient there, still gives way to PlainScale)."""
    monkeypatch.setitem(norms.SCALE_CLASSES, "softplus", SoftplusScale)
    model = tiny(reparam="softplus", **switches)
    names = [n for n, _ in model.scale_vectors()]
    assert sum(isinstance(sv, PlainScale) for _, sv in model.scale_vectors()) == 0
    assert all(isinstance(sv, SoftplusScale) for _, sv in model.scale_vectors())
    with_or = tiny(reparam="or", **switches)
    assert [n for n, _ in with_or.scale_vectors()] == names  # the same sites
    assert sum(isinstance(sv, PlainScale) for _, sv in with_or.scale_vectors()) >= 2 * 2  # 2 per block or more
    x = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(0))
    model(x, x)[1].backward()
    assert all(sv.raw.grad is not None and sv.raw.grad.abs().sum() > 0 for _, sv in model.scale_vectors())


def test_iwd_final_reads_the_declared_untied_role_and_fold_leaves_it_the_role():
    """The tied final-norm scale declares role "output" and untied_role "input"; every other
    scale's untied_role is its role. iwd_final groups by untied_role; fold_scales unties the
    head through untie_(), so the final-norm scale is input-role after it."""
    model = tiny(reparam="or")
    sv = model.norm_f.scale
    assert (sv.role, sv.untied_role) == ("output", "input")
    assert all(other.untied_role == other.role for _, other in model.scale_vectors() if other is not sv)
    groups = {g["name"]: {id(p) for p in g["params"]} for g in param_groups(model, opt_cfg(scale_wd="iwd_final"))}
    assert id(sv.direction) in groups["scale_input"] and id(sv.magnitude) in groups["magnitude_input"]
    with pytest.warns(UserWarning, match="untying"):
        model.fold_scales()
    assert sv.role == sv.untied_role == "input"
    by_recipe = [[(g["name"], g["weight_decay"], [id(p) for p in g["params"]]) for g in
                  param_groups(model, opt_cfg(scale_wd=r))] for r in ("iwd", "iwd_final")]
    assert by_recipe[0] == by_recipe[1]  # untied, the two recipes agree


def test_iwd_final_decays_the_tied_final_norm_scale_and_nothing_else_more():
    """scale_wd="iwd_final" = "iwd" + the tied final-norm scale decayed (as input-role);
    untied, the two recipes are the same (the final-norm scale is input-role anyway)."""
    for tie in (True, False):
        model = tiny(reparam="or", tie_embeddings=tie)
        iwd, final = ({id(p): g["weight_decay"] for g in param_groups(model, opt_cfg(scale_wd=r)) for p in g["params"]}
                      for r in ("iwd", "iwd_final"))
        changed = {id(p) for p in model.parameters() if iwd[id(p)] != final[id(p)]}
        expected = {id(p) for p in model.norm_f.scale.parameters()} if tie else set()
        assert changed == expected
        assert all(final[i] == 0.1 for i in changed)


def test_scale_lr_sets_the_scale_vectors_and_magnitudes_lr_and_zero_or_absent_means_learning_rate():
    """scale_lr is the scale groups' peak LR (the magnitudes' x magnitude_lr_mult); 0, or a config from
    before the key existed, gives them learning_rate, as every run had; the matrices keep theirs."""
    model = tiny(reparam="or", qk_norm=True)  # OR magnitudes on input-role (pre-norm) and output-role (QK) scales
    groups = {g["name"]: g["lr"] for g in param_groups(model, opt_cfg(scale_lr=5e-4, magnitude_lr_mult=4.0))}
    assert groups["scale_input"] == groups["scale_output"] == 5e-4
    assert groups["magnitude_input"] == groups["magnitude_output"] == 2e-3 and groups["matrix"] == 1e-3
    for cfg in (opt_cfg(scale_lr=0.0), opt_cfg()):  # 0, and a namespace without the key
        groups = {g["name"]: g["lr"] for g in param_groups(model, cfg)}
        assert groups["scale_input"] == groups["scale_output"] == groups["matrix"] == 1e-3


def test_a_schedule_entry_that_breaks_the_contract_is_refused_naming_the_rule(monkeypatch):
    """optim.Schedule's contract, checked at start for the run's own config (plumbing/contracts.py): a fork whose multiplier
    rises after warmup, one that leaves [floor, 1], and one that reads a key with no config row are
    each one line naming the entry and the rule; the registry's own entries pass."""
    from types import SimpleNamespace

    import optim
    from configurator import DEFAULTS
    from plumbing import contracts
    cfg = SimpleNamespace(**{**DEFAULTS, "max_iters": 100, "warmup_iters": 10, "min_lr": 3e-4, "learning_rate": 3e-3})
    for name in optim.LR_SCHEDULES:
        contracts.check(SimpleNamespace(**{**vars(cfg), "lr_schedule": name}))
    forks = {"rising": (optim.Schedule(lambda it, c, floor: 0.5 + 0.5 * (it > 50), (), "steps up"), "rises after warmup"),
             "above": (optim.Schedule(lambda it, c, floor: 1.5, (), "above the peak"), "leaves [min_lr / learning_rate"),
             "below": (optim.Schedule(lambda it, c, floor: floor / 2, ("min_lr",), "below the floor"), "leaves [min_lr"),
             "keyless": (optim.Schedule(optim.cosine, ("no_such_key",), "reads an unknown key"), "'no_such_key', which "
                                                                                                  "has no row")}
    for name, (entry, rule) in forks.items():
        monkeypatch.setitem(optim.LR_SCHEDULES, name, entry)
        with pytest.raises(ValueError, match=re.escape(rule)) as e:
            contracts.check(SimpleNamespace(**{**vars(cfg), "lr_schedule": name}))
        assert f"LR_SCHEDULES[{name!r}]" in str(e.value) and "\n" not in str(e.value)
        monkeypatch.delitem(optim.LR_SCHEDULES, name)


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_the_step_clips_as_torch_does_over_the_parameters_and_walks_the_modules_once(optimizer, monkeypatch):
    """optimizer_step's clip equals torch's clip_grad_norm_(model.parameters()) bit for bit (the same list in
    the same order: the same losses), and only its first step walks the modules (model.parameters() is host
    work per module, every iteration)."""
    torch.manual_seed(0)
    m = tiny(**ALL_ON)
    idx = torch.randint(0, 50, (2, 16))
    m(idx, idx)[1].backward()
    ref = {name: p.grad.clone() for name, p in m.named_parameters()}
    ref_params = [torch.nn.Parameter(p.detach().clone()) for p in m.parameters()]
    for r, p in zip(ref_params, m.parameters()):
        r.grad = p.grad.clone()
    torch.nn.utils.clip_grad_norm_(ref_params, 1e-3)
    expected = {name: r.grad for (name, _), r in zip(m.named_parameters(), ref_params)}
    assert not any(torch.equal(expected[n], ref[n]) for n in ref)  # the norm is above 1e-3: every gradient clipped
    opts, _ = build_optimizers(m, opt_cfg(optimizer=optimizer, learning_rate=0.0, muon_lr=0.0, weight_decay=0.0), "cpu")
    seen = {}
    monkeypatch.setattr(torch.optim.Optimizer, "zero_grad", lambda self, set_to_none=True: seen.update(
        {id(p): p.grad.clone() for g in self.param_groups for p in g["params"]}))
    optim.optimizer_step(m, opts, grad_clip=1e-3)
    for name, p in m.named_parameters():
        assert torch.equal(seen[id(p)], expected[name]), name
    monkeypatch.setattr(type(m), "parameters", lambda *a, **k: pytest.fail("a second step walked the modules"))
    optim.optimizer_step(m, opts, grad_clip=1e-3)
