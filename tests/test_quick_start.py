"""The README's sample output is what the quick start's run prints: each line of its ```text block before the
first progress line is a line of a real run at the default config, and (slow) the progress line at iteration 50
is too, but for its timings. The end (the last eval, the sample) is walk_readme.py's promise, a full run."""

import os
import re

import pytest

import train as train_mod
from test_reliability import signal_at
from test_train import run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMINGS = re.compile(r"\| [\d.]+[kM]? tok/s \| \d+ ms/iter \| ETA \S+")  # a machine's speed, not the run's


def readme_sample():
    """The lines of the quick start's ```text block, "..." (what it leaves out) dropped."""
    text = open(os.path.join(ROOT, "README.md")).read()
    block = re.search(r"## Quick start.*?```text\n(.*?)```", text, re.S).group(1)
    return [line for line in block.splitlines() if line != "..."]


def test_the_readmes_sample_output_starts_as_the_quick_starts_run(tmp_path, capsys):
    head = readme_sample()
    head = head[:next(i for i, line in enumerate(head) if line.startswith("iter "))]
    assert head[0].startswith("parameters: ") and head[-1].startswith("eval iter 0: ")
    run(["--max_iters=0", "--sample_tokens=0", f"--out_dir={tmp_path / 'out'}"])  # the default config, eval 0 only
    printed = capsys.readouterr().out.splitlines()
    assert [line for line in head if line not in printed] == []
    assert "4 Attention" not in "\n".join(head)  # (the stale line this test was written for)


@pytest.mark.slow
def test_the_readmes_progress_line_is_the_quick_starts_at_iteration_50(tmp_path, monkeypatch, capsys):
    line = next(line for line in readme_sample() if line.startswith("iter 50/600 "))
    monkeypatch.setattr(train_mod, "get_batch", signal_at(51))  # stops after iteration 51 (the 50th line printed)
    run(["--sample_tokens=0", f"--out_dir={tmp_path / 'out'}"])
    printed = [TIMINGS.sub("|", ln) for ln in capsys.readouterr().out.splitlines() if ln.startswith("iter 50/600 ")]
    assert printed == [TIMINGS.sub("|", line)]
