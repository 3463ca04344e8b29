"""Test setup: the repo root on sys.path; GPT-2's BPE file from ../shared/tiktoken_cache when present."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

_cache = os.path.join(os.path.dirname(ROOT), "shared", "tiktoken_cache")
if "TIKTOKEN_CACHE_DIR" not in os.environ and os.path.isdir(_cache):
    os.environ["TIKTOKEN_CACHE_DIR"] = _cache

# The Llama/Gemma baseline's scale vectors. Tests that build a model.GPTConfig start from
# these: its defaults are the default run's (the unified strategy), one table with configurator.
from model import BASELINE  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a real pre-trained model, lm-eval (a minute each on 2 cores); -m 'not slow' skips them")
