"""--hf_model: a Hugging Face Llama or Qwen3 folder loaded into our GPT gives transformers' logits,
with the scale-vector switches on top (plumbing/hf_folder.py)."""

import json
import re
import shutil
import os
import pickle

import numpy as np
import pytest
import torch

from configurator import DEFAULTS, UserError
from model import BASELINE, GPT, model_config
from test_export import needs_transformers
from test_train import make_dataset, read_log, run, tiny_args
import plumbing.hf_folder as folder_io

# 4 query heads of 12 over 2 key/value heads on a width of 32 (grouped, and heads wider than 32 / 4)
SHAPE = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=12, rms_norm_eps=1e-6, max_position_embeddings=64)


WORDS = ("the king and queen of a castle spoke to their people about bread, wine and war; "
         "Tom saw 12 ships at sea! Why? Because the wind was strong.").split()


def corpus_text(seed, n_words=400):
    rng = np.random.default_rng(seed)
    return " ".join(rng.choice(WORDS, n_words))


def tokenizer_json(path):
    """A byte-level BPE tokenizer trained on corpus_text, with <|endoftext|>, saved as path/tokenizer.json
    with a tokenizer_config.json naming its eos_token (as a model folder holds them); returns its size."""
    pytest.importorskip("tokenizers", reason="optional extra: pip install -e '.[export]'")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([corpus_text(s) for s in range(20)], trainer)
    os.makedirs(path, exist_ok=True)
    tok.save(os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>"}, f)
    return tok.get_vocab_size()


def hf_folder(path, arch="llama", tied=False, tokenizer=False, **extra):
    """A random-init transformers model saved to path, its weights (RMSNorm gammas too) drawn large
    enough that a misplaced gamma or head moves the logits far beyond float32 rounding; with
    tokenizer=True also its own tokenizer (tokenizer_json), the vocabulary its size."""
    needs_transformers()
    import transformers
    config_cls, model_cls = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
                             "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM)}[arch]
    shape = dict(SHAPE, vocab_size=tokenizer_json(path)) if tokenizer else SHAPE
    model = model_cls(config_cls(**shape, tie_word_embeddings=tied, **extra)).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # RMSNorm gammas: far from 1, some negative
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5 + 1.0)
            else:
                p.normal_(0.0, 0.2, generator=gen)
    model.save_pretrained(path)
    return str(path), model


def ours(folder, **switches):
    cfg = folder_io.merged_config({**DEFAULTS, "hf_model": folder, "n_experts": 0}, set())
    model = GPT(model_config({**cfg, **switches})).eval()
    return model, folder_io.load(model, folder_io.FolderWeights(folder))[0]


def assert_same_logits(model, hf):
    idx = torch.randint(0, SHAPE["vocab_size"], (2, 24), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        theirs, mine = hf(idx).logits, model(idx, idx)[0]  # with targets: every position
    assert theirs.abs().max() > 1.0  # large enough for the comparison to mean something
    torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-4 * theirs.abs().max().item())


EXACT = {  # switches that only add or reparameterize scale vectors: the loaded function is the checkpoint's
    "baseline": BASELINE,
    "hg-or": dict(BASELINE, branch_scales=True, reparam="or"),
    "hg-dp-er": dict(BASELINE, branch_scales=True, reparam="er", attn_placement="dual", mlp_placement="dual",
                     dual_sites="all"),
    "or-shared": dict(BASELINE, reparam="or"),
    "no-scales": dict(BASELINE, scale="none"),
}


# scale="none" has nowhere to put a tied final-norm gamma or a QK-norm gamma (the notes test covers that)
CASES = [(arch, tied, name) for arch in ("llama", "qwen3") for tied in (False, True) for name in EXACT
         if not (EXACT[name].get("scale") == "none" and (tied or arch == "qwen3"))]


@pytest.mark.parametrize("arch, tied, switches", CASES, ids=[f"{a}-{'tied' if t else 'untied'}-{n}" for a, t, n in CASES])
def test_a_loaded_folder_gives_transformers_logits_under_every_exact_switch(tmp_path, arch, tied, switches):
    folder, hf = hf_folder(tmp_path / "hf", arch, tied)
    switch = EXACT[switches]
    model, notes = ours(folder, **switch)
    assert notes == []
    assert (model.config.n_kv_head, model.config.head_dim, model.config.qk_norm) == (2, 12, arch == "qwen3")
    assert_same_logits(model, hf)


def test_or_and_er_reproduce_a_loaded_gamma_exactly():
    from norms import ERScale, ORScale
    gamma = torch.tensor([0.5, -1.25, 2.0, 0.75])
    for cls in (ORScale, ERScale):
        s = cls(4, "input")
        s.set_(gamma)
        torch.testing.assert_close(s(), gamma, rtol=1e-6, atol=0)


def test_what_the_checkpoint_never_had_is_said_and_measured(tmp_path):
    """DNP (the default run's MLP), in_norm and output norms add normalizations: one note each, and
    the logits are no longer transformers'; scale="none" cannot hold a tied final-norm or a QK-norm
    gamma: one note."""
    folder, hf = hf_folder(tmp_path / "hf")
    for switches, words in ((dict(mlp_placement="dual_norm", branch_scales=True, reparam="or"),
                             "mlp_placement='dual_norm' normalizes over d_ff"),
                            (dict(BASELINE, mlp_placement="in_norm"), "mlp_placement='in_norm'"),
                            (dict(BASELINE, output_norms=True), "output_norms=True adds normalizations")):
        model, notes = ours(folder, **switches)
        assert len(notes) == 1 and words in notes[0]
        idx = torch.randint(0, 96, (1, 8), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            assert not torch.allclose(model(idx, idx)[0], hf(idx).logits, atol=1e-3)
    for arch, tied, words in (("llama", True, "scale='none' with a tied head has no final-norm gamma"),
                              ("qwen3", False, "scale='none' has no QK-norm gamma")):
        folder, _ = hf_folder(tmp_path / f"{arch}-{tied}", arch, tied)
        _, notes = ours(folder, **dict(BASELINE, scale="none"))
        assert len(notes) == 1 and words in notes[0]


@pytest.mark.parametrize("edit, words", [
    ({"architectures": ["GemmaForCausalLM"]}, r"architectures=\['GemmaForCausalLM'\] is not one this model computes"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}}, "rope_parameters=.*yarn"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling=.*linear"),  # beside rope_parameters
    ({"num_attention_heads": None}, "config.json lacks 'num_attention_heads'"),
    ({"attention_bias": True}, "attention_bias=True is not computed here"),
    ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
])
def test_what_the_model_cannot_compute_is_refused_naming_the_field(tmp_path, edit, words):
    folder, _ = hf_folder(tmp_path / "hf")
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        config = json.load(f)
    with open(path, "w") as f:
        json.dump({k: v for k, v in {**config, **edit}.items() if v is not None}, f)  # None: the key removed
    with pytest.raises(UserError, match=words) as e:
        folder_io.model_keys(folder)
    assert "\n" not in str(e.value)


def test_bad_folders_and_a_shape_the_command_line_contradicts_are_one_line(tmp_path):
    with pytest.raises(UserError, match="no config.json there"):
        folder_io.model_keys(str(tmp_path))
    folder, _ = hf_folder(tmp_path / "hf")
    with pytest.raises(UserError, match="--n_layer=4 but .*config.json gives 2: drop --n_layer"):
        folder_io.merged_config({**DEFAULTS, "hf_model": folder}, {"n_layer"})
    assert folder_io.merged_config({**DEFAULTS, "hf_model": folder, "n_layer": 2}, {"n_layer"})["n_layer"] == 2
    os.remove(os.path.join(folder, "model.safetensors"))
    with pytest.raises(UserError, match="no model.safetensors"):
        ours(folder)
    ds = make_dataset(tmp_path / "ds", vocab=96)
    with pytest.raises(UserError, match="no model.safetensors"):  # said before out_dir is made
        run(["--block_size=16", f"--dataset={ds}", f"--out_dir={tmp_path / 'o'}", f"--hf_model={folder}"])
    assert not (tmp_path / "o").exists()


def test_a_model_continues_on_text_in_its_own_tokenizer_then_samples_and_exports_it(tmp_path, capsys):
    """The whole path of a Hugging Face model: its tokenizer encodes a corpus (prepare.py
    --tokenizer), train.py --hf_model continues it (HG + OR on top: no note; the loss falls) and
    resumes from its own checkpoint, sample.py decodes with that tokenizer, export.py writes it back
    and transformers' tokenizer and model agree with ours; data in another vocabulary is refused."""
    import sample
    from test_corpus import corpus
    from tools import export
    folder, hf = hf_folder(tmp_path / "hf", "qwen3", tokenizer=True)
    (tmp_path / "docs").mkdir()
    for i in range(12):
        (tmp_path / "docs" / f"{i:02d}.txt").write_text(corpus_text(100 + i))
    corpus.main([str(tmp_path / "docs"), f"--out={tmp_path / 'ds'}", f"--tokenizer={folder}", "--val_docs=2",
                 "--workers=1"])
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    with open(tmp_path / "ds" / "meta.pkl", "rb") as f:
        meta = pickle.load(f)
    assert meta["dtype"] == "uint16" and meta["vocab_size"] == tok.get_vocab_size() and meta["eos_token"] == \
        "<|endoftext|>"
    train_ids = np.fromfile(tmp_path / "ds" / "train.bin", dtype=np.uint16).tolist()
    eos = tok.token_to_id("<|endoftext|>")
    assert train_ids.count(eos) == 10 and train_ids[-1] == eos

    args = ["--block_size=16", "--batch_size=4", "--eval_iters=2", "--sample_tokens=0", "--warmup_iters=2",
            f"--dataset={tmp_path / 'ds'}", f"--out_dir={tmp_path / 'o'}", f"--hf_model={folder}", "--max_iters=4",
            "--eval_interval=2", *(f"--{k}={v}" for k, v in EXACT["hg-or"].items()), "--scale_wd=iwd"]
    run(args)
    out = capsys.readouterr().out
    assert f"loaded {folder}" in out and "moved" not in out  # HG + OR on top: the same function
    ckpt = torch.load(tmp_path / "o" / "ckpt.pt", weights_only=True)
    assert {k: ckpt["config"][k] for k in ("n_head", "n_kv_head", "head_dim", "qk_norm")} == \
        {"n_head": 4, "n_kv_head": 2, "head_dim": 12, "qk_norm": True}
    evals = [r for r in read_log(tmp_path / "o") if r["kind"] == "eval"]
    assert evals[-1]["val_loss"] < evals[0]["val_loss"]
    run(["--init_from=resume", f"--out_dir={tmp_path / 'o'}", "--max_iters=6"])
    assert f"loaded {folder}" not in capsys.readouterr().out  # a resume reads its own checkpoint

    sample.main([f"--out_dir={tmp_path / 'o'}", "--start=the king", "--max_new_tokens=8", "--top_k=1"])
    text = capsys.readouterr().out
    assert text.startswith("the king")  # decoded by the tokenizer (a random model's bytes may not be UTF-8)
    export.main([f"--out_dir={tmp_path / 'o'}"])  # its own logit check: transformers reloads it equal
    with open(os.path.join(folder, "tokenizer.json")) as f, open(tmp_path / "o" / "hf" / "tokenizer.json") as g:
        assert f.read() == g.read()
    assert f"- Started from: the Hugging Face model `{folder}`" in (tmp_path / "o" / "hf" / "README.md").read_text()
    from transformers import AutoTokenizer
    theirs = AutoTokenizer.from_pretrained(str(tmp_path / "o" / "hf"))
    assert theirs("the king spoke", add_special_tokens=False).input_ids == tok.encode("the king spoke").ids
    assert theirs.eos_token_id == eos
    with open(tmp_path / "o" / "hf" / "config.json") as f:
        assert json.load(f)["bos_token_id"] == eos  # the tokenizer names no BOS of its own: GPT-2's convention

    chars = make_dataset(tmp_path / "chars", vocab=80)  # another size too: still the tokenizer's line, first
    with pytest.raises(UserError, match="is encoded with a character vocabulary, not .*'s tokenizer: prepare it"):
        run([a for a in args if not a.startswith(("--dataset=", "--out_dir="))] +
            [f"--dataset={chars}", f"--out_dir={tmp_path / 'c'}"])


def test_prepare_writes_uint32_where_the_model_has_more_ids_than_uint16_holds(tmp_path):
    """A model folder whose config.json has 70,000 outputs (a head padded past its tokenizer, as
    Qwen3's): meta.pkl's vocab_size is the model's, the files uint32, and train.py reads them."""
    from test_corpus import corpus
    tokenizer_json(tmp_path / "big")
    with open(tmp_path / "big" / "config.json", "w") as f:
        json.dump({"vocab_size": 70_000}, f)
    (tmp_path / "docs").mkdir()
    for i in range(4):
        (tmp_path / "docs" / f"{i}.txt").write_text(corpus_text(i))
    corpus.main([str(tmp_path / "docs"), f"--out={tmp_path / 'ds'}", f"--tokenizer={tmp_path / 'big'}",
                 "--val_docs=1", "--workers=1"])
    with open(tmp_path / "ds" / "meta.pkl", "rb") as f:
        meta = pickle.load(f)
    assert (meta["vocab_size"], meta["dtype"]) == (70_000, "uint32")
    from tokenizers import Tokenizer
    first = Tokenizer.from_file(str(tmp_path / "big" / "tokenizer.json")).encode(corpus_text(0)).ids
    assert np.fromfile(tmp_path / "ds" / "train.bin", dtype=np.uint32)[:len(first)].tolist() == first
    run(tiny_args(str(tmp_path / "ds"), tmp_path / "o", "--max_iters=1", "--eval_interval=1"))
    with pytest.raises(SystemExit, match="has no token '<eos>' to end each document with: name one with --eos_token"):
        corpus.main([str(tmp_path / "docs"), f"--out={tmp_path / 'x'}", f"--tokenizer={tmp_path / 'big'}",
                     "--eos_token=<eos>"])


def test_a_fork_scale_without_set_is_one_line(tmp_path, monkeypatch):
    import norms
    from test_forks import SoftplusScale
    monkeypatch.setitem(norms.SCALE_CLASSES, "softplus", SoftplusScale)
    folder, _ = hf_folder(tmp_path / "hf")
    with pytest.raises(UserError, match="--hf_model: SoftplusScale cannot start from a loaded gamma: give it a set_"):
        ours(folder, **dict(BASELINE, reparam="softplus"))


def test_data_in_another_tokenizer_of_the_same_size_is_refused_and_leaves_no_folder(tmp_path):
    """Token files prepared with another tokenizer whose vocabulary has the model's size: train.py
    --hf_model refuses them in one line before it makes out_dir; a shape the command line
    contradicts is refused the same way."""
    from test_corpus import corpus
    folder, _ = hf_folder(tmp_path / "hf", tokenizer=True)
    other = tmp_path / "other"
    tokenizer_json(other)
    with open(other / "tokenizer.json") as f:
        tok = json.load(f)
    vocab = tok["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[-2:]  # the same tokens, two ids swapped: another tokenizer
    vocab[a], vocab[b] = vocab[b], vocab[a]
    with open(other / "tokenizer.json", "w") as f:
        json.dump(tok, f)
    (tmp_path / "docs").mkdir()
    for i in range(4):
        (tmp_path / "docs" / f"{i}.txt").write_text(corpus_text(i))
    corpus.main([str(tmp_path / "docs"), f"--out={tmp_path / 'ds'}", f"--tokenizer={other}", "--val_docs=1",
                 "--workers=1"])
    args = ["--block_size=16", "--batch_size=4", f"--dataset={tmp_path / 'ds'}", f"--out_dir={tmp_path / 'o'}",
            f"--hf_model={folder}", "--max_iters=1"]
    with pytest.raises(UserError, match="is encoded with another tokenizer than .*'s \\(their vocabularies differ\\)"):
        run(args)
    with pytest.raises(UserError, match="--n_embd=48 but .*config.json gives 32"):
        run(args + ["--n_embd=48"])
    assert not (tmp_path / "o").exists()


# -----------------------------------------------------------------------------
# A folder is what transformers makes of it, or one line


def edit_weights(folder, change):
    """Rewrite folder/model.safetensors as change(tensors) returns it (metadata kept as save_pretrained's)."""
    from safetensors.torch import load_file, save_file
    path = os.path.join(folder, "model.safetensors")
    save_file(change(load_file(path)), path, metadata={"format": "pt"})


def edit_config(folder, **fields):
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        config = json.load(f)
    with open(path, "w") as f:
        json.dump({**config, **fields}, f)


def start_args(tmp_path, folder, *extra):
    ds = tmp_path / "ds"
    if not ds.exists():  # token files of the model's vocabulary, named by no tokenizer
        make_dataset(ds, vocab=SHAPE["vocab_size"])
        with open(ds / "meta.pkl", "wb") as f:
            pickle.dump({"vocab_size": SHAPE["vocab_size"]}, f)
    return ["--block_size=16", "--batch_size=2", "--eval_iters=1", "--sample_tokens=0", "--warmup_iters=1",
            "--max_iters=1", f"--dataset={ds}", f"--out_dir={tmp_path / 'o'}", f"--hf_model={folder}",
            *(f"--{k}={v}" for k, v in BASELINE.items()), *extra]


def refused(args, words):
    """train.py on args: one line matching words, and no out_dir made."""
    with pytest.raises(UserError, match=words) as e:
        run(args)
    assert "\n" not in str(e.value)
    out = [a.split("=", 1)[1] for a in args if a.startswith("--out_dir=")][0]
    assert not os.path.exists(out)


def fp8(tensors):
    """The matrices as float8_e4m3fn codes with a per-matrix weight_scale_inv, as FP8 checkpoints store them."""
    out = {}
    for name, t in tensors.items():
        if t.dim() == 2 and "layers" in name:
            scale = t.abs().max() / 448.0
            out[name], out[name + "_scale_inv"] = (t / scale).to(torch.float8_e4m3fn), scale.reshape(1, 1)
        else:
            out[name] = t
    return out


def test_quantized_or_integer_coded_weights_are_refused_naming_the_field_or_the_tensor(tmp_path):
    """An FP8 folder (codes, their weight_scale_inv and a quantization_config) is refused by its
    config field; codes without the field by the first such tensor, as an int8 tensor is: never
    cast to float and trained as a wrong function."""
    folder, _ = hf_folder(tmp_path / "hf", "qwen3")
    edit_weights(folder, fp8)
    edit_config(folder, quantization_config={"quant_method": "fp8", "weight_block_size": [128, 128]})
    refused(start_args(tmp_path, folder), r"quantization_config \(quant_method='fp8'\) says its weights are "
                                          r"quantized.*model.dequantize\(\)")
    edit_config(folder, quantization_config=None)
    refused(start_args(tmp_path, folder), r"model.layers.0.(mlp|self_attn).\w+.weight is stored as F8_E4M3, not as a float")
    folder, _ = hf_folder(tmp_path / "int8")
    edit_weights(folder, lambda w: {**w, "model.layers.1.mlp.up_proj.weight":
                                    w["model.layers.1.mlp.up_proj.weight"].to(torch.int8)})
    refused(start_args(tmp_path, folder), "model.layers.1.mlp.up_proj.weight is stored as I8")


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_a_tied_config_with_a_distinct_stored_head_loads_untied_as_transformers_does(tmp_path, capsys, arch):
    """transformers loads a stored lm_head.weight that differs from the embedding, untied, whatever
    tie_word_embeddings says: so does --hf_model (said at start, tie_embeddings=False in the
    checkpoint, the final-norm scale input-role); a stored head equal to the embedding stays tied."""
    folder, _ = hf_folder(tmp_path / "hf", arch, tied=True)  # (skips without transformers)
    import transformers
    gen = torch.Generator().manual_seed(7)
    edit_weights(folder, lambda w: {**w, "lm_head.weight": torch.randn(w["model.embed_tokens.weight"].shape,
                                                                       generator=gen)})
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    model, notes = ours(folder, **BASELINE)
    assert not model.config.tie_embeddings and notes == []
    assert_same_logits(model, hf)
    assert model.norm_f.scale.role == "input"
    run(start_args(tmp_path, folder))
    out = capsys.readouterr().out
    assert "config.json ties the head to the embedding, but the folder stores a distinct lm_head.weight" in out
    assert "not read" not in out
    assert torch.load(tmp_path / "o" / "ckpt.pt", weights_only=True)["config"]["tie_embeddings"] is False
    edit_weights(folder, lambda w: {**w, "lm_head.weight": w["model.embed_tokens.weight"].clone()})
    model, _ = ours(folder, **BASELINE)
    assert model.config.tie_embeddings


@pytest.mark.parametrize("damage, words", [
    (dict(config={"rms_norm_eps": "abc"}), r"config.json: rms_norm_eps='abc' is not a positive number"),
    (dict(config={"rms_norm_eps": None}), r"config.json: rms_norm_eps=None is not a positive number"),
    (dict(config={"num_hidden_layers": "2"}), r"num_hidden_layers='2' is not a positive int"),
    (dict(config={"tie_word_embeddings": "yes"}), r"tie_word_embeddings='yes' is not true or false"),
    (dict(config={"rope_parameters": {"rope_type": "default", "rope_theta": "1e4"}}), "rope_theta='1e4' is not a "),
    (dict(config_text="[1, 2]"), r"config.json holds a JSON list, not the object"),
    (dict(weights_bytes=lambda b: b[:len(b) // 2]), r"model.safetensors is damaged"),  # truncated
    (dict(weights_bytes=lambda b: b"\x00" * 64), r"model.safetensors is damaged"),  # junk
    (dict(weights_bytes=lambda b: b""), r"model.safetensors is damaged"),  # empty
    (dict(index="{not json"), r"model.safetensors.index.json is not a safetensors index"),
    (dict(index='{"metadata": {}}'), r"model.safetensors.index.json is not a safetensors index"),
    (dict(nan="model.layers.1.mlp.up_proj.weight"), r"the folder's tensor model.layers.1.mlp.up_proj.weight holds "
                                                    r"NaN or inf"),
])
def test_damaged_config_and_weight_files_are_one_line_naming_the_file(tmp_path, damage, words):
    folder, _ = hf_folder(tmp_path / "hf")
    path = os.path.join(folder, "model.safetensors")
    if "config" in damage:
        edit_config(folder, **damage["config"])
    if "config_text" in damage:
        with open(os.path.join(folder, "config.json"), "w") as f:
            f.write(damage["config_text"])
    if "weights_bytes" in damage:
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(damage["weights_bytes"](data))
    if "index" in damage:
        os.rename(path, os.path.join(folder, "model-00001-of-00001.safetensors"))
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
            f.write(damage["index"])
    if "nan" in damage:
        edit_weights(folder, lambda w: {**w, damage["nan"]: torch.full_like(w[damage["nan"]], float("nan"))})
    refused(start_args(tmp_path, folder), words)


def test_every_tensor_of_the_folder_is_read_or_named(tmp_path, capsys):
    folder, _ = hf_folder(tmp_path / "hf")
    edit_weights(folder, lambda w: {**w, "model.layers.0.self_attn.rotary_emb.inv_freq": torch.ones(6)})
    run(start_args(tmp_path, folder))
    assert "note: 1 tensors of the folder are not read (no part of this model or of transformers' model for its " \
           "config.json has them): model.layers.0.self_attn.rotary_emb.inv_freq" in capsys.readouterr().out


def test_the_start_compares_every_block_with_transformers_and_refuses_a_wrong_reading(tmp_path, capsys,
                                                                                      monkeypatch):
    """At start our reading of the folder (as the baseline) runs beside transformers' own, block by
    block: they agree on a faithful reading, and a reading that misplaces one tensor (gate and up
    swapped in block 1, as a bug in the map would) is refused naming that block; --hf_check=False
    skips the comparison (a folder already checked)."""
    folder, _ = hf_folder(tmp_path / "hf", "qwen3")
    run(start_args(tmp_path, folder))
    assert f"checked {folder} against transformers: every block and the logits agree" in capsys.readouterr().out
    real = folder_io.load_block

    def misread(b, i, cfg, take):
        swap = {"model.layers.1.mlp.gate_proj.weight": "model.layers.1.mlp.up_proj.weight",
                "model.layers.1.mlp.up_proj.weight": "model.layers.1.mlp.gate_proj.weight"}
        return real(b, i, cfg, lambda name, shape=None: take(swap.get(name, name), shape))

    monkeypatch.setattr(folder_io, "load_block", misread)
    shutil.rmtree(tmp_path / "o")
    refused(start_args(tmp_path, folder), r"our reading of the folder differs from transformers' at block 1 "
                                          r"\(.* of its largest value; tolerance 0.0001")
    run(start_args(tmp_path, folder, "--hf_check=False"))
    assert "checked" not in capsys.readouterr().out


@pytest.mark.parametrize("field, value, words", [
    ("num_hidden_layers", 10_000_000, "declares num_hidden_layers=10,000,000 but the weights hold blocks 0..1"),
    ("num_hidden_layers", 1, "declares num_hidden_layers=1 but the weights hold blocks 0..1"),
    ("vocab_size", 10**9, "declares vocab_size and hidden_size of (1000000000, 32), but model.embed_tokens.weight is"),
    ("num_attention_heads", 8, "declares num_attention_heads x head_dim and hidden_size of (96, 32), but "
                               "model.layers.0.self_attn.q_proj.weight is (48, 32)"),
    ("head_dim", 10**6, "declares num_attention_heads x head_dim and hidden_size of (4000000, 32)"),
    ("intermediate_size", 10**6, "declares intermediate_size and hidden_size of (1000000, 32)"),
])
def test_sizes_config_json_declares_are_checked_against_the_weights_before_anything_is_built(
        tmp_path, monkeypatch, field, value, words):
    """A config.json whose sizes are not its weights' (edited, or mixed from two downloads) is refused in
    one line from the files' headers: hf_check with 10,000,000 layers built blocks until memory ran out.
    The check reads headers only: no model is built (GPT is never called) before the refusal."""
    from tools import hf_check
    folder, _ = hf_folder(tmp_path / "hf", "qwen3")
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({**config, field: value}, f)
    built = []
    monkeypatch.setattr(folder_io, "GPT", lambda *a: built.append(a))
    with pytest.raises(UserError, match=re.escape(words)) as e:
        hf_check.main([folder, "--tokens=8"])
    assert "\n" not in str(e.value) and not built


@pytest.mark.parametrize("field", [f for f, kind in folder_io.CONFIG_FIELDS.items()
                                   if kind.rstrip("?") in ("count", "positive")])
def test_a_number_past_any_real_size_in_config_json_is_one_line(tmp_path, field):
    """Every count and number field of config.json at 10**400 (JSON holds any integer): one line naming
    the field, read before any size is computed from it (an OverflowError, or transformers' traceback,
    in hf_check before)."""
    folder, _ = hf_folder(tmp_path / "hf", "llama")
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({**config, field: 10**400}, f)
    with pytest.raises(UserError, match=rf"config.json: {field}=1000.*\.\.\. is not a positive") as e:
        folder_io.read_config(folder)
    assert "\n" not in str(e.value)


def test_hf_check_checks_a_folder_without_training_and_bad_input_is_one_line(tmp_path, capsys):
    from tools import hf_check
    folder, _ = hf_folder(tmp_path / "hf", "qwen3")
    assert hf_check.main([folder, "--tokens=8"]) == 0
    out = capsys.readouterr().out
    assert "2 blocks, width 32, 4 heads (2 key/value) of 12" in out and "agree to 0.0001 (2 blocks, 16 tokens)" in out
    for argv, words in (([str(tmp_path / "none")], "no such folder"),
                        ([os.path.join(folder, "config.json")], "is a file, not a folder"),
                        ([folder, "--tokens=0"], "--tokens=0: give a count from 1 to 65536"),
                        ([folder, "--tokens=100000000000"], "--tokens=100000000000: give a count")):
        with pytest.raises(UserError, match=words) as e:
            hf_check.main(argv)
        assert "\n" not in str(e.value)
