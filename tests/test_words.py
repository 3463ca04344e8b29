"""The words around the numbers: the README's front page and results/README.md say how many comparisons
are findings and leads, which row each quoted interval is, how strong it is, and what `gain` reads under
each optimizer; each is derived here from the records (the generated tables) or from the code's own
table (mechanism.SITE_STATISTICS), and a planted change of each kind is caught."""

import glob
import os
import re

import pytest

from plumbing.mechanism import SITE_STATISTICS
from research import comparisons, summary
from research.records import load_records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUMBER = r"[+-]?\d+\.\d+"
INTERVAL = re.compile(rf"{NUMBER} \[{NUMBER}, {NUMBER}\]")
COUNT_WORDS = {"no": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
               "nine": 9, "ten": 10}
# How the front page names a variant or reference (its words -> the records' names)
NAMES = {"the paper's unified": "unified", "the earlier unified": "unified_dp_all", "DNP": "dnp",
         "the baseline": "baseline", "the normalization alone": "norm_only"}


def number(word):
    return COUNT_WORDS[word.lower()] if word.lower() in COUNT_WORDS else int(word)


def read(name):
    with open(os.path.join(ROOT, name)) as f:
        return f.read()


def front_page(readme):
    """The README's paragraph of results: under '## What the paper finds', its second paragraph."""
    section = readme.split("## What the paper finds", 1)[1].split("\n## ", 1)[0]
    return re.sub(r"\s+", " ", section.split("\n\n")[2])


def table_rows():
    """[(interval text, [cells])] of every row of the generated summary (assets/summary.md) that quotes
    an interval: its strength (the last cell), its 'variant - reference' and its file names."""
    rows = []
    for path in [os.path.join(ROOT, "assets", "summary.md")]:
        for line in open(path).read().splitlines():
            if line.startswith("|") and INTERVAL.search(line):
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                for m in INTERVAL.finditer(line):
                    rows.append((m.group(0), cells))
    return rows


def strength_of(cells):
    """A table row's strength in one word: finding, lead, control (no claim) or unresolved."""
    last = cells[-1]
    if last.startswith(("finding", "lead")):
        return last.split(",")[0].split(" ")[0]
    return "control" if "(control)" in cells else "unresolved"


def summary_counts():
    """(findings, leads, claim rows, rows at a shared untuned LR) on the planned seeds, from the records."""
    paths = sorted(glob.glob(os.path.join(ROOT, "configs", "ablations", "*.py")))
    collected, _ = comparisons.collect_all(paths, load_records(os.path.join(ROOT, "results")))
    text = summary.summary(collected)
    grab = lambda pattern: int(re.search(pattern, text).group(1))  # noqa: E731
    return (grab(r"(\d+) findings \(p \(BH\)"), grab(r"(\d+) leads \(the interval"), grab(r"of the (\d+) claim rows, \d+ ran"),
            grab(r"and (\d+) ran both arms at one shared"))


def front_page_problems(paragraph, counts, rows):
    """What the front page's results paragraph says otherwise than the records: its counts of findings,
    leads, claim rows and rows at a shared untuned LR; each quoted interval's row (the variant and
    reference its sentence names, NAMES) and strength (the first of finding/lead/unresolved/control
    after the interval in its sentence)."""
    problems = []
    findings, leads, claims, shared = counts
    said = {"findings": re.search(r"\b(\w+) comparisons? (?:is a|are) \*findings?\*", paragraph),
            "leads": re.search(r"\b(\w+) (?:is a|are) \*leads?\*", paragraph),
            "shared": re.search(r"\b(\w+) of the (\d+) claim rows ran both arms at one shared, untuned LR", paragraph)}
    for key, want in (("findings", findings), ("leads", leads), ("shared", shared)):
        if said[key] is None or number(said[key].group(1)) != want:
            problems.append(f"{key}: the page says {said[key] and said[key].group(0)!r}, the records {want}")
    if said["shared"] is not None and int(said["shared"].group(2)) != claims:
        problems.append(f"claim rows: the page says {said['shared'].group(2)}, the records {claims}")
    for sentence in re.split(r"(?<=[.;])\s", paragraph):
        for m in INTERVAL.finditer(sentence):
            found = [cells for text, cells in rows if text == m.group(0)]
            if not found:
                problems.append(f"{m.group(0)}: no generated table gives it")
                continue
            before, after = sentence[:m.start()], sentence[m.end():]
            low = before.lower()  # a name may open its sentence
            named = [NAMES[n] for n in sorted(NAMES, key=lambda n: low.rfind(n.lower())) if n.lower() in low][-2:]
            pair = {c.split(" - ")[0] for c in found[0] if " - " in c} | {c.split(" - ")[1] for c in found[0] if " - " in c}
            if set(named) != pair:
                problems.append(f"{m.group(0)}: its sentence names {named}, the row is {sorted(pair)}")
            word = re.search(r"\b(finding|lead|unresolved|control)", after)
            if word is None or word.group(1) != strength_of(found[0]):
                problems.append(f"{m.group(0)}: said {word and word.group(1)!r}, the table's {strength_of(found[0])!r}")
    return problems


def bold_strength_problems(text, rows):
    """results/README.md's bold strength words (**finding**, **lead**, plurals), each against the table row
    of the interval quoted nearest to it in its sentence (before or after it)."""
    problems = []
    for paragraph in re.split(r"\n\s*\n", text):
        for sentence in re.split(r"(?<=[.;])\s", re.sub(r"\s+", " ", paragraph)):
            quoted = list(INTERVAL.finditer(sentence))
            for m in re.finditer(r"\*\*(finding|lead)s?(?: against the claim)?\*\*", sentence):
                if not quoted:
                    continue
                near = min(quoted, key=lambda q: min(abs(q.start() - m.end()), abs(m.start() - q.end())))
                found = [cells for t, cells in rows if t == near.group(0)]
                if found and all(strength_of(c) != m.group(1) for c in found):
                    problems.append(f"{near.group(0)} is called **{m.group(1)}**; its table: "
                                    f"{', '.join(strength_of(c) for c in found)}")
    return problems


def gain_problems(readme):
    """The README's short form of gain must say what SITE_STATISTICS says under each optimizer."""
    said = re.sub(r"\s+", " ", readme)
    sgd = re.search(r"gamma\^2 under SGD", SITE_STATISTICS["gain"]).group(0)
    adaptive = re.search(r"under AdamW or Muon (gamma times the optimizer's step per unit of gradient)", SITE_STATISTICS["gain"])
    return [f"the README's gain lacks {w!r}" for w in (sgd, adaptive.group(1)) if w not in said]


@pytest.fixture(scope="module")
def records():
    return summary_counts(), table_rows()


def test_the_front_page_and_results_words_are_the_records(records):
    counts, rows = records
    readme = read("README.md")
    assert front_page_problems(front_page(readme), counts, rows) == []
    assert bold_strength_problems(read("results/README.md"), rows) == []
    assert gain_problems(readme) == []


def swap(text, a, b):
    return text.replace(a, "\0").replace(b, a).replace("\0", b)


def test_a_planted_change_of_each_kind_is_caught(records):
    """A count, a strength, two rows' labels swapped, gain's words under AdamW: each fails the check above."""
    counts, rows = records
    readme = read("README.md")
    page = front_page(readme)
    count = re.search(r"\b(\w+) (?:is a|are) \*leads?\*", page)
    planted = {
        "a count": page.replace(count.group(0), count.group(0).replace(count.group(1), str(number(count.group(1)) + 1)), 1),
        "a strength": re.sub(r"\(a lead\b", "(a finding", page, count=1),
        "two rows' labels": swap(page, "DNP", "the paper's unified"),
    }
    for kind, text in planted.items():
        assert text != page, kind
        assert front_page_problems(text, counts, rows), kind
    results = read("results/README.md")
    flat = re.sub(r"\s+", " ", results)
    row = "-0.0436 [-0.0697, -0.0174], a **lead**"  # c8_width_x1_tuned's row, a lead in the summary
    assert row in flat and not bold_strength_problems(flat, rows)
    assert bold_strength_problems(flat.replace(row, row.replace("lead", "finding")), rows)
    readme = re.sub(r"\s+", " ", readme)
    adamw = readme.replace("gamma times the optimizer's step per unit of gradient", "gamma over the gradients' scale")
    assert adamw != readme and gain_problems(adamw)


def sentence_lengths(text):
    """Words per sentence of a Markdown document's prose, paragraph by paragraph (a code block, a blank
    line or a list item ends one): code blocks, tables, headings and indented blocks left out, inline
    code and a link counted by their words."""
    text = re.sub(r"```.*?```", "\n\n", text, flags=re.S)
    lengths = []
    for paragraph in re.split(r"\n\s*\n|\n(?=- )", text):
        lines = [line for line in paragraph.splitlines() if line.strip() and not line.lstrip().startswith(("|", "#"))
                 and not line.startswith("    ")]
        prose = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", re.sub(r"`[^`]*`", "CODE", " ".join(lines)))
        lengths += [len(s.split()) for s in re.split(r"(?<=[.!?])\s+(?=[A-Z*(`])", prose) if len(s.split()) > 2]
    return lengths


@pytest.mark.parametrize("name", ["README.md", "docs/forks.md"])
def test_the_front_door_reads_in_short_sentences(name):
    """The README's and the fork guides' sentences average at most 22 words (a planted run-on sentence moves
    the measure)."""
    lengths = sentence_lengths(read(name))
    assert sum(lengths) / len(lengths) <= 22, (name, sum(lengths) / len(lengths))
    planted = sentence_lengths(read(name) + "\n\n" + " ".join(["word"] * 400) + ".\n")
    assert sum(planted) / len(planted) > sum(lengths) / len(lengths)
