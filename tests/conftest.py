"""Test setup: the repo root on sys.path; OpenMP's idle threads asleep (common.set_omp_env) before torch loads;
GPT-2's BPE file from ../shared/tiktoken_cache when present."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import common  # noqa: E402

common.set_omp_env()  # before torch loads: idle OpenMP threads sleep, as in every command

_cache = os.path.join(os.path.dirname(ROOT), "shared", "tiktoken_cache")
if "TIKTOKEN_CACHE_DIR" not in os.environ and os.path.isdir(_cache):
    os.environ["TIKTOKEN_CACHE_DIR"] = _cache

# The Llama/Gemma baseline's scale vectors. Tests that build a model.GPTConfig start from
# these: its defaults are the default run's (the unified strategy), one table with configurator.
from model import BASELINE  # noqa: E402, F401


def add_row(monkeypatch, section, key, row):
    """A config key added at run time as a fork adds its row to configurator.SECTIONS in the source
    (with the tables configurator derives from the rows at import: DEFAULTS, ALLOWED, ABSENT)."""
    import configurator
    monkeypatch.setitem(configurator.SECTIONS[section], key, row)
    monkeypatch.setitem(configurator.DEFAULTS, key, row[0])
    monkeypatch.setitem(configurator.ALLOWED, key, row[1])
    if len(row) > 3:
        monkeypatch.setitem(configurator.ABSENT, key, row[3])


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a real pre-trained model, lm-eval, torchrun, GPU files at miniature "
                                       "size, large simulations (a minute or more each on 2 cores); -m 'not slow' "
                                       "skips them")
