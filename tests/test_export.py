"""export.py: a folded checkpoint as a transformers model with the same logits, tokenizer ids and greedy text."""

import importlib.util
import json
import os
import signal
import pickle
import re
import resource
import subprocess
import sys

import numpy as np
import pytest
import torch

from tools import export
import sample
from conftest import BASELINE, ROOT, gpt2_bpe
from plumbing.dataset import make_codec
from model import GPT, GPTConfig
from test_norms import randomize_scales
from test_train import make_dataset, run, tiny_args
from configurator import UserError


def needs_transformers():
    pytest.importorskip("transformers", reason="optional extra: pip install -e '.[export]'")
    pytest.importorskip("safetensors", reason="optional extra: pip install -e '.[export]'")


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


def load_hf(folder, code=False):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, trust_remote_code=code).eval()


MOE = dict(n_experts=4, expert_d_ff=24)
GQA = dict(n_head=4, n_kv_head=2, head_dim=12)  # q: 4 x 12 = 48 wide on n_embd 32; k, v: 2 x 12
HG_DP_OR = dict(branch_scales=True, attn_placement="dual", mlp_placement="dual", reparam="or")
UNIFIED = dict(branch_scales=True, mlp_placement="dual_norm", reparam="or")  # the default run: HG + DNP + OR
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
    (UNIFIED, "ScalevecForCausalLM"),
    (dict(UNIFIED, tie_embeddings=False, attn_placement="dual", dual_sites="all"), "ScalevecForCausalLM"),
    (dict(mlp_placement="in_norm"), "ScalevecForCausalLM"),
    (dict(scale="none", mlp_placement="in_norm", output_norms=True), "ScalevecForCausalLM"),
    (dict(HG_DP_OR, output_norms=True), "ScalevecForCausalLM"),
    (dict(UNIFIED, reparam="er", qk_norm=True, output_norms=True, tie_embeddings=False), "ScalevecForCausalLM"),
    # grouped-query attention (4 query heads over 2 key/value heads) with heads wider than n_embd / n_head
    (dict(HG_DP_OR, **GQA), "LlamaForCausalLM"),
    (dict(HG_DP_OR, **GQA, qk_norm=True, tie_embeddings=False), "Qwen3ForCausalLM"),
    (dict(MOE, **HG_DP_OR, **GQA, top_k=2), "MixtralForCausalLM"),
    (dict(MOE, **HG_DP_OR, **GQA, top_k=1, moe_every=2, shared_expert=True), "Qwen2MoeForCausalLM"),
    (dict(UNIFIED, **GQA, attn_placement="dual", dual_sites="all", output_norms=True), "ScalevecForCausalLM"),
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
    code = arch == "ScalevecForCausalLM"  # only what no standard class holds ships code
    assert os.path.exists(os.path.join(folder, export.MODELING_FILE)) == code
    hf = load_hf(folder, code)
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


def test_dnp_exports_only_its_non_foldable_gamma(tmp_path):
    """DNP's gate gamma_a (output-role) is the shipped gate_norm weight; the up branch's (input-role) is folded."""
    needs_transformers()
    from safetensors.torch import load_file
    model = tiny_model(**UNIFIED)
    export.export(model, str(tmp_path / "hf"))
    weights = load_file(str(tmp_path / "hf" / "model.safetensors"))
    mlp = model.blocks[0].mlp
    torch.testing.assert_close(weights["model.layers.0.mlp.gate_norm.weight"], mlp.gate.out_scale().detach())
    assert not [k for k in weights if "up_norm" in k]


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


# --- the tokenizer: the project's codec as transformers files, on every target ---

CHARS = list("abcdefghijklmnopqrstuvwxyz \n\t.,'!?éü—日🍕ABCDEFGHIJK")  # 50: tiny_model's vocab_size
CHAR_META = {"vocab_size": 50, "itos": dict(enumerate(CHARS)), "stoi": {c: i for i, c in enumerate(CHARS)}}
TEXT = {  # mixed text per codec: code, unicode, runs of whitespace
    "char": "Abc  déf\n\n\t'x', y!? 🍕—日   ü\n",
    "bpe": "def f(x):\n\treturn x  **  2   # café 🍕 日本語\n\n\n   \t<|endoftext|>  it's    \r\n ok  ",
}
TARGETS = [  # one per architecture
    (HG_DP_OR, "LlamaForCausalLM"),
    (dict(HG_DP_OR, qk_norm=True), "Qwen3ForCausalLM"),
    (dict(MOE, **HG_DP_OR, top_k=2), "MixtralForCausalLM"),
    (dict(MOE, top_k=2, qk_norm=True), "Qwen3MoeForCausalLM"),
    (dict(MOE, top_k=2, shared_expert=True), "Qwen2MoeForCausalLM"),
    (UNIFIED, "ScalevecForCausalLM"),
]


def greedy_text(model, codec, prompt, n, eos=None):
    """The text `python sample.py --top_k=1` prints for prompt, cut before the first end-of-text
    token (transformers stops there and its pipeline leaves the special token out)."""
    encode, decode = codec
    start = encode(prompt)
    torch.manual_seed(0)
    ids = model.generate(torch.tensor([start]), n, top_k=1)[0].tolist()
    new = ids[len(start):]
    return decode(start + (new[:new.index(eos)] if eos in new else new))


@pytest.mark.parametrize("kind", ["char", "bpe"])
@pytest.mark.parametrize("switches,arch", TARGETS, ids=[a for _, a in TARGETS])
def test_autotokenizer_and_pipeline_match_the_project_codec(tmp_path, switches, arch, kind):
    needs_transformers()
    from transformers import AutoTokenizer, pipeline
    if kind == "char":
        model, meta = tiny_model(**switches), CHAR_META
    else:  # no meta.pkl and GPT-2's vocabulary size: sample.py reads GPT-2 BPE
        gpt2_bpe()
        model, meta = tiny_model(**switches, vocab_size=50257), None
    codec = make_codec(meta, model.config.vocab_size)
    folder = str(tmp_path / "hf")
    export.export(model, folder, meta)
    code = arch == "ScalevecForCausalLM"
    tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=code)
    ids = codec[0](TEXT[kind])
    assert tok(TEXT[kind])["input_ids"] == ids
    assert tok.decode(ids) == TEXT[kind]
    eos = None if kind == "char" else 50256  # <|endoftext|> in r50k_base
    assert tok.eos_token_id == eos
    with open(os.path.join(folder, "generation_config.json")) as f:
        assert json.load(f)["eos_token_id"] == eos
    generate = pipeline("text-generation", model=folder, trust_remote_code=code)
    assert type(generate.model).__name__ == arch
    prompt = "the cat sat" if kind == "char" else "The cat sat on"
    theirs = generate(prompt, max_new_tokens=12, do_sample=False)[0]["generated_text"]
    assert theirs == greedy_text(model, codec, prompt, 12, eos)


def test_gpt2_tokenizer_agrees_with_tiktoken_on_random_text():
    """Random strings of the pieces where regex dialects differ (whitespace before newlines, \\r\\n,
    apostrophes, digits, non-ASCII spaces) give tiktoken's ids."""
    needs_transformers()
    gpt2_bpe()
    from tokenizers import Tokenizer
    tok = Tokenizer.from_str(export.bpe_tokenizer_json("r50k_base"))
    encode, _ = make_codec(None, 50257)
    pieces = ["a", "Zb", "12", "345", " ", "  ", "\n", "\t", "\r\n", "'s", "'", "é", "🍕", "日", ".", "!!",
              "\u00a0", "\u2028", " \n", "<|endoftext|>"]
    rng = np.random.default_rng(0)
    for _ in range(300):
        text = "".join(rng.choice(pieces, rng.integers(1, 25)))
        assert tok.encode(text).ids == encode(text), repr(text)


# --- refusals and failures: one line, nothing written ---

REFUSED = [  # (switches, words the one-line reason must hold)
    (dict(MOE, top_k=2, qk_norm=True, mlp_placement="dual_norm"), "mlp_placement='dual_norm' with n_experts=4"),
    (dict(MOE, top_k=2, shared_expert=True, mlp_placement="in_norm"), "mlp_placement='in_norm'"),
    (dict(MOE, top_k=2, output_norms=True), "output_norms=True"),
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


@pytest.mark.parametrize("switches", [HG_DP_OR, UNIFIED], ids=["standard", "shipped-code"])
def test_failed_check_writes_nothing(tmp_path, monkeypatch, switches):
    needs_transformers()
    model = tiny_model(**switches)
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
    with pytest.raises(UserError, match=re.escape("pip install -e '.[export]'")):
        export.export(tiny_model(), str(tmp_path / "hf"))
    assert os.listdir(tmp_path) == []


def test_core_never_imports_transformers():
    code = "import sys, train, model, norms, optim, sample, tools.export; assert 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


# --- end to end: train, export, generate what sample.py prints ---

def sample_py(capsys, out, prompt, n):
    """What `python sample.py --top_k=1` prints (its first sample)."""
    capsys.readouterr()
    sample.main([f"--out_dir={out}", f"--start={prompt}", f"--max_new_tokens={n}", "--top_k=1"])
    return capsys.readouterr().out.split("\n---")[0]


def test_default_run_exports_with_its_card_and_generates_what_sample_py_does(tmp_path, capsys):
    """The issue's done-when in miniature: the default strategy (HG + DNP + OR) trained, exported
    with the shipped modeling file, generating sample.py's greedy text through pipeline()."""
    needs_transformers()
    from safetensors import safe_open
    from transformers import pipeline
    data = make_dataset(tmp_path / "ds")
    out = str(tmp_path / "out")
    run(tiny_args(data, out, "--max_iters=4", "--eval_interval=0"))
    export.main([f"--out_dir={out}"])
    folder = os.path.join(out, "hf")
    generate = pipeline("text-generation", model=folder, trust_remote_code=True)
    assert type(generate.model).__name__ == "ScalevecForCausalLM"
    theirs = generate("abc", max_new_tokens=12, do_sample=False)[0]["generated_text"]
    assert theirs == sample_py(capsys, out, "abc", 12)
    ckpt = torch.load(os.path.join(out, "ckpt.pt"), weights_only=True)
    with safe_open(os.path.join(folder, "model.safetensors"), "pt") as f:
        metadata = f.metadata()
    assert json.loads(metadata["scalevec_config"]) == ckpt["config"]
    assert json.loads(metadata["scalevec_training"])["tokens"] == ckpt["tokens"]
    with open(os.path.join(folder, "README.md")) as f:
        card = f.read()
    front = card.split("---\n")[1]
    assert "library_name: transformers\n" in front and "pipeline_tag: text-generation\n" in front
    assert f"{ckpt['tokens']:,} tokens" in card and f"{ckpt['val_loss']:.4f} nats/token" in card
    n_params = sum(p.numel() for p in generate.model.parameters())
    assert f"Parameters: {n_params:,}" in card


def test_trained_gpt2_bpe_checkpoint_exports_and_generates_what_sample_py_does(tmp_path, capsys):
    """A GPT-2 BPE run (no char vocabulary) exported to Llama: AutoTokenizer and pipeline with no extra step."""
    needs_transformers()
    gpt2_bpe()
    from transformers import pipeline
    data = tmp_path / "ds"
    data.mkdir()
    rng = np.random.default_rng(0)
    for split, n in (("train", 4000), ("val", 1000)):
        rng.integers(0, 50257, n).astype(np.uint16).tofile(data / f"{split}.bin")
    with open(data / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": 50257}, f)
    out = str(tmp_path / "out")
    run(tiny_args(str(data), out, "--max_iters=4", "--eval_interval=0", "--reparam=or",
                  "--attn_placement=dual", "--mlp_placement=dual"))
    export.main([f"--out_dir={out}"])
    generate = pipeline("text-generation", model=os.path.join(out, "hf"))
    assert type(generate.model).__name__ == "LlamaForCausalLM"
    prompt = "To be, or not"
    theirs = generate(prompt, max_new_tokens=8, do_sample=False)[0]["generated_text"]
    ours = sample_py(capsys, out, prompt, 8)
    assert theirs == ours.split("<|endoftext|>")[0]  # transformers stops at the end-of-text token


def test_bad_tol_is_refused_before_anything_is_read(tmp_path):
    for tol in ("-1", "0", "nan", "inf"):
        with pytest.raises(UserError, match=rf"--tol={tol}: need a finite number > 0"):
            export.main([f"--out_dir={tmp_path / 'none'}", f"--tol={tol}"])


def test_no_check_says_so_in_the_model_card(tmp_path):
    needs_transformers()
    export.export(tiny_model(), str(tmp_path / "hf"), check=False)
    card = (tmp_path / "hf" / "README.md").read_text()
    assert "logits not checked against the source model (--no_check)" in card and "nan" not in card


def test_sigterm_during_an_export_leaves_nothing(tmp_path, monkeypatch, capsys):
    """A scheduler's SIGTERM mid-export, under cli as the command runs: exit 143 through the cleanup,
    one 'terminated' line, no hidden partial folder."""
    from plumbing import common
    needs_transformers()
    data = make_dataset(tmp_path / "ds")
    out = tmp_path / "out"
    run(tiny_args(data, str(out), "--max_iters=1", "--eval_interval=0"))
    before = sorted(os.listdir(out))
    capsys.readouterr()
    monkeypatch.setattr(export, "max_logit_diff", lambda *a: os.kill(os.getpid(), signal.SIGTERM) or 0.0)
    monkeypatch.setattr(sys, "argv", ["export.py", f"--out_dir={out}"])
    handler = signal.signal(signal.SIGTERM, signal.SIG_DFL)  # (as a fresh process has it)
    try:
        with pytest.raises(SystemExit) as info:
            common.cli(export.main)
    finally:
        signal.signal(signal.SIGTERM, handler)
    err = capsys.readouterr().err
    assert info.value.code == 143 and err.startswith("terminated (SIGTERM)") and err.count("\n") == 1, err
    assert sorted(os.listdir(out)) == before


def test_a_home_this_user_cannot_write_is_named_as_hugging_faces_cache_not_the_export(tmp_path):
    """transformers keeps a model folder's code in its cache under HOME (export checks the folder it
    wrote by loading it): a HOME that is not a folder was a line blaming the export's folder. Now the
    line names the cache and HF_HOME, nothing is written, and HF_HOME set as it says lets the export run."""
    needs_transformers()
    out = tmp_path / "out"
    run(tiny_args(make_dataset(tmp_path / "ds"), str(out), "--max_iters=1", "--eval_interval=0"))
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HOME", "XDG_CACHE_HOME", "HF_MODULES_CACHE")}
    before = sorted(os.listdir(out))
    done = subprocess.run([sys.executable, "-m", "tools.export", f"--out_dir={out}"], capture_output=True, text=True,
                          cwd=ROOT, env={**env, "HOME": os.devnull}, timeout=300)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: Not a directory at {os.devnull}/.cache: Hugging Face's cache "
                                  f"({os.devnull}/.cache/huggingface,") and "export HF_HOME=" in done.stderr
    assert sorted(os.listdir(out)) == before  # no hf/, no hidden half-export
    done = subprocess.run([sys.executable, "-m", "tools.export", f"--out_dir={out}"], capture_output=True, text=True,
                          cwd=ROOT, env={**env, "HOME": os.devnull, "HF_HOME": str(tmp_path / "hf_home")}, timeout=300)
    assert done.returncode == 0 and (out / "hf" / "model.safetensors").exists(), done.stderr


def test_an_export_that_cannot_be_written_is_one_line_and_leaves_nothing(tmp_path):
    """export_dir under a file or in a folder no one can write: refused before anything is
    written. A disk that takes the first 8 KiB and no more (a file-size limit stands in for a full
    disk): one line naming the file, exit 1, no hidden folder left beside export_dir."""
    needs_transformers()
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(UserError, match=r"export_dir=.*a_file is a file, not a folder"):
        export.export(tiny_model(), str(tmp_path / "a_file" / "hf"))
    if os.path.isdir("/proc/self"):
        with pytest.raises(UserError, match=r"export_dir='/proc/self/hf': cannot write in /proc/self"):
            export.export(tiny_model(), "/proc/self/hf")
    data = make_dataset(tmp_path / "ds")
    out = tmp_path / "out"
    run(tiny_args(data, str(out), "--max_iters=1", "--eval_interval=0"))
    before = sorted(os.listdir(out))

    def small_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG)
        resource.setrlimit(resource.RLIMIT_FSIZE, (8 * 1024, resource.RLIM_INFINITY))

    done = subprocess.run([sys.executable, "-m", "tools.export", f"--out_dir={out}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, preexec_fn=small_disk)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert re.match(r"error: File too large writing model\.safetensors: nothing written to .*out/hf;", done.stderr)
    assert sorted(os.listdir(out)) == before


@pytest.mark.slow
@pytest.mark.parametrize("switches", [dict(HG_DP_OR, **GQA), dict(HG_DP_OR, qk_norm=True, head_dim=128)],
                         ids=["llama-gqa", "qwen3-hd128"])
def test_gguf_from_llama_cpps_converter_reads_back_whole(tmp_path, switches):
    """With LLAMA_CPP_DIR (llama.cpp's source: its converter and gguf-py; see tools/gguf_check.py):
    the converted file's metadata is the export's and transformers' GGUF loader gives its logits."""
    needs_transformers()
    llama_cpp = os.environ.get("LLAMA_CPP_DIR")
    if not llama_cpp or importlib.util.find_spec("gguf") is None:
        pytest.skip("set LLAMA_CPP_DIR to llama.cpp's source folder and pip install gguf sentencepiece accelerate "
                    "(docs/reference.md: GGUF)")
    gpt2_bpe()
    from tools import gguf_check
    model = tiny_model(**switches, vocab_size=50257)
    export.export(model, str(tmp_path / "hf"), meta={"vocab_size": 50257, "encoding": "r50k_base"})
    rows = gguf_check.check(str(tmp_path / "hf"), llama_cpp)
    assert all(ok for _, ok, _ in rows), rows
