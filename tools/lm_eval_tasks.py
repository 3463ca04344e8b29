"""Evaluate an export with EleutherAI's lm-evaluation-harness, offline, on the run's held-out text.

    pip install -e '.[eval]'
    python -m tools.export --out_dir=out-x                        # out-x/hf
    python -m tools.lm_eval_tasks --out_dir=out-x                 # out-x/lm_eval: two tasks; prints the command
    lm_eval --model hf --model_args pretrained=out-x/hf,dtype=float32,... --include_path out-x/lm_eval \\
        --tasks scalevec_val,scalevec_next_line --device cpu --batch_size 8

Writes two lm-eval tasks whose data are local files made from the run's own
validation split (val.bin decoded with the checkpoint's tokenizer), so nothing
is downloaded:

  scalevec_val        held-out perplexity: loglikelihood_rolling over each
                      document (word and byte perplexity, bits per byte). Its
                      windows are lm-eval's: block_size tokens at a time, the
                      first conditioned on one prefix token.
  scalevec_next_line  multiple choice: after up to --context_lines lines of
                      held-out text (as many as fit the model's block_size with
                      the longest choice), pick the true next line among 4 (the
                      other 3 drawn from elsewhere in the split); chance is 0.25.

Documents: BPE data split at the end-of-text token; character data (no such
token) in chunks of about --doc_chars characters at line ends. A character
vocabulary has no BOS or EOS token, so the command passes lm-eval the newline's
id as the prefix token (prefix_token_id; for BPE data the end-of-text id,
which preceded each document in training); the text is the split's own, so
every character is in the vocabulary.

The command is printed only for an export that plumbing.hf_code's rule for every
reader of a folder allows (plumbing.hf_code.shipped_code): trust_remote_code=True
only when the folder's one piece of code is this project's own
modeling_scalevec.py, byte for byte, and its auto_map names nothing else;
else one line says why and how to make a new export. And only for an export that
is the checkpoint's (verify_export, with tools.hf_check's reading of the
folder): config.json's sizes its weights', its tokenizer and every tensor the
checkpoint's own; an export of an earlier iteration of the run is said in a note.
The tasks folder is one
this command made (its .lm_eval_tasks marker) or a new or empty one, never a
link, and no file it replaces is a link or has another hard link.
"""

import os
import shlex
import sys

if __package__ in (None, ""):  # run by its path (python tools/lm_eval_tasks.py): imports live at the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from plumbing import common  # noqa: E402 (from the repository root, the path above)

common.set_omp_env()  # before torch loads: idle OpenMP threads sleep instead of spinning

import argparse
import json

import numpy as np

from plumbing.checkpoint import atomic_write, checkpoint_in, load_checkpoint, saved_shapes
from plumbing.memory import check_buildable
from plumbing.common import cli
from configurator import UserError, folder_problem
from plumbing.dataset import codec_kind, dataset_dir, hf_tokenizer, make_codec

TASKS = ("scalevec_val", "scalevec_next_line")
FILES = tuple(f"{t}.{ext}" for t in TASKS for ext in ("jsonl", "yaml"))  # what this command writes (and replaces)
MARKER = ".lm_eval_tasks"  # in every tasks folder this command makes: only in such a folder does it replace files
MODULE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "modeling_scalevec.py")  # what an export ships


def held_out_docs(ckpt, max_docs, doc_chars):
    """(the validation split's documents as text, the id lm-eval conditions each document's first
    token on: the end-of-text token for BPE data, the newline for character data, the checkpoint's
    encode function). UserError when the split or its tokenizer is gone."""
    cfg, meta = ckpt["config"], ckpt.get("meta")
    vocab = ckpt["config"].get("vocab_size") or (meta or {}).get("vocab_size")
    codec = make_codec(meta, vocab)
    if codec is None:
        raise UserError("the checkpoint's data names no tokenizer (raw token ids): there is no text to evaluate on")
    folder = dataset_dir(cfg["dataset"])
    path = os.path.join(folder, "val.bin")
    if not os.path.isfile(path):
        raise UserError(f"{path} not found: the held-out text comes from the run's dataset ({cfg['dataset']})")
    ids = np.fromfile(path, dtype=(meta or {}).get("dtype", "uint16")).tolist()
    encode, decode = codec
    kind = codec_kind(meta, vocab)
    if kind == "char":
        lines, docs, doc = decode(ids).split("\n"), [], ""
        for line in lines:
            doc += line + "\n"
            if len(doc) >= doc_chars:
                docs.append(doc)
                doc = ""
        prefix = encode("\n")[0]
    else:
        eos = (hf_tokenizer(meta).token_to_id(meta.get("eos_token", "")) if kind == "hf"
               else encode("<|endoftext|>")[0])
        docs, start = [], 0
        for i, t in enumerate(ids + [eos]):
            if t == eos:
                if i > start:
                    docs.append(decode(ids[start:i]))
                start = i + 1
        prefix = eos  # what the model saw before each document in training
    docs = [d for d in docs if d.strip()][:max_docs]
    if not docs:
        raise UserError(f"{path} decodes to no documents")
    return docs, prefix, encode


def next_line_items(docs, n_items, context_lines, seed, fits=lambda text: True):
    """Multiple-choice items: {context, choices (4 lines), gold (the true next line's index)};
    distractors are lines from other places of the split, each unlike the true line. fits(text):
    whether a context plus a choice fits the model's context (the earliest context lines are
    dropped until it does; an item whose lines never fit is left out). A context is never only
    whitespace: lm-eval moves a context's trailing whitespace into the continuation, and an empty
    context is one it cannot score."""
    lines = [ln for d in docs for ln in d.split("\n")]
    usable = [i for i in range(1, len(lines)) if lines[i].strip()]
    pool = sorted({ln for ln in lines if ln.strip()})
    if len(usable) < 1 or len(pool) < 4:
        raise UserError("the held-out text has too few lines for the next-line task")
    rng = np.random.default_rng(seed)
    items = []
    for i in rng.choice(usable, size=min(n_items, len(usable)), replace=False):
        true = lines[i]
        others = [ln for ln in rng.choice(pool, size=min(len(pool), 12), replace=False) if ln != true][:3]
        if len(others) < 3:
            continue
        choices = others + [true]
        order = rng.permutation(4)
        choices = [choices[j] for j in order]
        longest = max(choices, key=len)
        for start in range(max(0, i - context_lines), i):
            context = "\n".join(lines[start:i]) + "\n"
            if context.strip() and fits(context + longest):
                items.append({"context": context, "choices": choices, "gold": int(np.where(order == 3)[0][0])})
                break
    return items


def check_export(export_dir, out_dir):
    """UserError (one line) unless the export is the checkpoint's, checked as tools.hf_check checks a folder
    (verify_export: its weights readable whole, config.json's sizes its weights', the tokenizer and
    every tensor the checkpoint's own); returns verify_export's note for an export of an earlier iteration, or
    None. The checkpoint's model is built for it (load_model, checked before it is built)."""
    files = sorted(f for f in os.listdir(export_dir) if f.endswith(".safetensors")) if os.path.isdir(export_dir) else []
    for name in files:  # a FIFO would block the printed command's read; a folder or device is no weights
        if not os.path.isfile(os.path.join(export_dir, name)):
            raise UserError(f"{os.path.join(export_dir, name)} is not a regular file: {export_anew(out_dir)}")
    from plumbing.checkpoint import load_model
    model, ckpt = load_model(checkpoint_in(out_dir))
    return verify_export(export_dir, model, ckpt, export_anew(out_dir))


def verify_export(export_dir, model, ckpt, fix):
    """Check the folder export_dir against the checkpoint it came from (model: load_model's, ckpt: its dict),
    as tools.hf_check checks a folder, plus what only the checkpoint knows; returns None, or one note when
    the folder is an export of an earlier iteration of the same run (the run went on since).

    Raises UserError, one line naming the file and ending in `fix` (the command that makes a new export),
    when: the weights are not readable whole (hf_folder.FolderWeights, hf_check's reader: a file cut short
    or empty, an index naming a file outside the folder, a quantized dtype); config.json's sizes are not
    its weights' (for a Llama or Qwen3 folder hf_folder.merged_config, hf_check's own check); a field of
    config.json is not the one tools.export writes for this checkpoint (hf_config: its blocks, width, heads,
    vocabulary, architecture); the tokenizer's files are not the ones tools.export writes for the checkpoint's
    meta.pkl (a foreign tokenizer.json); the weights' metadata names another run's config; or, for an
    export of the checkpoint's own iteration, a tensor differs from hf_state_dict(model) (weights changed
    in the folder after the export)."""
    import tempfile

    import torch

    from configurator import DEFAULTS
    from model import MODEL_KEYS
    from plumbing.common import read_json
    from plumbing.hf_folder import ARCHITECTURES, FolderWeights, merged_config
    from tools.export import architecture, hf_config, hf_state_dict, write_tokenizer

    def refuse(words):
        raise UserError(f"{words}: {fix}")
    try:
        weights = FolderWeights(export_dir)
        config = read_json(os.path.join(export_dir, "config.json"))
        if (config.get("architectures") or [None])[0] in ARCHITECTURES:  # what tools.hf_check reads
            merged_config({**DEFAULTS, "hf_model": export_dir, "n_experts": 0}, set())
    except UserError as e:
        refuse(str(e))
    cfg, arch = model.config, architecture(model.config)
    with tempfile.TemporaryDirectory() as tmp:
        bos, eos, _, _ = write_tokenizer(tmp, ckpt.get("meta"), cfg)
        for name in ("tokenizer.json", "tokenizer_config.json", "char_vocab.json"):
            ours, theirs = os.path.join(tmp, name), os.path.join(export_dir, name)
            if os.path.lexists(ours) != os.path.lexists(theirs) or \
                    os.path.lexists(ours) and read_json(ours) != read_json(theirs):
                refuse(f"{theirs} is not the tokenizer the checkpoint's data was encoded with "
                       f"({'missing' if os.path.lexists(ours) and not os.path.lexists(theirs) else 'another one'})")
    for key, value in hf_config(cfg, arch, eos, bos).items():
        if config.get(key) != value:
            refuse(f"{os.path.join(export_dir, 'config.json')} declares {key}={config.get(key)!r} where the "
                   f"checkpoint's model has {value!r} (the file was edited, or the folder mixed from two exports)")
    metadata = weights.handles[sorted(weights.handles)[0]].metadata() or {}
    try:
        theirs = json.loads(metadata["scalevec_config"])
    except (KeyError, ValueError):
        theirs = None
    # the run's identity: its model and its data (out_dir, max_iters and the like change on a copy or a resume)
    same = [k for k in (*sorted(MODEL_KEYS), "dataset") if type(theirs) is dict and theirs.get(k) == ckpt["config"].get(k)]
    if len(same) < len(MODEL_KEYS) + 1:
        refuse(f"{export_dir}'s weights are not an export of this run (their metadata holds "
               f"{'no run config' if type(theirs) is not dict else 'a run config of another model or data'})")
    exported = json.loads(metadata.get("scalevec_training", "{}")).get("iter")
    if exported is not None and exported != ckpt["iter"]:  # (None: an export that recorded no iteration)
        return (f"{export_dir} holds iteration {exported} of this run and the checkpoint is at {ckpt['iter']} "
                f"(the run went on since): to evaluate the checkpoint as it is now, {fix}")
    ours = hf_state_dict(model)
    if set(ours) != weights.names():
        name = sorted(set(ours) ^ weights.names())[0]
        refuse(f"{export_dir}'s weights {'lack' if name in ours else 'add'} {name}, which the export of the "
               f"checkpoint {'holds' if name in ours else 'does not hold'}")
    for name, tensor in ours.items():
        if not torch.equal(weights.get(name), tensor):
            refuse(f"{export_dir}'s {name} differs from the checkpoint's export at the same iteration "
                   f"({ckpt['iter']}): the weights were changed in the folder after the export" if exported is not None
                   else f"{export_dir}'s {name} differs from the checkpoint's export (the folder records no iteration: "
                        f"an export of another iteration, or weights changed after it)")
    return None


def export_anew(out_dir):
    """The fix for an export the printed command must not run on: a fresh one, and this command on it."""
    out = shlex.quote("--out_dir=" + out_dir)
    return (f"export the run anew, python -m tools.export {out} --export_dir=NEW, then python -m "
            f"tools.lm_eval_tasks {out} --export_dir=NEW")


def trusted(export_dir, out_dir):
    """Whether the lm_eval command may pass trust_remote_code=True for export_dir: the rule plumbing.hf_code
    holds every reader of a folder to, as shipped_code applies it to an export (True: the folder's
    only code is this project's modeling_scalevec.py, byte for byte; False: a standard model, no
    code). UserError (one line: why, and the command that makes a new export) otherwise, so no
    command is printed that would run a folder's code or read a folder through a link."""
    from plumbing.hf_code import shipped_code
    if any(c in export_dir for c in ",="):  # lm-eval splits --model_args at commas, then each at '='
        raise UserError(f"--export_dir={export_dir}: lm_eval reads pretrained= from --model_args, split at ',' and "
                        f"'=', so the path can hold neither: {export_anew(out_dir)}")
    try:
        trust = shipped_code(export_dir, MODULE)
        if not os.path.isfile(os.path.join(export_dir, "config.json")):
            raise UserError(f"{export_dir} holds no config.json: it is not an export (or one cut short)")
    except UserError as e:
        raise UserError(f"{e}: no lm_eval command is printed for it; {export_anew(out_dir)}") from None
    return trust


def tasks_dir_problem(tasks_dir):
    """Why this command must not write its tasks in tasks_dir, or None: it writes only in a folder of its
    own, missing, empty or holding MARKER (one it made), and only over its own files (no link, no
    file with another hard link: plumbing.hf_code.replace_problem), since it replaces them and deletes a
    stale one."""
    from plumbing.hf_code import replace_problem
    fix = "name another --tasks_dir, or remove it yourself"
    if os.path.islink(tasks_dir):
        return f"a symbolic link (to {os.readlink(tasks_dir)}): this command writes only in a folder of its own; {fix}"
    if not os.path.isdir(tasks_dir):
        return None  # missing (a file there: folder_problem says so)
    names, marker = sorted(os.listdir(tasks_dir)), os.path.join(tasks_dir, MARKER)
    if names and not (os.path.isfile(marker) and replace_problem(marker) is None):
        more = f" and {len(names) - 1} more" if len(names) > 1 else ""
        return f"holds {names[0]!r}{more}, which this command did not write (no {MARKER} marker) and would replace; {fix}"
    for name in (MARKER,) + FILES + tuple(f + ".tmp" for f in FILES):
        problem = replace_problem(os.path.join(tasks_dir, name))
        if problem:
            return f"{name} {problem}, and this command replaces only its own files; {fix}"
    return None


def write_jsonl(path, rows):
    with atomic_write(path, encoding="utf-8") as f:  # a kill leaves the old file or the new one, never a part
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def task_yaml(name, data, body):
    return (f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {json.dumps(data)}\n"
            f"test_split: test\n{body}metadata:\n  version: 1.0\n")


def write_tasks(out_dir, tasks_dir, max_docs=100, n_items=200, context_lines=3, doc_chars=2000, seed=0,
                export_dir=None):
    """The two tasks' data and YAML files in tasks_dir for the run in out_dir; returns the lm_eval
    command for its export (export_dir, default out_dir/hf), or None when there is no export yet
    (a note says what to run). UserError for a missing checkpoint, dataset or folder, a tasks_dir
    this command may not write in (tasks_dir_problem), and an export the command must not run on
    (trusted): nothing is written then."""
    problem = folder_problem(tasks_dir) or tasks_dir_problem(tasks_dir)
    if problem:
        raise UserError(f"--tasks_dir={tasks_dir}: {problem}")
    ckpt = load_checkpoint(checkpoint_in(out_dir))
    check_buildable(ckpt["config"], saved_shapes(ckpt), checkpoint_in(out_dir))  # its block_size and vocabulary shape the tasks
    export_flags = shlex.quote("--out_dir=" + out_dir) + (f" {shlex.quote('--export_dir=' + export_dir)}" if export_dir else "")
    export_dir = export_dir or os.path.join(out_dir, "hf")
    exported = os.path.lexists(export_dir)
    trust = exported and trusted(export_dir, out_dir)
    note = check_export(export_dir, out_dir) if exported else None
    docs, prefix, encode = held_out_docs(ckpt, max_docs, doc_chars)
    block = ckpt["config"]["block_size"]
    items = next_line_items(docs, n_items, context_lines, seed, fits=lambda text: len(encode(text)) < block)
    tasks = TASKS if items else TASKS[:1]
    if not items:
        print(f"note: no next-line item fits block_size={block} (a context line and the longest choice must "
              f"fit): scalevec_next_line is not written; scalevec_val is")
    os.makedirs(tasks_dir, exist_ok=True)
    if not os.path.lexists(os.path.join(tasks_dir, MARKER)):  # empty or new (tasks_dir_problem): made here
        with open(os.path.join(tasks_dir, MARKER), "x") as f:
            f.write(os.path.abspath(out_dir) + "\n")
    val, mc = (os.path.abspath(os.path.join(tasks_dir, f"{t}.jsonl")) for t in TASKS)
    for stale in ([] if items else [mc, os.path.join(tasks_dir, "scalevec_next_line.yaml")]):
        if os.path.exists(stale):  # an earlier call's task: the command must not pick it up
            os.remove(stale)
    write_jsonl(val, [{"text": d} for d in docs])
    with atomic_write(os.path.join(tasks_dir, "scalevec_val.yaml")) as f:
        f.write(task_yaml("scalevec_val", val, 'output_type: loglikelihood_rolling\ndoc_to_text: ""\n'
                          'doc_to_target: "{{text}}"\nmetric_list:\n'
                          + "".join(f"  - metric: {m}\n    aggregation: {a}\n    higher_is_better: false\n"
                                    for m, a in (("word_perplexity", "weighted_perplexity"),
                                                 ("byte_perplexity", "weighted_perplexity"),
                                                 ("bits_per_byte", "bits_per_byte")))))
    if items:
        write_jsonl(mc, items)
        with atomic_write(os.path.join(tasks_dir, "scalevec_next_line.yaml")) as f:
            f.write(task_yaml("scalevec_next_line", mc, 'output_type: multiple_choice\ndoc_to_text: "{{context}}"\n'
                              'doc_to_choice: "{{choices}}"\ndoc_to_target: "{{gold}}"\ntarget_delimiter: ""\n'
                              'metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n'))
    print(f"wrote {tasks_dir}: {len(docs)} held-out documents, {len(items)} next-line items")
    if not exported:
        print(f"note: no export in {export_dir} yet: python -m tools.export {export_flags} writes it; then run this "
              f"command again for the lm_eval command (printed once the export is checked)")
        return None
    if note:
        print(f"note: {note}")
    args = f"pretrained={export_dir},dtype=float32"
    if trust:  # the folder's only code is this project's own modeling file (trusted)
        args += ",trust_remote_code=True"
    args += f",prefix_token_id={prefix}"
    return (f"lm_eval --model hf --model_args {shlex.quote(args)} --include_path {shlex.quote(tasks_dir)} "
            f"--tasks {','.join(tasks)} --device cpu --batch_size 8")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out_dir", default="out-shakespeare-char",
                   help="the run's folder (its checkpoint; its export in hf/)")
    p.add_argument("--tasks_dir", default=None, help="where the tasks go (default: <out_dir>/lm_eval)")
    p.add_argument("--export_dir", default=None, help="the export the command evaluates (default: <out_dir>/hf)")
    p.add_argument("--max_docs", type=int, default=100, help="held-out documents in scalevec_val")
    p.add_argument("--items", type=int, default=200, help="items of scalevec_next_line")
    p.add_argument("--context_lines", type=int, default=3, help="lines before the one to pick")
    p.add_argument("--doc_chars", type=int, default=2000, help="characters per document of character data")
    p.add_argument("--seed", type=int, default=0, help="of the items' draw")
    args = p.parse_args(argv)
    for name in ("max_docs", "items", "context_lines", "doc_chars"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name}={getattr(args, name)}: must be >= 1")
    if args.context_lines > 1000:
        raise UserError(f"--context_lines={args.context_lines}: at most 1000 (a context longer than any block)")
    if not 0 <= args.seed < 2**32:
        raise UserError(f"--seed={args.seed}: numpy's generators take a seed in [0, 2**32 - 1]")
    command = write_tasks(args.out_dir, args.tasks_dir or os.path.join(args.out_dir, "lm_eval"), args.max_docs,
                          args.items, args.context_lines, args.doc_chars, args.seed, args.export_dir)
    if command:
        print(f"then: {command}")


if __name__ == "__main__":
    cli(main)
