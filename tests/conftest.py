"""Test setup: the repo root on sys.path; OpenMP's idle threads asleep (common.set_omp_env) before torch loads;
GPT-2's BPE file from ../shared/tiktoken_cache when present."""

import hashlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from plumbing import common  # noqa: E402

common.set_omp_env()  # before torch loads: idle OpenMP threads sleep, as in every command

_cache = os.path.join(os.path.dirname(ROOT), "shared", "tiktoken_cache")
if "TIKTOKEN_CACHE_DIR" not in os.environ and os.path.isdir(_cache):
    os.environ["TIKTOKEN_CACHE_DIR"] = _cache

def gpt2_bpe():
    """tiktoken's r50k_base (GPT-2's BPE vocabulary), or a skip whose line says what to cache: tiktoken
    downloads the vocabulary file once, and offline reads it from TIKTOKEN_CACHE_DIR."""
    import pytest

    from configurator import UserError
    from plumbing.dataset import bpe_encoding

    pytest.importorskip("tiktoken", reason="GPT-2's BPE: pip install -e .")
    try:
        return bpe_encoding("r50k_base")
    except UserError as e:
        pytest.skip(f"GPT-2's BPE vocabulary is not cached: {e} (filled, once online, by TIKTOKEN_CACHE_DIR=<folder> "
                    f"python -c \"import tiktoken; tiktoken.get_encoding('r50k_base')\")")


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


# A SIGTERM or SIGINT from outside ends the test run, even while a test is inside an in-process
# train(): its StopSignals turns the first one into a clean stop of that run, and the test would go
# on to the next. Tests that signal themselves do it through signal.raise_signal, marked here; any
# other signal StopSignals receives is the user's, and the run ends after that test.
import signal  # noqa: E402

import pytest  # noqa: E402

SENT_BY_A_TEST, FROM_OUTSIDE = [], []
_raise_signal, _handle = signal.raise_signal, common.StopSignals.handle


def raise_signal(sig):
    SENT_BY_A_TEST.append(sig)
    _raise_signal(sig)


def handle(self, signum, frame):
    if signum in SENT_BY_A_TEST:
        SENT_BY_A_TEST.remove(signum)
    else:
        FROM_OUTSIDE.append(signum)
    return _handle(self, signum, frame)


def end_the_run(signum, frame):
    """SIGTERM outside a training run: stop the tests as Ctrl-C does."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


signal.raise_signal, common.StopSignals.handle = raise_signal, handle
if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
    signal.signal(signal.SIGTERM, end_the_run)


def pytest_runtest_teardown(item, nextitem):
    if FROM_OUTSIDE:
        pytest.exit(f"stopped by {signal.Signals(FROM_OUTSIDE[0]).name} during {item.nodeid} (a training run it "
                    f"started saved and stopped)", returncode=128 + FROM_OUTSIDE[0])


def data_keys(cfg):
    """The keys dataset.load_data reads of a run config (a dict or a namespace), as its arguments."""
    cfg = cfg if isinstance(cfg, dict) else vars(cfg)
    return {"dataset": cfg["dataset"], "block_size": cfg["block_size"], "vocab_size": cfg.get("vocab_size", 0)}


def snapshot(folder):
    """{relative path: (kind, size, mtime_ns, sha1 of a file)} of everything under folder, links not followed."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            st = os.lstat(path)
            digest = hashlib.sha1(open(path, "rb").read()).hexdigest() if os.path.isfile(path) and \
                not os.path.islink(path) else None
            out[os.path.relpath(path, folder)] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return out
