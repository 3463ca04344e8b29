"""Committed records keep their hash and meaning across config changes; the unified configs' switches."""

import glob
import hashlib
import json
import os

import pytest

from ablation import config_hash, load_ablation, load_records, plan
from conftest import ROOT
from configurator import DEFAULTS, complete, load_config, model_config

RECORDS = load_records(os.path.join(ROOT, "results"))
PAPER_UNIFIED = dict(scale="vector", branch_scales=True, attn_placement="in", mlp_placement="dual_norm",
                     dual_sites="prenorm", reparam="or", scale_wd="iwd")


def stored_config(record):
    """A record's config as a run config today: keys added since then take the value they meant."""
    return {k: v for k, v in complete(record["config"]).items() if k != "out_dir"}


def test_every_committed_record_rehashes_to_its_stored_hash():
    assert RECORDS
    changed = [r["name"] for h, r in RECORDS.items() if config_hash(stored_config(r)) != h]
    assert not changed, f"{len(changed)} records would get a new hash, e.g. {changed[:3]}"


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
    cfg = {k: v for k, v in DEFAULTS.items() if k != "out_dir"} | baseline | variant
    without = {k: v for k, v in cfg.items() if k != "dual_sites"}
    old = hashlib.sha1(json.dumps(without, sort_keys=True).encode()).hexdigest()  # the hash before the key
    assert config_hash(cfg | {"dual_sites": "all"}) == old
    assert (config_hash(cfg | {"dual_sites": "prenorm"}) != old) == acts


@pytest.mark.parametrize("path", ["configs/unified_shakespeare_char.py", "configs/unified_124m.py",
                                  "configs/unified_moe_124m.py"])
def test_the_unified_configs_and_the_default_run_are_the_papers_hg_dnp_or_iwd(path):
    cfg, _ = load_config([os.path.join(ROOT, path)])
    assert {k: cfg[k] for k in PAPER_UNIFIED} == PAPER_UNIFIED
    assert {k: DEFAULTS[k] for k in PAPER_UNIFIED} == PAPER_UNIFIED
