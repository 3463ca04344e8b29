"""Files read from a download (a .parquet shard, a safetensors index, a tokenizer) are one line when cut,
empty or naming a path outside their folder; and lines that named the wrong cause now name the true one."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from test_corpus import bad, corpus  # noqa: F401 (corpus: the prepare script, loaded once)


@pytest.fixture
def shard(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet", reason="reading .parquet shards needs pyarrow: pip install pyarrow")
    import pyarrow
    path = tmp_path / "shard.parquet"
    pq.write_table(pyarrow.table({"text": [f"document {i} " * 20 for i in range(200)]}), path)
    return path


@pytest.mark.parametrize("cut", ["half", "empty", "footer"])
def test_a_cut_or_empty_parquet_shard_is_one_line(tmp_path, shard, cut):
    """A download of a shard stopped short was a 27-line pyarrow traceback."""
    data = shard.read_bytes()
    shard.write_bytes({"half": data[:len(data) // 2], "empty": b"", "footer": data[:-6]}[cut])
    bad([shard, f"--out={tmp_path / 'o'}"], r"shard\.parquet: not a whole \.parquet file .* a download cut short or "
                                            r"damaged; download it again")
    assert not (tmp_path / "o").exists()


def test_a_whole_parquet_shard_still_reads(tmp_path, shard):
    corpus.main([str(shard), f"--out={tmp_path / 'o'}", "--val_docs=5"])
    assert (tmp_path / "o" / "meta.pkl").is_file()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a folder of mode 000")
def test_an_input_folder_this_user_may_not_list_says_so(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("text\n")
    os.chmod(tmp_path / "in", 0)
    try:
        bad([tmp_path / "in", f"--out={tmp_path / 'o'}"], r"may not list the folder \(permission denied\)")
    finally:
        os.chmod(tmp_path / "in", 0o755)


def llama_folder(folder):
    """A 1-block Llama folder, saved by transformers (save_pretrained), with its index."""
    transformers = pytest.importorskip("transformers", reason="optional extra: pip install -e '.[export]'")
    import torch
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=False)
    transformers.LlamaForCausalLM(config).save_pretrained(folder, max_shard_size="20KB")
    assert (folder / "model.safetensors.index.json").is_file()
    return folder


@pytest.mark.parametrize("command", ["hf_check", "train"])
def test_an_index_naming_a_shard_outside_its_folder_is_refused_before_it_is_read(tmp_path, command):
    """weight_map: {name: "../base/model-00001-of-00002.safetensors"}: a downloaded folder led the program to
    read files outside it."""
    base = llama_folder(tmp_path / "base")
    hf = tmp_path / "hf"
    hf.mkdir()
    for name in ("config.json", "generation_config.json"):
        (hf / name).write_bytes((base / name).read_bytes())
    index = json.loads((base / "model.safetensors.index.json").read_text())
    index["weight_map"] = {k: f"../base/{v}" for k, v in index["weight_map"].items()}
    (hf / "model.safetensors.index.json").write_text(json.dumps(index))
    argv = ["-m", "tools.hf_check", str(hf)] if command == "hf_check" else \
        ["train.py", f"--hf_model={hf}", f"--out_dir={tmp_path / 'o'}", "--max_iters=1", "--dataset=shakespeare_char"]
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.splitlines()[-1].startswith("error: ") and "lies outside" in done.stderr, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1


@pytest.mark.parametrize("prompt", ["/dev/zero", "FOLDER"])
def test_a_prompt_file_that_is_a_device_or_a_folder_is_never_advised_moved(tmp_path, prompt):
    """`--start=FILE:/dev/zero` advised `mv /dev/zero /dev/zero.aside`: advice to move a device, or a
    folder the user named by mistake, is never given; the line says what it is and to name a file."""
    from configurator import UserError
    import sample
    path = str(tmp_path) if prompt == "FOLDER" else prompt
    with pytest.raises(UserError) as e:
        sample.prompt(f"FILE:{path}")
    assert "name a regular file" in str(e.value) and "mv " not in str(e.value), str(e.value)


def test_a_folder_named_ckpt_pt_is_moved_aside_never_removed_nor_read_as_sharded(tmp_path):
    """sample.py read a folder named ckpt.pt as a sharded checkpoint; train.py answered it with `rm -r`."""
    from test_train import make_dataset, tiny_args
    (tmp_path / "o" / "ckpt.pt").mkdir(parents=True)
    (tmp_path / "o" / "ckpt.pt" / "run.pt").write_bytes(b"")
    done = subprocess.run([sys.executable, "sample.py", f"--out_dir={tmp_path / 'o'}", "--device=cpu"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "ckpt.pt is a folder, not the checkpoint file train.py writes there: move it aside (mv " in done.stderr
    ds = make_dataset(tmp_path / "ds")
    done = subprocess.run([sys.executable, "train.py", *map(str, tiny_args(ds, tmp_path / "o", "--max_iters=1"))],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "rm " not in done.stderr and "move it aside (mv " in done.stderr, done.stderr
    assert (tmp_path / "o" / "ckpt.pt" / "run.pt").exists()


def test_a_checkpoints_edited_character_table_is_one_line_not_garbage(tmp_path):
    """meta.pkl is checked for stoi[itos[i]] == i; the checkpoint's copy, which sample.py decodes with, was not:
    two characters swapped in itos printed another text silently."""
    import torch
    from test_train import make_dataset, run, tiny_args
    ds = make_dataset(tmp_path / "ds", vocab=10)
    run(tiny_args(ds, tmp_path / "o", "--max_iters=1"))
    ckpt = torch.load(tmp_path / "o" / "ckpt.pt", weights_only=True)
    ckpt["meta"]["itos"][0], ckpt["meta"]["itos"][1] = "b", "a"
    torch.save(ckpt, tmp_path / "o" / "ckpt.pt")
    done = subprocess.run([sys.executable, "sample.py", f"--out_dir={tmp_path / 'o'}", "--start=ab", "--device=cpu",
                           "--max_new_tokens=3"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "the character table the model was trained with: its itos (10 entries) and stoi (10) are not one " \
        "vocabulary (stoi[itos[i]] must be i)" in done.stderr


@pytest.mark.parametrize("reader", ["config", "ablation"])
@pytest.mark.parametrize("name, said", [("fifo", "is not a file but a FIFO, a device or a socket"),
                                        ("/dev/zero", "is not a file but a FIFO, a device or a socket"),
                                        ("folder", "is a folder: name a"), ("missing.py", "not found")])
def test_a_config_or_ablation_file_that_is_a_fifo_a_device_or_a_folder_is_named_as_such(tmp_path, name, said, reader):
    """train.py's config files and research.sweep / plot's ablation files: one rule (configurator.not_a_file)."""
    from configurator import UserError, load_config
    from research.ablation import load_ablation
    path = name if name.startswith("/") else str(tmp_path / name)
    if name == "fifo":
        os.mkfifo(path)
    elif name == "folder":
        os.mkdir(path)
    with pytest.raises(UserError, match=said) as e:
        load_config([path]) if reader == "config" else load_ablation(path)
    assert (said == "not found") == ("not found" in str(e.value)) and "\n" not in str(e.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes a file of mode 000")
def test_a_lock_file_of_mode_000_is_named_not_the_out_dir(tmp_path):
    from configurator import UserError
    from plumbing.start import lock_out_dir
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / ".lock").write_text("")
    os.chmod(tmp_path / "o" / ".lock", 0)
    with pytest.raises(UserError, match=r"\.lock, the run's lock file, is not writable by this user \(mode 000\)"):
        lock_out_dir(str(tmp_path / "o"))


def test_a_missing_log_says_that_an_empty_one_resumes(tmp_path):
    """It read 'moved or removed while the command ran' (a cause that was not the one), with no way on."""
    from configurator import UserError
    from test_train import make_dataset, run, tiny_args
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=2"))
    os.remove(tmp_path / "o" / "log.jsonl")
    with pytest.raises(UserError, match=r"log.jsonl is missing \(the checkpoint at iteration 2 is there\): put the "
                                         r"run's log back, or resume with an empty one \(touch "):
        run(["--init_from=resume", f"--out_dir={tmp_path / 'o'}", "--max_iters=4"])
    (tmp_path / "o" / "log.jsonl").write_text("")
    assert run(["--init_from=resume", f"--out_dir={tmp_path / 'o'}", "--max_iters=4"])["stopped"] is None
