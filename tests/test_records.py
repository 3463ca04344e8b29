"""Committed records keep their hash and meaning across config changes; the unified configs' switches;
the prose quotes only intervals and p values the generated tables give."""

import glob
import hashlib
import json
import os
import re

import pytest

from research.ablation import config_hash, load_ablation, plan, run_config
from research.records import load_records
from conftest import ROOT, add_row
from configurator import ABSENT, DEFAULTS, TRACKING_KEYS, complete, load_config
from model import model_config

RECORDS = load_records(os.path.join(ROOT, "results"))
PAPER_UNIFIED = dict(scale="vector", branch_scales=True, attn_placement="in", mlp_placement="dual_norm",
                     dual_sites="prenorm", reparam="or", scale_wd="iwd")


def stored_config(record):
    """A record's config as a run config today: keys added since then take the value they meant."""
    return {k: v for k, v in complete(record["config"]).items() if k != "out_dir"}


def renamed_records():
    """The committed records whose config no longer hashes to their stored hash, and the fix: each key
    some of them lack that declares no absent value (a row added without configurator.added)."""
    changed = [r for h, r in RECORDS.items() if config_hash(stored_config(r)) != h]
    unhashed = ("out_dir", *TRACKING_KEYS)  # config_hash leaves them out: no row of theirs renames a record
    undeclared = sorted({k for r in changed for k in DEFAULTS if k not in r["config"] and k not in ABSENT and k not in unhashed})
    fix = "; ".join(f"{k}'s row in configurator.SECTIONS must be added({DEFAULTS[k]!r}, ..., absent=<the value "
                    f"the recorded runs trained at>)" for k in undeclared)
    return [r["name"] for r in changed], fix


def test_every_committed_record_rehashes_to_its_stored_hash():
    assert RECORDS
    changed, fix = renamed_records()
    assert not changed, f"{len(changed)} records would get a new hash, e.g. {changed[:3]}: {fix}"


@pytest.mark.parametrize("default", [0.05, "sgd", True])
def test_a_key_added_at_its_absent_value_renames_no_committed_record(monkeypatch, default):
    """The rule, not a list: a key added after the records (an added() row) is left out of every hash
    at its absent value, so each committed record, completed with it as a run today would be,
    rehashes to its stored hash; without absent= the same key renames them all and the failure
    names the fix."""
    import configurator
    add_row(monkeypatch, "optimizer", "fork_key", configurator.added(default, None, "a fork's key", absent=default))
    assert all("fork_key" in stored_config(r) for r in RECORDS.values())
    assert renamed_records() == ([], "")
    # the key at another value is hashed: a run that sets it is a new run
    cfg = stored_config(next(iter(RECORDS.values())))
    assert config_hash(cfg | {"fork_key": "other"}) != config_hash(cfg)
    add_row(monkeypatch, "optimizer", "fork_key", (default, None, "a fork's key"))  # no absent= declared
    monkeypatch.delitem(ABSENT, "fork_key")
    changed, fix = renamed_records()
    assert len(changed) == len(RECORDS) and "fork_key's row" in fix and "absent=" in fix
    assert fix.count("'s row") == 1, fix  # the fix names that key alone, not keys the hash never reads (out_dir)


def test_every_committed_record_is_a_run_of_some_ablation_file():
    planned = set()
    for path in sorted(glob.glob(os.path.join(ROOT, "configs", "ablations", "*.py"))):
        planned |= {run["hash"] for run in plan(load_ablation(path), "runs", RECORDS) if run["hash"]}
    orphans = sorted(RECORDS[h]["name"] for h in set(RECORDS) - planned)
    assert not orphans, f"records no ablation file plans any more: {orphans[:5]}"


def test_a_record_made_before_dual_sites_existed_builds_the_earlier_sites():
    rec = next(r for r in RECORDS.values() if r["config"].get("attn_placement") == "dual")
    assert "dual_sites" not in rec["config"]
    cfg = model_config(rec["config"] | {"vocab_size": 65})
    assert cfg.dual_sites == "all"  # scales around W_o and W_down, as when it ran


@pytest.mark.parametrize("variant, acts", [
    (dict(), False),  # the baseline: no dual placement, dual_sites does nothing
    (dict(mlp_placement="in_norm"), False),
    (dict(attn_placement="dual"), True),
    (dict(mlp_placement="dual_norm"), True),
])
def test_dual_sites_enters_the_hash_only_where_it_acts_and_all_hashes_as_before(variant, acts):
    baseline = dict(branch_scales=False, reparam="plain", attn_placement="in", mlp_placement="in")
    cfg = {k: v for k, v in DEFAULTS.items() if k not in ("out_dir", *TRACKING_KEYS)} | baseline | variant
    without = {k: v for k, v in cfg.items() if k not in ABSENT}  # keys added later (their values: absent=)
    old = hashlib.sha1(json.dumps(without, sort_keys=True).encode()).hexdigest()  # the hash before the keys
    assert config_hash(cfg | {"dual_sites": "all"}) == old
    assert (config_hash(cfg | {"dual_sites": "prenorm"}) != old) == acts


def test_where_a_run_is_tracked_never_enters_its_hash():
    """wandb_log and its keys change where the numbers go, not the numbers: a run tracked or not,
    under any project or name, has one hash (and every record made before the keys keeps its own)."""
    cfg = {k: v for k, v in DEFAULTS.items() if k not in ("out_dir", *TRACKING_KEYS)
           and not (k in ABSENT and v == ABSENT[k])}  # keys added later, at the value runs before them had
    tracked = cfg | {"wandb_log": True, "wandb_project": "mine", "wandb_run_name": "seed 1"}
    assert config_hash(tracked) == config_hash(cfg) == hashlib.sha1(json.dumps(cfg, sort_keys=True).encode()).hexdigest()


@pytest.mark.parametrize("path", ["configs/unified_shakespeare_char.py", "configs/unified_124m.py",
                                  "configs/unified_moe_124m.py"])
def test_the_unified_configs_and_the_default_run_are_the_papers_hg_dnp_or_iwd(path):
    cfg, _ = load_config([os.path.join(ROOT, path)])
    assert {k: cfg[k] for k in PAPER_UNIFIED} == PAPER_UNIFIED
    assert {k: DEFAULTS[k] for k in PAPER_UNIFIED} == PAPER_UNIFIED


def tuned_spec(tmp_path, mults="[0.5, 1.0, 2.0]"):
    path = tmp_path / "tuned.py"
    path.write_text(
        "claim = 'x'\nbase = 'configs/ablation_base.py'\n"
        "variants = {'baseline': {}, 'other': {'mlp_placement': 'in_norm'}}\n"
        "settings = {'short': {'max_iters': 100}, 'long': {'max_iters': 200}}\n"
        f"seeds = [1, 2, 3]\ntuning_seeds = [101, 102]\nlr_multipliers = {mults}\ntune_lr = True\n"
        "tune_setting = 'short'\n")
    return load_ablation(str(path))


def sweep_records(spec, losses):
    """Records for the LR sweep of every variant: losses[(seed, mult)] is the final val loss."""
    from research.ablation import run_config
    return {run_config(spec, "short", v, s, m)[1]: {"final": {"val_loss": loss}}
            for v in spec["variants"] for (s, m), loss in losses.items()}


def test_tuning_seeds_choose_the_lr_by_their_mean_for_every_setting_and_stay_out_of_tables(tmp_path):
    spec = tuned_spec(tmp_path)
    runs = plan(spec, "runs", {})
    sweep = [r for r in runs if not r.get("waiting")]
    assert {(r["setting"], r["seed"], r["lr_mult"]) for r in sweep} == \
        {("short", s, m) for s in (101, 102) for m in (0.5, 1.0, 2.0)} and not any(r["main"] for r in sweep)
    assert {(r["setting"], r["seed"]) for r in runs if r.get("waiting")} == {(t, s) for t in ("short", "long")
                                                                            for s in (1, 2, 3)}
    # seed 101 alone would pick x0.5; the mean over 101 and 102 picks x1 (interior)
    records = sweep_records(spec, {(101, 0.5): 1.0, (101, 1.0): 1.1, (101, 2.0): 1.5,
                                   (102, 0.5): 1.4, (102, 1.0): 1.1, (102, 2.0): 1.5})
    main = [r for r in plan(spec, "runs", records) if r["main"]]
    assert {(r["setting"], r["seed"], r["lr_mult"]) for r in main} == \
        {(t, s, 1.0) for t in ("short", "long") for s in (1, 2, 3)}


def test_a_best_lr_at_the_grids_edge_is_not_chosen_and_the_table_runs_wait(tmp_path):
    spec = tuned_spec(tmp_path)
    records = sweep_records(spec, {(s, m): {0.5: 1.5, 1.0: 1.2, 2.0: 1.1}[m] for s in (101, 102)
                                   for m in (0.5, 1.0, 2.0)})
    runs = plan(spec, "runs", records)
    assert not any(r["main"] and not r.get("waiting") for r in runs)
    assert all("edge" in r["name"] for r in runs if r.get("waiting"))


def test_the_replication_runs_the_regime_arms_at_their_chosen_lrs_on_new_seeds():
    regime = load_ablation(os.path.join(ROOT, "configs", "ablations", "c8_regime.py"))
    replication = load_ablation(os.path.join(ROOT, "configs", "ablations", "c8_replication.py"))
    chosen = {"baseline": 4.0, "unified": 2.0, "norm_only": 4.0, "no_scales": 4.0}  # c8_regime's tuning chose them
    equal_lr = {"norm_only_lrx2": ("norm_only", 2.0), "unified_lrx4": ("unified", 4.0)}
    for run in plan(replication, "runs"):
        arm, mult = equal_lr.get(run["variant"], (run["variant"], chosen.get(run["variant"])))
        assert run["hash"] == run_config(regime, "tpp20", arm, run["seed"], mult)[1], run["name"]
    assert not set(replication["seeds"]) & (set(regime["seeds"]) | set(regime["tuning_seeds"]))


# Prose that quotes results: each interval and p value in it must be a generated table's
# (assets/*.md, which plot.py rebuilds from the records alone), so prose cannot drift from the records.
PROSE = ("README.md", "results/README.md", "configs/ablations/README.md", "docs/reference.md", "docs/forks.md",
         "docs/benchmarks.md")
NUMBER = r"[+-]?\d+\.\d+"
INTERVAL = re.compile(rf"({NUMBER})x? \[({NUMBER}), ({NUMBER})\]")  # 'mean [low, high]' (a ratio: '1.22x [..]')
BARE = re.compile(rf"\[({NUMBER}), ({NUMBER})\]")  # any '[low, high]', with or without its mean
P_VALUES = re.compile(r"(?:adjusted p|\bp(?: \(BH\))?) ((?:\d\.\d+(?:e-\d+)?(?:, | and )?)+)")


def prose(name):
    """A prose file's text as its quotes read: whitespace runs one space (a quote may break across
    lines), results/README.md's generated summary block left out (a test keeps it equal to the
    records)."""
    with open(os.path.join(ROOT, name)) as f:
        text = f.read()
    return re.sub(r"\s+", " ", re.sub(r"<!-- summary:.*?<!-- end of summary -->", "", text, flags=re.S))


def generated_tables():
    """(intervals as (mean, low, high), bare intervals as (low, high), {interval: the decimal cells of
    each table row that gives it, together}) of the committed tables, assets/*.md."""
    tables = "".join(open(f).read() for f in sorted(glob.glob(os.path.join(ROOT, "assets", "*.md"))))
    cells = {}
    for row in (line for line in tables.splitlines() if line.startswith("|")):
        for m in INTERVAL.finditer(row):
            cells.setdefault(m.groups(), set()).update(re.findall(r"(?<=\| )(\d\.\d+(?:e-\d+)?)(?= \|)", row))
    return {m.groups() for m in INTERVAL.finditer(tables)}, {m.groups() for m in BARE.finditer(tables)}, cells


def unsourced(text, tables):
    """The intervals and p values `text` quotes that no generated table gives: a p value must be in a
    table row of the interval quoted last before it (the row that p belongs to), or else be no p."""
    intervals, bare, cells = tables
    out = [q for q in (m.groups() for m in INTERVAL.finditer(text)) if q not in intervals]
    out += [q for q in (m.groups() for m in BARE.finditer(text)) if q not in bare]
    quotes = list(INTERVAL.finditer(text))
    for m in P_VALUES.finditer(text):
        before = [q.groups() for q in quotes if q.end() <= m.start()]
        row = cells.get(before[-1], set()) if before else set()
        out += [p for p in re.findall(r"\d\.\d+(?:e-\d+)?", m.group(1)) if p not in row]
    return out


def quoted_numbers(text):
    """The (start, end) of every number an interval or p value in `text` quotes."""
    spans = [m.span(k) for m in INTERVAL.finditer(text) for k in (1, 2, 3)]
    spans += [m.span(k) for m in BARE.finditer(text) for k in (1, 2)]
    return sorted(set(spans + [(m.start(1) + p.start(), m.start(1) + p.end()) for m in P_VALUES.finditer(text)
                               for p in re.finditer(r"\d\.\d+(?:e-\d+)?", m.group(1))]))


@pytest.mark.parametrize("name", PROSE)
def test_every_interval_and_p_the_prose_quotes_is_in_a_generated_table(name):
    """Each prose file's quoted intervals ('mean [low, high]' and bare '[low, high]') and p values
    ('p ...', 'p (BH) ...', 'adjusted p ...', each in the table row of the interval quoted before it),
    its whole text but a generated block, are in the committed tables; results/README.md quotes some
    (a check that reads nothing passes nothing)."""
    text = prose(name)
    assert not unsourced(text, generated_tables()), f"{name} quotes results no table gives: {unsourced(text, generated_tables())[:5]}"
    if name == "results/README.md":
        assert len(list(INTERVAL.finditer(text))) > 50 and len(list(P_VALUES.finditer(text))) >= 5


@pytest.mark.parametrize("name", [n for n in PROSE if quoted_numbers(prose(n))])
def test_an_interval_or_p_the_prose_quotes_altered_by_one_digit_is_caught(name):
    """Every number an interval or p value of the file quotes, its last digit or its first decimal
    changed by one (9 -> 0), makes the check above fail: the check reads each number, not the shape."""
    text, tables = prose(name), generated_tables()
    for start, end in quoted_numbers(text):
        for at in (end - 1, text.index(".", start, end) + 1):
            altered = text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1:]
            assert unsourced(altered, tables), (name, text[start:end], at - start)


def test_a_mechanism_record_names_the_evals_whose_interval_a_resume_cut():
    """An interval that starts later than the eval before it (a resume from a checkpoint that kept no
    open interval) is listed under "cut", the eval's iteration; a log whose every interval starts at
    the eval before has no "cut", and the means count every interval either way."""
    from research.records import mechanism_record

    def evals(sinces):
        rows = [{"kind": "eval", "iter": 0, "mechanism": {"s/gain": 1.0}}]
        return rows + [{"kind": "eval", "iter": 4 * k, "mechanism": {"since": since, "s/gain": float(k)}}
                       for k, since in enumerate(sinces, 1)]

    whole, cut = mechanism_record(evals([0, 4, 8]))["mechanism"], mechanism_record(evals([0, 6, 8]))["mechanism"]
    assert "cut" not in whole and cut["cut"] == [8]
    assert whole["mean"] == cut["mean"] == {"s/gain": 2.0} and whole["intervals"] == cut["intervals"] == 3
