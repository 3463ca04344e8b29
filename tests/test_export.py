"""export.py: a folded checkpoint as a standard transformers model with the same logits and greedy text."""

import json
import os
import subprocess
import sys

import pytest
import torch

import export
from conftest import BASELINE, ROOT
from model import GPT, GPTConfig
from test_norms import randomize_scales
from test_train import make_dataset, run, tiny_args
from configurator import UserError


def needs_transformers():
    pytest.importorskip("transformers", reason="optional extra: pip install -r requirements-export.txt")
    pytest.importorskip("safetensors", reason="optional extra: pip install -r requirements-export.txt")


def tiny_model(**kw):
    """A 2-layer width-32 model with random non-unit scales and weights large enough that a
    misplaced gamma moves the logits far beyond float32 rounding."""
    base = dict(n_layer=2, n_head=2, n_embd=32, d_ff=48, block_size=32, vocab_size=50, **BASELINE)
    model = GPT(GPTConfig(**{**base, **kw}), seed=0).eval()
    gen = torch.Generator().manual_seed(3)
    randomize_scales(model, gen)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 1.0 if "router" in name else 0.2, generator=gen)
    return model


def load_hf(folder):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()


MOE = dict(n_experts=4, expert_d_ff=24)
HG_DP_OR = dict(branch_scales=True, attn_placement="dual", mlp_placement="dual", reparam="or")
EXPORTABLE = [  # (switches, architecture)
    (dict(), "LlamaForCausalLM"),
    (dict(tie_embeddings=False), "LlamaForCausalLM"),
    (HG_DP_OR, "LlamaForCausalLM"),
    (dict(HG_DP_OR, tie_embeddings=False), "LlamaForCausalLM"),
    (dict(reparam="er", attn_placement="dual"), "LlamaForCausalLM"),
    (dict(scale="none"), "LlamaForCausalLM"),
    (dict(HG_DP_OR, qk_norm=True), "Qwen3ForCausalLM"),
    (dict(MOE, **HG_DP_OR, top_k=2), "MixtralForCausalLM"),
    (dict(MOE, top_k=1, moe_every=2, qk_norm=True, reparam="er"), "Qwen3MoeForCausalLM"),
    (dict(MOE, top_k=2, qk_norm=True, branch_scales=True, tie_embeddings=False), "Qwen3MoeForCausalLM"),
    (dict(MOE, **HG_DP_OR, top_k=1, moe_every=2, shared_expert=True), "Qwen2MoeForCausalLM"),
]


def name(v):
    return "-".join(f"{k}={x}" for k, x in v.items()) or "baseline"


@pytest.mark.parametrize("switches,arch", EXPORTABLE, ids=[name(s) for s, _ in EXPORTABLE])
def test_export_matches_logits_and_greedy_tokens(tmp_path, switches, arch):
    needs_transformers()
    model = tiny_model(**switches)
    folder = str(tmp_path / "hf")
    export.export(model, folder)
    with open(os.path.join(folder, "config.json")) as f:
        assert json.load(f)["architectures"] == [arch]
    hf = load_hf(folder)
    assert type(hf).__name__ == arch
    idx = torch.randint(0, 50, (2, 32), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ours = model(idx, idx)[0]
        theirs = hf(idx).logits
    assert theirs.shape == (2, 32, 50)  # the real vocabulary: padding rows dropped
    assert ours.abs().max() > 1.0  # logits large enough for the comparison to mean something
    torch.testing.assert_close(theirs, ours, rtol=0, atol=1e-4 * ours.abs().max().item())
    prompt = idx[:1, :5]
    torch.manual_seed(0)
    ours_text = model.generate(prompt, 20, top_k=1)  # what sample.py --top_k=1 runs
    theirs_text = hf.generate(prompt, max_new_tokens=20, do_sample=False)
    assert theirs_text.tolist() == ours_text.tolist()
    # the user's model is left as it was
    torch.testing.assert_close(model(idx, idx)[0], ours, rtol=0, atol=0)


@pytest.mark.parametrize("tie", [True, False])
def test_tied_embeddings_stay_tied(tmp_path, tie):
    needs_transformers()
    from safetensors.torch import load_file
    model = tiny_model(tie_embeddings=tie, **HG_DP_OR)
    export.export(model, str(tmp_path / "hf"))
    weights = load_file(str(tmp_path / "hf" / "model.safetensors"))
    assert ("lm_head.weight" in weights) == (not tie)
    assert weights["model.embed_tokens.weight"].shape == (50, 32)
    if tie:  # the embedding is the user's, unfolded; the final-norm gamma is Llama's norm weight
        torch.testing.assert_close(weights["model.embed_tokens.weight"], model.wte.weight[:50])
        torch.testing.assert_close(weights["model.norm.weight"], model.norm_f.scale())


REFUSED = [  # (switches, words the one-line reason must hold)
    (dict(mlp_placement="dual_norm"), "mlp_placement='dual_norm'"),
    (dict(mlp_placement="in_norm"), "mlp_placement='in_norm'"),
    (dict(output_norms=True), "output_norms=True"),
    (dict(qk_norm=True, output_norms=True, branch_scales=True), "output_norms=True"),
    (dict(MOE, top_k=2, qk_norm=True, shared_expert=True), "shared_expert=True"),
    (dict(MOE, top_k=1), "top_k=1"),
    (dict(MOE, top_k=2, moe_every=2), "moe_every=2"),
]


@pytest.mark.parametrize("switches,words", REFUSED, ids=[name(s) for s, _ in REFUSED])
def test_refused_combination_names_the_switch_and_writes_nothing(tmp_path, switches, words):
    model = tiny_model(**switches)
    with pytest.raises(UserError, match=words) as err:
        export.export(model, str(tmp_path / "hf"))
    assert "\n" not in str(err.value)
    assert os.listdir(tmp_path) == []


def test_failed_check_writes_nothing(tmp_path, monkeypatch):
    needs_transformers()
    model = tiny_model(**HG_DP_OR)
    real = export.hf_state_dict

    def forgets_a_gamma(m):  # a plausible bug: the final-norm gamma left out of a tied export
        sd = real(m)
        sd["model.norm.weight"] = torch.ones_like(sd["model.norm.weight"])
        return sd

    monkeypatch.setattr(export, "hf_state_dict", forgets_a_gamma)
    with pytest.raises(UserError, match="differs from the checkpoint"):
        export.export(model, str(tmp_path / "hf"))
    assert os.listdir(tmp_path) == []


def test_existing_folder_is_not_overwritten(tmp_path):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "keep.txt").write_text("mine")
    with pytest.raises(UserError, match="already exists"):
        export.export(tiny_model(), str(tmp_path / "hf"))
    assert (tmp_path / "hf" / "keep.txt").read_text() == "mine"


def test_missing_transformers_gives_the_install_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # makes `import transformers` fail
    with pytest.raises(UserError, match="pip install -r requirements-export.txt"):
        export.export(tiny_model(), str(tmp_path / "hf"))
    assert os.listdir(tmp_path) == []


def test_core_never_imports_transformers():
    code = "import sys, train, model, norms, optim, sample; assert 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


def test_trained_checkpoint_exports_and_generates_what_sample_py_does(tmp_path, capsys):
    """The issue's done-when in miniature: train (OR, HG, DP), export, greedy text equal to sample.py's."""
    needs_transformers()
    import sample
    data = make_dataset(tmp_path / "ds")
    out = str(tmp_path / "out")
    run(tiny_args(data, out, "--max_iters=4", "--reparam=or", "--branch_scales=True",
                  "--attn_placement=dual", "--mlp_placement=dual", "--eval_interval=0"))
    export.main([f"--out_dir={out}"])
    folder = os.path.join(out, "hf")
    capsys.readouterr()
    sample.main([f"--out_dir={out}", "--start=abc", "--max_new_tokens=12", "--top_k=1"])
    ours = capsys.readouterr().out.split("\n---")[0]
    with open(os.path.join(folder, "char_vocab.json")) as f:
        itos = json.load(f)["itos"]
    ids = torch.tensor([[itos.index(c) for c in "abc"]])
    theirs = load_hf(folder).generate(ids, max_new_tokens=12, do_sample=False)[0]
    assert "".join(itos[i] for i in theirs.tolist()) == ours
