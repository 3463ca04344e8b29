"""The docs' promises, checked without running them (tests/walk_readme.py runs them): every link and
#anchor of the docs resolves, every README command is declared (runs as written, or has a stand-in),
every registered promise's text is still in its doc; and the checker responds to a broken link, a
dropped promise, an undeclared command and a measurement far from its promise."""

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import walk_readme as w  # noqa: E402

README = open(os.path.join(w.ROOT, "README.md")).read()


def first_screen_problems(readme, max_bytes=20_000, quick_start_by=40):
    """What keeps a README from a new reader's first screen: over max_bytes (UTF-8), or the quick
    start's command (walk_readme.QUICK_START) not in a ```sh block within its first quick_start_by lines."""
    problems = []
    if len(readme.encode()) > max_bytes:
        problems.append(f"README.md is {len(readme.encode()):,} bytes, over {max_bytes:,}")
    starts = [c.line for c in w.commands(readme) if c.cmd == w.QUICK_START and c.kind == "sh"]
    if not starts or starts[0] > quick_start_by:
        problems.append(f"the quick start's `{w.QUICK_START}` is not in the first {quick_start_by} lines")
    return problems


def test_the_readme_opens_with_the_quick_start_and_stays_under_20_kb():
    assert first_screen_problems(README) == []
    padded = README.replace("## Quick start", "## Quick start\n" + "\n".join(["pad"] * 40), 1)
    assert first_screen_problems(padded, max_bytes=10**6) == [f"the quick start's `{w.QUICK_START}` is not in the first 40 lines"]
    assert first_screen_problems(README + "x" * 20_000)[0].endswith("over 20,000")

def test_every_link_and_anchor_of_the_docs_resolves():
    docs = w.doc_files()
    assert {os.path.relpath(p, w.ROOT) for p in docs} >= {"README.md", "docs/reference.md", "docs/forks.md",
                                                          "docs/benchmarks.md", "configs/ablations/README.md",
                                                          "results/README.md"}
    assert w.broken_links(docs) == []


def test_every_readme_command_runs_as_written_or_has_a_stand_in():
    cmds = w.commands(README)
    assert w.undeclared(cmds) == []
    assert {c.kind for c in cmds} == {"sh", "inline"}
    assert not set(w.AS_WRITTEN) & set(w.STAND_INS)
    not_run = {c.cmd for c in cmds if w.STAND_INS.get(c.cmd, (c.cmd,))[0] is None}
    assert all(w.STAND_INS[cmd][1] for cmd in not_run), "a command the walk does not run says why"


def test_every_registered_promise_is_in_its_doc_and_names_a_readme_command():
    assert w.missing_promises() == []
    cmds = {c.cmd for c in w.commands(README)} | {w.WALK}
    for p in w.PROMISES:
        assert p.command in cmds, p
        if p.check is None:  # only a command the walk does not run leaves its promise unmeasured
            assert w.STAND_INS[p.command][0] is None, p


def test_which_code_spans_are_commands():
    for span in ("python train.py --n_layer=4", "sample.py --fold", "torchrun --standalone train.py", "pip install -e .",
                 "ruff check ."):
        assert w.is_command(span), span
    for span in ("train.py", "tools/bench.py", "torchrun", "--scale=none", "-m \"not slow\"", "GPT.fold_scales()",
                 "configs/ablations/ladder.py", "sample.py"):
        assert not w.is_command(span), span
    doc = ("# T\n\nFirst `python a.py --x=1`, a file `b.py`, then\n\n```sh\npython c.py \\\n    --y=2   # a comment\n"
           "# only a comment\n\n```\n\n```python\npython d.py --no\n```\n\nlast `pip install\nfoo` and `e.py --z`.\n")
    assert w.commands(doc) == [w.Command("python a.py --x=1", 3, "inline"), w.Command("python c.py --y=2", 6, "sh"),
                               w.Command("pip install foo", 16, "inline"), w.Command("e.py --z", 17, "inline")]
    assert w.undeclared(w.commands(doc))[0] == "README.md:3: python a.py --x=1: not declared (AS_WRITTEN or STAND_INS)"


def test_github_slugs():
    assert w.github_slug("The variants: the fine print") == "the-variants-the-fine-print"
    assert w.github_slug("configs/ablations/: one ablation per claim") == "configsablations-one-ablation-per-claim"
    assert w.github_slug("`results/` and [the *records*](x.md) (CPU)") == "results-and-the-records-cpu"
    assert w.anchors("# A\n## A\n```sh\n# not a heading\n```\n<a name=\"here\"></a>\n") == {"a", "a-1", "here"}


def test_a_broken_link_or_anchor_is_reported(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# B\n\n## Real heading\n")
    (tmp_path / "a.md").write_text(
        "# Title\n\n[ok](docs/b.md#real-heading) [here](#title) ![img](docs/b.md) [web](https://example.com/#x)\n"
        "[gone](docs/b.md#old-heading) and\n[missing](docs/c.md) `[in code](nowhere.md)`\n\n"
        "```\n[in a block](nowhere.md)\n```\n[self](#no-such)\n")
    problems = w.broken_links([str(tmp_path / "a.md")], str(tmp_path))
    assert problems == ["a.md:4: docs/b.md#old-heading: no heading of docs/b.md has the anchor #old-heading",
                        "a.md:5: docs/c.md: no such file (docs/c.md)",
                        "a.md:10: #no-such: no heading of a.md has the anchor #no-such"]


def test_a_dropped_or_changed_promise_is_reported(tmp_path):
    for doc in {p.doc for p in w.PROMISES}:
        os.makedirs(tmp_path / os.path.dirname(doc), exist_ok=True)
        shutil.copy(os.path.join(w.ROOT, doc), tmp_path / doc)
    assert w.missing_promises(str(tmp_path)) == []
    text = (tmp_path / "README.md").read_text()
    assert "4.42 to about 1.64" in text and "(C2: the same text)" in text
    (tmp_path / "README.md").write_text(text.replace("4.42 to about 1.64", "4.42 to 1.64").replace(
        "(C2: the same text)", "(C2)"))
    (tmp_path / "configs" / "ablations" / "README.md").unlink()
    missing = w.missing_promises(str(tmp_path))
    assert len(missing) == 3, missing
    assert any("falls from" in m for m in missing) and any("same text" in m for m in missing)
    assert any(m.startswith("configs/ablations/README.md") for m in missing)


def promise(check_name, command):
    """The registered promise of this check and command, with its match in the docs."""
    [(p, m)] = [(p, m) for p, m in w.find_promises() if w.check_name(p) == check_name and p.command == command]
    return p, m


def test_the_quick_start_promises_against_stand_in_outputs():
    out = "eval iter 0: val loss 4.4301\n--- sample (500 tokens) ---\nROMEO:\n---\ndone: 600 iterations in 281 s, " \
          "final val loss 1.6612\n"
    for name, good in (("losses", out), ("training_time", out), ("prints", out)):
        p, m = promise(name, w.QUICK_START)
        ok, said = p.check(m, w.Ran(good, "", 300.0, 0), {}, 2.0)
        assert ok, (name, said)
    p, m = promise("losses", w.QUICK_START)
    assert p.check(m, w.Ran(out.replace("1.6612", "1.7500"), "", 0, 0), {}, 2.0) == (
        False, "4.4301 -> 1.7500 (tolerance 0.02 and 0.05)")
    assert not p.check(m, w.Ran("no eval here", "", 0, 0), {}, 2.0)[0]
    p, m = promise("training_time", w.QUICK_START)
    slow = out.replace("in 281 s", "in 700 s")  # promised about 3 minutes: 180 s
    assert p.check(m, w.Ran(slow, "", 0, 0), {}, 2.0) == (False, "700 s measured, about 180 s promised (fails past 2x)")
    assert p.check(m, w.Ran(slow, "", 0, 0), {}, 4.0)[0]
    assert not p.check(m, w.Ran(out.replace("600 iterations", "500 iterations"), "", 0, 0), {}, 2.0)[0]


def test_the_fold_time_and_print_promises_against_stand_in_outputs():
    p, m = promise("same_text", "sample.py --fold")
    walked = {w.SAMPLE: w.Ran("ROMEO:\nWhat say you?\n", "", 3, 0)}
    assert p.check(m, w.Ran("ROMEO:\nWhat say you?\n", "note: the LM head was untied", 3, 0), walked, 2.0)[0]
    assert not p.check(m, w.Ran("ROMEO:\nWhat say me?\n", "", 3, 0), walked, 2.0)[0]
    assert not p.check(m, w.Ran("ROMEO:\n", "", 3, 0), {}, 2.0)[0]
    p, m = promise("took", w.SMOL_CONVERT)  # about 25 s
    assert p.check(m, w.Ran("", "", 49, 0), {}, 2.0)[0] and not p.check(m, w.Ran("", "", 51, 0), {}, 2.0)[0]
    p, m = promise("took", w.SMOL_TRAIN)  # about a minute
    assert p.check(m, w.Ran("", "", 119, 0), {}, 2.0)[0] and not p.check(m, w.Ran("", "", 121, 0), {}, 2.0)[0]
    p, m = promise("took", w.SCALE_DOWN)  # about 3 minutes
    assert p.check(m, w.Ran("", "", 200, 0), {}, 2.0) == (True, "200 s measured, about 180 s promised (fails past 2x)")
    p, m = promise("prints", w.LADDER)
    assert p.check(m, w.Ran("50 GPU-hours ... power 0.84", "", 3, 0), {}, 2.0)[0]
    assert not p.check(m, w.Ran("50 GPU-hours", "", 3, 0), {}, 2.0)[0]


def test_the_walk_lists_and_refuses_to_start_on_a_problem(tmp_path, capsys):
    assert w.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "instead (a GPU): None" in out and "every link and anchor resolves" in out and "NOT FOUND" not in out
    (tmp_path / "README.md").write_text("# R\n\nRun `python new_command.py --x=1` and see [this](#gone).\n")
    assert w.walk(str(tmp_path)) == 1  # nothing runs
    out = capsys.readouterr().out
    assert out.startswith("the walk does not start:") and "python new_command.py --x=1: not declared" in out
    assert "a promise no longer found" in out and "#gone" in out
