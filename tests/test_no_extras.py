"""The first test run after `pip install -e ".[dev]"` alone is green: a test whose optional extra is missing
skips with its install line (README: Quick start). The extras are made unimportable here by a meta-path
finder on PYTHONPATH (sitecustomize), so the child processes the tests start lack them too."""

import importlib.util
import os
import re
import subprocess
import sys

import pytest

tomllib = pytest.importorskip("tomllib", reason="reads pyproject.toml with Python 3.11's tomllib")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def dist_name(requirement):
    """A requirement's distribution name, normalized ("Foo.Bar-baz>=1" -> "foo_bar_baz")."""
    return re.sub(r"[-.]+", "_", re.match(r"[A-Za-z0-9_.-]+", requirement).group()).lower()


def closure(names):
    """Every installed distribution `names` pull in (their requirements, transitively; a requirement
    under one of their own extras left out): what a venv with these has because of them."""
    from importlib import metadata
    seen, todo = set(), [dist_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [dist_name(r) for r in requires if "extra ==" not in r]
    return seen


def extra_modules():
    """The import names a `.[dev]` venv lacks: every optional extra's packages but the test tools' (`dev`),
    from pyproject.toml, and what they alone pull in (pyarrow through datasets, say), as installed here."""
    from importlib import metadata
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    extras = project["optional-dependencies"]
    direct = {dist_name(req) for extra, reqs in extras.items() if extra != "dev" for req in reqs} - {"scalevec"}
    only_extras = closure(direct) - closure(project["dependencies"] + extras["dev"])
    imported = {module.lower() for module, dists in metadata.packages_distributions().items()
                if any(dist_name(d) in only_extras for d in dists) and module.isidentifier()}
    return sorted(direct | imported)


BLOCKER = """import sys
BLOCKED = {blocked!r}


class Hidden:
    # a finder that finds nothing of BLOCKED: `import x` raises ModuleNotFoundError, find_spec("x") is None,
    # as where the package is not installed
    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, attr):
        return getattr(self.finder, attr)


sys.meta_path[:] = [Hidden(f) if hasattr(f, "find_spec") else f for f in sys.meta_path]
"""


def without_extras(tmp_path, *args, timeout):
    """`python *args` with every optional extra unimportable, in this process's environment otherwise."""
    (tmp_path / "sitecustomize.py").write_text(BLOCKER.format(blocked=set(extra_modules())))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_extras_are_read_from_pyproject_and_the_blocker_blocks_them(tmp_path):
    blocked = set(extra_modules())
    assert {"transformers", "safetensors", "gguf", "lm_eval", "submitit", "wandb"} <= blocked
    assert not {"pytest", "torch", "numpy", "tiktoken", "matplotlib"} & blocked  # core and dev stay
    if importlib.util.find_spec("pyarrow"):  # brought by datasets (an extra's) alone: a .[dev] venv has none
        assert "pyarrow" in blocked
    code = "import importlib, importlib.util, sys\nfor m in sys.argv[1:]:\n    try:\n        importlib.import_module(m)\n" \
           "    except ModuleNotFoundError:\n        print('missing', m, importlib.util.find_spec(m.split('.')[0]))\n" \
           "import torch, numpy, tiktoken"
    done = without_extras(tmp_path, "-c", code, "safetensors.torch", "gguf", "numpy", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["missing safetensors.torch None", "missing gguf None"], done.stdout
    assert "numpy" not in done.stdout


def test_the_suite_collects_without_any_optional_extra(tmp_path):
    done = without_extras(tmp_path, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider",
                          "tests", timeout=300)
    last = done.stdout.strip().split("\n")[-1]
    assert done.returncode == 0 and "error" not in last and "tests collected" in last, done.stdout[-3000:]


@pytest.mark.slow
def test_every_test_that_names_an_extra_passes_or_skips_without_it(tmp_path):
    """The files that name an extra's module, their fast tests run without any extra: none fails (each skips
    with its install line, or needs no extra)."""
    pattern = re.compile(r"\b(" + "|".join(extra_modules()) + r")\b")
    here = os.path.join(ROOT, "tests")
    files = sorted(os.path.join("tests", f) for f in os.listdir(here) if f.startswith("test_") and f.endswith(".py")
                   and f != os.path.basename(__file__) and pattern.search(open(os.path.join(here, f)).read()))
    assert "tests/test_reliability.py" in files and "tests/test_security_hf.py" in files
    done = without_extras(tmp_path, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-m", "not slow",
                          "-rs", *files, timeout=1800)
    assert done.returncode == 0, done.stdout[-5000:]
    skips = [line for line in done.stdout.split("\n") if line.startswith("SKIPPED")]
    missing = [line for line in skips if "No module named" in line or "could not import" in line]
    assert skips and all("pip install" in line for line in missing), missing  # the install line, not a bare name
