"""bench.py on a tiny model: every variant listed with a ratio to the baseline."""

import json
import re
from contextlib import nullcontext

import pytest

from configurator import UserError
from model import model_config
from tools import bench, variants


@pytest.mark.slow
def test_bench_prints_a_ratio_per_variant(capsys, tmp_path):
    bench.main(["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=16", "--batch_size=2",
                "--vocab_size=40", "--variants=baseline,unified,unified_moe", "--steps=2", "--warmup=1",
                "--memory=True", f"--json={tmp_path / 'b.json'}"])
    out = capsys.readouterr().out
    table = json.loads((tmp_path / "b.json").read_text())["variants"]  # the same numbers for scripts
    assert table["baseline"]["ratio"] == table["baseline"]["memory_ratio"] == table["baseline"]["per_flop"] == 1.0
    assert table["unified"]["ms_per_step"] / table["baseline"]["ms_per_step"] == pytest.approx(table["unified"]["ratio"])
    # the statistics' cost over the default eval_interval's 100 steps (one row, 100 record_steps), in (0, 1)
    u = table["unified"]
    assert u["mechanism_share"] == pytest.approx((u["mechanism_ms"] + 100 * u["mechanism_step_ms"]) /
                                                 (100 * u["ms_per_step"])) and 0 < u["mechanism_share"] < 1
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if line.split() and line.split()[0] in ("baseline", "unified", "unified_moe")}
    assert set(rows) == {"baseline", "unified", "unified_moe"}
    assert rows["baseline"][3] == "1.000" and float(rows["unified"][3]) > 0
    assert re.search(r"\(1\.000\)", " ".join(rows["baseline"]))  # memory ratio of the baseline to itself
    assert int(rows["unified_moe"][1].replace(",", "")) > int(rows["unified"][1].replace(",", ""))


def test_bench_rejects_zero_steps_and_unknown_variants():
    with pytest.raises(UserError, match=r"--steps=0 must be in \[1, 1e5\]"):
        bench.main(["--steps=0"])
    with pytest.raises(UserError, match="unknown variant 'fast'"):
        bench.main(["--variants=baseline,fast"])
    with pytest.raises(UserError, match="--saved=yes: expected True or False"):
        bench.main(["--saved=yes"])


def test_gpt2_reference_has_nanogpts_parameter_count_and_a_per_flop_column(capsys):
    """GPT2Reference against GPT-2's count: 12 d^2 + 13 d per layer, V d + T d embeddings, 2 d
    final LayerNorm; and the per-FLOP column of the first variant is 1 by construction."""
    from types import SimpleNamespace
    L, d, T, V = 2, 32, 16, 64
    cfg = SimpleNamespace(**{**bench.load_config([f"--n_layer={L}", "--n_head=2", f"--n_embd={d}",
                                                  f"--block_size={T}", f"--vocab_size={V}"])[0]})
    model = variants.GPT2Reference(model_config(cfg))
    assert model.num_params() == L * (12 * d * d + 13 * d) + V * d + T * d + 2 * d
    assert model.flops_per_token() == 6 * (model.num_params() - T * d) + 12 * L * d * T
    bench.main([f"--n_layer={L}", "--n_head=2", f"--n_embd={d}", f"--block_size={T}", "--batch_size=2",
                f"--vocab_size={V}", "--variants=gpt2,baseline", "--steps=2", "--warmup=1", "--memory=False"])
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()
            if line.split() and line.split()[0] in ("gpt2", "baseline")}
    assert rows["gpt2"][3] == "1.000" and rows["gpt2"][4] == "1.000" and float(rows["baseline"][4]) > 0


@pytest.mark.parametrize("grad_clip, clipped", [(1.0, 1), (0.0, 0)])
def test_the_bench_times_the_step_the_training_loop_takes(monkeypatch, grad_clip, clipped):
    """train_step's optimizer step is optim.optimizer_step, the function train.py's loop calls: the
    gradients clipped at grad_clip (0: not at all), every optimizer stepped, the gradients dropped."""
    from types import SimpleNamespace

    import torch

    import optim
    import train
    assert variants.optimizer_step is optim.optimizer_step is train.optimizer_step
    calls, real_clip = [], torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, norm: calls.append(norm) or real_clip(params, norm))
    cfg = SimpleNamespace(**{**bench.load_config(["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=16",
                                                  "--vocab_size=40", "--device=cpu"])[0]})
    model, step_model, opts = variants.build(cfg, "unified")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    x = torch.randint(0, 40, (2, 16))
    variants.train_step(model, step_model, opts, x, x, nullcontext(), grad_clip)
    assert calls == [grad_clip] * clipped
    assert all(p.grad is None for p in model.parameters())
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters())


def test_a_formulas_leg_runs_the_variant_with_every_fast_path_off(capsys, tmp_path):
    """NAME:formulas is the variant under --fused=False: its row's parameters are the variant's, its
    model carries no fast-path class, and a name that is no variant is refused as one."""
    from plumbing import fused
    cfg = variants.SimpleNamespace(**bench.load_config(["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=16",
                                                         "--vocab_size=200", "--device=cpu"])[0])
    fast, formulas = variants.build(cfg, "unified")[0], variants.build(cfg, "unified:formulas")[0]
    assert any(type(m) in fused.FAST for m in fast.modules()) and not any(type(m) in fused.FAST for m in formulas.modules())
    assert fast.num_params() == formulas.num_params()
    with pytest.raises(UserError, match="unknown variant 'fast:formulas'"):
        bench.main(["--variants=baseline,fast:formulas"])
