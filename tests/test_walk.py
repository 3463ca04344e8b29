"""docs/walk.md, the paper walked through the code, holds: every `file:Name` reference names a definition of
that file, every `file:line` reference quotes that line, every path exists, and every command prints what
its "expect" block says. The checker is tried on a walk with a broken reference of each kind."""

import ast
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WALK = os.path.join(ROOT, "docs", "walk.md")
REF = re.compile(r"`([\w./]+\.(?:py|md))(?::([\w.]+))?`")  # `file`, `file:Name.attr` or `file:123`
LINE_QUOTE = re.compile(r"`([\w./]+\.py):(\d+)` \(`([^`]+)`\)")  # `file:123` (`the code on that line`)
LINE_USE = re.compile(r"\b([\w/]+\.py):(\d+)\b")  # a file:line anywhere, a pdb break's too
BLOCK = re.compile(r"```sh\n(.*?)\n```\s*\n\s*expect:\s*\n\s*```text\n(.*?)\n```", re.S)


def definitions(path):
    """The qualified names a Python file defines: classes, functions, methods, module-level names."""
    names = set()

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(prefix + child.name)
                walk(child, prefix + child.name + ".")
            elif isinstance(child, (ast.Assign, ast.AnnAssign)) and not prefix:
                for target in (child.targets if isinstance(child, ast.Assign) else [child.target]):
                    if isinstance(target, ast.Name):
                        names.add(target.id)
    with open(path) as f:
        walk(ast.parse(f.read()), "")
    return names


def reference_problems(text, root=ROOT):
    problems = []
    for path, name in REF.findall(text):
        full = os.path.join(root, path)
        if not os.path.isfile(full):
            problems.append(f"{path}: no such file")
        elif name and not name.isdigit() and name not in definitions(full):
            problems.append(f"{path}:{name}: no such definition")
    quoted = {}
    for path, line, code in LINE_QUOTE.findall(text):
        lines = open(os.path.join(root, path)).read().splitlines()
        if int(line) > len(lines) or code not in lines[int(line) - 1]:
            problems.append(f"{path}:{line} is not `{code}`")
        quoted[(path, line)] = code
    problems += [f"{path}:{line} is used but never quoted" for path, line in set(LINE_USE.findall(text))
                 if (path, line) not in quoted]
    return problems


def test_every_reference_of_the_walk_resolves():
    text = open(WALK).read()
    assert len(REF.findall(text)) >= 15 and LINE_QUOTE.search(text)
    assert reference_problems(text) == []


def test_the_checker_sees_each_kind_of_broken_reference():
    text = open(WALK).read()
    assert reference_problems(text.replace("ScaleSites.__init__", "ScaleSite.__init__", 1)) == \
        ["model.py:ScaleSite.__init__: no such definition"]
    line = LINE_QUOTE.search(text).group(2)
    moved = text.replace(f":{line}`", f":{int(line) + 1}`", 1)
    assert any("is not `" in p for p in reference_problems(moved))
    assert any("never quoted" in p for p in reference_problems(text + f"\nb norms.py:{int(line) + 2}\n"))
    assert reference_problems(text + "\n`docs/nowhere.md`\n") == ["docs/nowhere.md: no such file"]


def test_the_walk_links_from_the_readmes_reading_order():
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert "(docs/walk.md)" in readme.split("## Reading order", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("command, expected", [  # (a training run's commands: the slow lane's)
    pytest.param(c, e, marks=[pytest.mark.slow] if "train.py" in c else [], id=c.split(";")[0][:40])
    for c, e in BLOCK.findall(open(WALK).read())])
def test_each_command_of_the_walk_prints_what_it_says(tmp_path, command, expected):
    command = command.replace("--out_dir=out-walk", f"--out_dir={tmp_path / 'out-walk'}")
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout + done.stderr
    missing = [line for line in expected.splitlines() if line.strip() != "..." and line.strip() not in out]
    assert missing == [], out[-3000:]


def test_the_walk_has_a_command_for_each_claim():
    text = open(WALK).read()
    assert {f"C{i}" for i in range(1, 9)} <= set(re.findall(r"claim (C\d)", text))
    assert len(BLOCK.findall(text)) == len(re.findall(r"```sh", text)) >= 8  # each command has its expect block
