"""bench.py on a tiny model: every variant listed with a ratio to the baseline."""

import re

import pytest

import bench
from train import UserError


def test_bench_prints_a_ratio_per_variant(capsys):
    bench.main(["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=16", "--batch_size=2",
                "--vocab_size=40", "--variants=baseline,unified,unified_moe", "--steps=2", "--warmup=1",
                "--memory=True"])
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if line.split() and line.split()[0] in ("baseline", "unified", "unified_moe")}
    assert set(rows) == {"baseline", "unified", "unified_moe"}
    assert rows["baseline"][3] == "1.000" and float(rows["unified"][3]) > 0
    assert re.search(r"\(1\.000\)", " ".join(rows["baseline"]))  # memory ratio of the baseline to itself
    assert int(rows["unified_moe"][1].replace(",", "")) > int(rows["unified"][1].replace(",", ""))


def test_bench_rejects_zero_steps_and_unknown_variants():
    with pytest.raises(UserError, match="--steps=0 must be >= 1"):
        bench.main(["--steps=0"])
    with pytest.raises(UserError, match="unknown variant 'fast'"):
        bench.main(["--variants=baseline,fast"])
