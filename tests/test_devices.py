"""The accelerator path beside its CPU counterpart: bf16 autocast, folding under bf16, fused
AdamW, torch.optim.Muon, torch.compile, sampling, checkpoints moved between devices.

Every test runs on "cpu" and, when CUDA is present, on "cuda" (skipped otherwise with the
reason); `pytest -k cuda` selects the GPU cases, and gpu_check.py runs this file on a GPU.
References are computed on the CPU in float32. Models are tiny, so the CPU cases are cheap.

bf16 bound: bfloat16 keeps 8 significant bits (unit roundoff 2^-9 ~ 2e-3); matmuls round
their inputs and outputs once per layer, so a 2-layer model's loss agrees with float32 to
about 1e-2 and its whole gradient (one vector) to a few 1e-2 relative. We assert 2e-2 on
the loss and 5e-2 on the gradient. (Single small tensors are not compared: a scale that
a normalization makes magnitude-free has a gradient of rounding noise alone.)
"""

import os
import warnings
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch

import sample
from conftest import BASELINE
from model import GPT, GPTConfig, Router
from optim import OPTIMIZERS, CPUMuon, build_optimizers, param_groups
from test_norms import randomize_scales
from test_train import make_dataset, read_log, run, tiny_args

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="CUDA is not available on this machine"))]
UNIFIED = dict(branch_scales=True, attn_placement="dual", mlp_placement="dual_norm", reparam="or")
VARIANTS = {
    "baseline": dict(),
    "unified": UNIFIED,
    "er": dict(UNIFIED, reparam="er"),
    "all_on": dict(UNIFIED, qk_norm=True, output_norms=True),
    "none": dict(scale="none"),
    "unified_moe": dict(UNIFIED, n_experts=4, top_k=2),
}
LOSS_TOL, GRAD_TOL = 2e-2, 5e-2


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)


def tiny_cfg(**kw):
    return GPTConfig(**{**dict(n_layer=2, n_head=2, n_embd=64, block_size=32, vocab_size=96, **BASELINE), **kw})


def tiny_model(cfg, device, seed=0):
    """GPT with random scale vectors (so that every scale matters) on device; MoE routers' weights
    x10 (sharper routing than at init; not decisive: gaps of 3e-4 between a token's 2nd and 3rd
    expert remain, which bf16 rounding can cross)."""
    model = GPT(cfg, seed=seed)
    randomize_scales(model, torch.Generator().manual_seed(seed + 1))
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, Router):
                module.weight.mul_(10)
    return model.to(device)


def batch(cfg, seed=0, n=4):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randint(0, cfg.vocab_size, (n, cfg.block_size), generator=gen),
            torch.randint(0, cfg.vocab_size, (n, cfg.block_size), generator=gen))


def loss_and_grad(model, x, y, bf16):
    """(loss, every gradient concatenated, float32 on the CPU) of one forward/backward."""
    model.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
        _, loss, aux = model(x, y)
        objective = loss + model.aux_objective(aux)
    objective.backward()
    grad = torch.cat([p.grad.float().flatten().cpu() for p in model.parameters()])
    return loss.item(), grad


def relative(a, b):
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("variant", VARIANTS)
def test_bf16_autocast_matches_float32(device, variant):
    """Loss and gradient of every variant under bf16 autocast on device against float32 on the CPU."""
    cfg = tiny_cfg(**VARIANTS[variant])
    x, y = batch(cfg)
    ref_loss, ref_grad = loss_and_grad(tiny_model(cfg, "cpu"), x, y, bf16=False)
    loss, grad = loss_and_grad(tiny_model(cfg, device), x.to(device), y.to(device), bf16=True)
    assert abs(loss - ref_loss) < LOSS_TOL, (loss, ref_loss)
    assert relative(grad, ref_grad) < GRAD_TOL


@pytest.mark.parametrize("variant", ["all_on", "unified_moe"])
def test_fold_under_bf16_costs_no_more_than_bf16_itself(device, variant):
    """Folding (claim C2) in float32, then running under bf16: the logits stay as close to
    the float32 unfolded model as the unfolded model under bf16 is (mean error, x1.5; the
    mean, not the max, since bf16 noise can flip an MoE token's expert choice)."""
    cfg = tiny_cfg(**VARIANTS[variant])
    x, _ = batch(cfg)
    with torch.no_grad():
        ref = tiny_model(cfg, "cpu").eval()(x, x)[0]
        model = tiny_model(cfg, device).eval()
        xd = x.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            plain = model(xd, xd)[0].float().cpu()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tied head is untied, with a warning
            model.fold_scales()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            folded = model(xd, xd)[0].float().cpu()
    err_plain, err_fold = (plain - ref).abs().mean().item(), (folded - ref).abs().mean().item()
    assert err_fold <= 1.5 * err_plain + 1e-3, (err_fold, err_plain)
    for name, sv in model.scale_vectors():
        if sv.role == "input":
            torch.testing.assert_close(sv().cpu(), torch.ones(sv.dim), msg=name)


def opt_cfg(optimizer):
    return SimpleNamespace(weight_decay=0.1, scale_wd="iwd", learning_rate=1e-2, muon_lr=0.02, optimizer=optimizer,
                           beta1=0.9, beta2=0.95, muon_momentum=0.95, magnitude_lr_mult=1.0)


def step_with_grads(model, optimizers, seed):
    """Set every gradient from a CPU generator seeded by seed (the same on every device), step."""
    gen = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen).to(p.device)
    for opt in optimizers:
        opt.step()


def test_fused_adamw_matches_the_reference_loop(device):
    """build_optimizers' AdamW (fused on CUDA and CPU) on device against torch's per-tensor loop on
    the CPU, 3 steps: both are float32 arithmetic, so they agree to float32 rounding."""
    cfg = tiny_cfg(**UNIFIED)
    model = tiny_model(cfg, device)
    optimizers, _ = build_optimizers(model, opt_cfg("adamw"), device.type)
    assert len(optimizers) == 1 and optimizers[0].defaults["fused"]
    ref = tiny_model(cfg, "cpu")
    ref_opt = torch.optim.AdamW(param_groups(ref, opt_cfg("adamw")), lr=1e-2, betas=(0.9, 0.95), eps=1e-8,
                                foreach=False, fused=False)
    for seed in range(3):
        step_with_grads(model, optimizers, seed)
        step_with_grads(ref, [ref_opt], seed)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6, msg=name)


def test_muon_on_device_matches_cpu_muon(device):
    """build_optimizers' Muon on device (torch.optim.Muon, bf16 Newton-Schulz, on CUDA; CPUMuon on
    the CPU) against CPUMuon on the CPU, 3 steps with momentum and weight decay: the updates
    of every hidden matrix agree to bf16 tolerance (relative 2e-2, as in test_optim)."""
    cfg = tiny_cfg(**UNIFIED)
    model = tiny_model(cfg, device)
    optimizers, groups = build_optimizers(model, opt_cfg("muon"), device.type)
    muon = optimizers[-1]
    assert type(muon) is (torch.optim.Muon if device.type == "cuda" else CPUMuon)
    ref = tiny_model(cfg, "cpu")
    ref_optimizers, _ = build_optimizers(ref, opt_cfg("muon"), "cpu")
    matrices = {id(p) for p in next(g for g in groups if g["name"] == "matrix")["params"]}
    start = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
    for seed in range(3):
        step_with_grads(model, optimizers, seed)
        step_with_grads(ref, ref_optimizers, seed)
    checked = 0
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        if id(p) in matrices:
            update, ref_update = p.detach().cpu() - start[name], q.detach() - start[name]
            assert relative(update, ref_update) < 2e-2, name
            checked += 1
    assert checked == 2 * 7


def record_routing(model):
    """The list every forward of model appends its routers' logits to ((N, n_experts) per MoE layer, in
    call order); the hooks stay (a compiled model recompiles when its hooks change)."""
    seen = []
    for module in model.modules():
        if isinstance(module, Router):
            module.register_forward_hook(lambda mod, args, out: seen.append(out.detach()))
    return seen


def chosen_experts(logits, k):
    """Each token's k chosen experts, sorted: one (N, k) tensor per router call (MoE.forward's rule)."""
    return [t.float().softmax(dim=-1).topk(k, dim=-1).indices.sort(dim=-1).values.cpu() for t in logits]


@contextmanager
def float32_matmuls():
    """CUDA matmuls in float32, not TF32, inside (a training run's setup in this process turns TF32 on)."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


COMPILE_F32_TOL = 1e-5  # loss (absolute) and whole gradient (relative); measured 7e-7 on an H200


@pytest.mark.parametrize("variant", ["unified", "unified_moe"])
def test_compile_matches_eager(device, variant):
    """torch.compile (inductor; CUDA graphs are not used: the default mode) against eager, two steps
    on different batches (the MoE's expert sizes change: recompiles or graph breaks).

    float32: one arithmetic in another order, so the loss and the whole gradient agree to
    COMPILE_F32_TOL and every token keeps its experts. bf16: inductor keeps fused intermediates in
    float32 where eager rounds them to bf16, so the loss agrees to LOSS_TOL, and the gradient to
    GRAD_TOL when both routed every token to the same experts; a token near a tie may change experts
    (one did on an H200: gradient 0.12 apart), and then only the loss is compared."""
    if device.type == "cpu":
        pytest.skip("compiling takes minutes on a 2-core CPU; this runs on CUDA (gpu_check.py)")
    torch._dynamo.reset()
    cfg = tiny_cfg(**VARIANTS[variant])
    eager, compiled = tiny_model(cfg, device), tiny_model(cfg, device)
    seen_eager, seen_compiled = record_routing(eager), record_routing(compiled)
    compiled = torch.compile(compiled)
    with float32_matmuls():
        for seed in range(2):
            x, y = (t.to(device) for t in batch(cfg, seed))
            for bf16 in (False, True):
                seen_eager.clear()
                seen_compiled.clear()
                ref_loss, ref_grad = loss_and_grad(eager, x, y, bf16)
                loss, grad = loss_and_grad(compiled, x, y, bf16)
                routes, ref_routes = chosen_experts(seen_compiled, cfg.top_k), chosen_experts(seen_eager, cfg.top_k)
                same_routes = len(routes) == len(ref_routes) and all(map(torch.equal, routes, ref_routes))
                if not bf16:
                    assert same_routes, f"seed {seed}: float32 compiled and eager chose different experts"
                    assert abs(loss - ref_loss) < COMPILE_F32_TOL, (seed, loss, ref_loss)
                    assert relative(grad, ref_grad) < COMPILE_F32_TOL, seed
                    continue
                assert abs(loss - ref_loss) < LOSS_TOL, (seed, loss, ref_loss)
                if same_routes:
                    assert relative(grad, ref_grad) < GRAD_TOL, seed


def test_train_then_sample_on_device(device, tmp_path, capsys):
    """A short run on device (dtype auto: bf16 on CUDA) with its closing sample, then sample.py."""
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=2", "--eval_interval=2", f"--device={device.type}",
                  "--sample_tokens=8"))
    assert "--- sample (8 tokens) ---" in capsys.readouterr().out
    sample.main([f"--out_dir={tmp_path / 'o'}", "--start=abc", "--max_new_tokens=20", f"--device={device.type}"])
    first = capsys.readouterr().out.split("\n")[0]
    assert first.startswith("abc") and len(first) == 23


def test_sample_py_picks_its_device_as_train_py_does(tmp_path, monkeypatch, capsys):
    """No --device: sample.py resolves train.py's default ("auto": the GPU where there is one)."""
    from configurator import DEFAULTS
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=1", "--eval_interval=1"))
    capsys.readouterr()
    asked = []
    monkeypatch.setattr(sample, "resolve_device", lambda device, dtype="auto": (asked.append(device), ("cpu", dtype))[1])
    sample.main([f"--out_dir={tmp_path / 'o'}", "--start=abc", "--max_new_tokens=2"])
    assert asked == [DEFAULTS["device"]] and capsys.readouterr().out.startswith("abc")


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))  # every registry entry, a fork's too
def test_checkpoint_moves_between_devices(device, tmp_path, optimizer):
    """2 iterations on device, 2 more resumed on the CPU, 2 more back on device: the same losses
    as 6 straight on device (a constant LR after warmup: the schedule depends on max_iters). float32
    (TF32 on CUDA; Muon runs in bf16 there and in float32 on the CPU), so on CUDA to 1e-2 relative;
    on the CPU exactly (1e-6)."""
    ds = make_dataset(tmp_path / "ds")
    common = ["--eval_interval=2", "--dtype=float32", "--lr_schedule=constant", f"--optimizer={optimizer}",
              "--gradient_accumulation_steps=2"]
    run(tiny_args(ds, tmp_path / "a", "--max_iters=6", f"--device={device.type}", *common))
    for iters, dev in ((2, device.type), (4, "cpu"), (6, device.type)):
        init = "--init_from=resume" if iters > 2 else "--init_from=scratch"
        run(tiny_args(ds, tmp_path / "b", f"--max_iters={iters}", f"--device={dev}", init, *common))
    straight, moved = read_log(tmp_path / "a"), read_log(tmp_path / "b")
    resumed = {r["iter"]: r["changed"] for r in moved if r["kind"] == "resume"}  # each resume's changes, recorded
    assert [c["max_iters"] for c in resumed.values()] == [[2, 4], [4, 6]]
    assert ("device" in resumed[2]) == (device.type != "cpu") == ("device" in resumed[4])
    moved = [r for r in moved if r["kind"] != "resume"]
    assert [(r["kind"], r["iter"]) for r in moved] == [(r["kind"], r["iter"]) for r in straight]
    tol = 1e-6 if device.type == "cpu" else 1e-2
    for a, b in zip(straight, moved):
        for key in {"loss", "val_loss"} & a.keys():
            assert b[key] == pytest.approx(a[key], rel=tol), (a, b)
    assert os.path.exists(tmp_path / "b" / "ckpt.pt")
