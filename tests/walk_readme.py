"""Run the README's commands as written, in order, after its quick start: a user's first hour.

    python tests/walk_readme.py                 # in a fresh clone of this repository (a temporary folder)
    python tests/walk_readme.py --dir=walk      # keep the clone there, to look at what the commands wrote
    python tests/walk_readme.py --list          # the commands and what stands in for each, nothing run

Every command of every ```sh block runs with bash in the clone's root, with this interpreter's
folder first on PATH; the walk stops at the first that fails and prints its output's end. A
command that needs what this machine may lack (a GPU, several nodes, Slurm, the network for
FineWeb) is listed in STAND_INS with the command the walk runs instead, or None and why it is not
run. About 12 minutes on 2 CPU cores (the quick start, two default-sized runs, the SmolLM2
continuation); not part of the test suite.
"""

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A command as the README writes it -> what the walk runs instead (None: not run, the reason given)
STAND_INS = {
    "python -m pytest -q": (None, "the test suite itself: CI runs it"),
    "torchrun --standalone --nproc_per_node=8 train.py configs/unified_124m.py": (
        "torchrun --standalone --nproc_per_node=2 train.py configs/unified_124m.py --device=cpu --compile=False "
        "--dtype=float32 --dataset=shakespeare --batch_size=1 --gradient_accumulation_steps=2 --block_size=64 "
        "--max_iters=2 --eval_iters=1 --sample_tokens=0 --out_dir=walk-124m",
        "8 GPUs and FineWeb: the same config on 2 CPU processes, BPE Shakespeare, 2 steps"),
}


def commands(readme):
    """The README's shell commands, in order: each line of each ```sh block (backslash continuations
    joined, comments and blank lines dropped)."""
    found = []
    for block in re.findall(r"```sh\n(.*?)```", readme, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                found.append(" ".join(line.split()))
    return found


def walk(folder, listing=False):
    with open(os.path.join(folder, "README.md")) as f:
        todo = commands(f.read())
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    t_all = time.time()
    for n, cmd in enumerate(todo, 1):
        stand_in, why = STAND_INS.get(cmd, (cmd, ""))
        print(f"[{n}/{len(todo)}] {cmd}" + (f"\n    instead ({why}): {stand_in}" if stand_in != cmd else ""),
              flush=True)
        if stand_in is None or listing:
            continue
        t0 = time.time()
        proc = subprocess.run(["bash", "-c", stand_in], cwd=folder, env=env, capture_output=True, text=True)
        print(f"    exit {proc.returncode} in {time.time() - t0:.0f} s", flush=True)
        if proc.returncode:
            print((proc.stdout + proc.stderr)[-3000:])
            return 1
    if not listing:
        print(f"every command ran: {time.time() - t_all:.0f} s in all")
    return 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", default="", help="the clone to walk in (made fresh; default: a temporary folder)")
    p.add_argument("--list", action="store_true", help="list the commands and their stand-ins; run nothing")
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
    return walk(folder)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
