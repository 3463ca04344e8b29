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
    """[(interval text, [cells])] of every row of the generated tables (assets/summary.md first, then each
    assets/<ablation>.md, whose name is added as a cell in backticks) that quotes an interval: its strength
    (the last cell), its 'variant - reference' and its file names."""
    rows = []
    paths = [os.path.join(ROOT, "assets", "summary.md")] + sorted(
        p for p in glob.glob(os.path.join(ROOT, "assets", "*.md")) if not p.endswith("summary.md"))
    for path in paths:
        own, header = f"`{os.path.basename(path)[:-3]}`", ""
        for line in open(path).read().splitlines():
            header = line if line.startswith("|") and not header.startswith("|") else header if line.startswith("|") else ""
            strengths = path.endswith("summary.md") or header.startswith("| row | test |")  # (a question's table)
            if strengths and line.startswith("|") and INTERVAL.search(line):
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                cells = cells if path.endswith("summary.md") else [own] + cells
                for m in INTERVAL.finditer(line):
                    rows.append((m.group(0), cells))
    return rows


def strength_of(cells):
    """A table row's strength in one word: finding, lead, significant (in a question's own family only),
    control (no claim) or unresolved."""
    last = cells[-1]
    if last.startswith(("finding", "lead", "significant")):
        return last.split(",")[0].split(" ")[0]
    return "control" if "(control)" in cells else "unresolved"


def summary_counts():
    """(findings, leads, claim rows, rows at a shared untuned LR) on the planned seeds, from the records."""
    paths = sorted(glob.glob(os.path.join(ROOT, "configs", "ablations", "*.py")))
    collected, _ = comparisons.collect_all(paths, load_records(os.path.join(ROOT, "results")))
    text = summary.summary(collected)
    grab = lambda pattern: int(re.search(pattern, text).group(1))  # noqa: E731
    return (grab(r"(\d+) findings \(p \(BH\)"), grab(r"(\d+) leads \(the interval"), grab(r"of the (\d+) claim rows, \d+ ran"),
            grab(r"(\d+) ran both arms at one shared"))


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


ABLATIONS = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "configs", "ablations", "*.py"))}
STRENGTH = re.compile(r"\b(finding|lead|unresolved|control|significant)")
DIRECTION = re.compile(r"\b(lower|higher|better|worse|beats?|larger|smaller|adds?|gains?|helps?|hurts?|improves?)\b")
NEGATION = re.compile(r"\b(not|no|neither|nor|none|without|indistinguishable|unresolved)\b")
UNTUNED = re.compile(r"untuned|one LR|one shared|not tuned|shared LR|base LRs?\b|a lead at most")
FINDING_WORD = re.compile(r"\bfindings?\b", re.I)
# "finding" in a definition, a negation, a count (the counts test checks it) or quoted as a word
FINDING_OK = re.compile(r"\b(no|none|not|never)\b[^.;]{0,60}\bfindings?\b|\bfindings?\W+(must|when)\b|finding, lead|"
                        r"\b\d+ findings\b|\"findings?\"", re.I)


def prose_items(text):
    """The prose of a page, in items: each paragraph, each bullet its own; tables, code blocks, headings and
    the generated summary block left out; whitespace and emphasis (*, **) flattened."""
    text = re.sub(r"<!-- summary.*?<!-- end of summary -->", "", text, flags=re.S)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    items = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = [ln for ln in paragraph.splitlines() if not ln.lstrip().startswith(("|", "#"))]
        for item in re.split(r"\n(?=\s*- )", "\n".join(lines)):
            flat = re.sub(r"\s+", " ", item.replace("**", "").replace("*", " ")).strip()
            if flat:
                items.append(flat)
    return items


def sentences(item):
    return re.split(r"(?<=[.;])\s(?=[A-Z(`-]|[a-z])", item)


def page_problems(text, rows):
    return item_problems(prose_items(text), rows)


def item_problems(items, rows):
    """What a page's prose says beside a quoted interval otherwise than its generated row (rows: table_rows):
    the row of a file other than the files its paragraph names (sentences moved between rows); a strength
    word (the first after the interval, else the last before it, in its sentence) other than the row's; a
    lead or finding given to a row whose arms were not tuned (its summary row's "arms' LR") without saying
    so in its sentence; a direction (lower, adds, ...) asserted just before an interval that crosses 0;
    and the word "finding" anywhere but in a definition, a negation or beside a row that is one. items:
    prose_items of a page."""
    problems = []
    for item in items:
        files = {f for f in re.findall(r"`([\w.]+?)(?:\.py)?`", item) if f in ABLATIONS}
        for sentence in sentences(item):
            quoted = list(INTERVAL.finditer(sentence))
            for k, m in enumerate(quoted):
                found = [cells for t, cells in rows if t == m.group(0)]
                if not found:
                    continue
                mine = [c for c in found if not files or files & {n.strip("`") for n in c[0].split(", ")}]
                if not mine:
                    problems.append(f"{m.group(0)} in a paragraph about {sorted(files)}: its row is "
                                    f"{found[0][0]}'s")
                    continue
                start = quoted[k - 1].end() if k else 0
                end = quoted[k + 1].start() if k + 1 < len(quoted) else len(sentence)
                after = STRENGTH.search(sentence[m.end():end])
                before = STRENGTH.findall(sentence[start:m.start()])
                word = after.group(1) if after else before[-1] if before else None
                crosses = float(re.findall(NUMBER, m.group(0))[1]) < 0 < float(re.findall(NUMBER, m.group(0))[2])
                if word and all(strength_of(c) != word for c in mine) and not (word == "unresolved" and crosses):
                    problems.append(f"{m.group(0)}: called {word!r}, its row {strength_of(mine[0])!r}")
                untuned = [c for c in mine if len(c) > 6 and "untuned" in c[6]]
                if word in ("lead", "finding") and untuned and len(untuned) == len(mine) and \
                        not UNTUNED.search(sentence):
                    problems.append(f"{m.group(0)}: a {word} whose arms were not tuned ({untuned[0][6]}), "
                                    f"and its sentence does not say so")
                lo, hi = (float(x) for x in re.findall(NUMBER, m.group(0))[1:])
                lead_in = sentence[start:m.start()]
                if lo < 0 < hi and DIRECTION.search(lead_in) and not NEGATION.search(lead_in):
                    problems.append(f"{m.group(0)} crosses 0, and its sentence asserts "
                                    f"{DIRECTION.search(lead_in).group(0)!r}")
            if FINDING_WORD.search(sentence) and not FINDING_OK.search(sentence):
                near = [cells for q in quoted for t, cells in rows if t == q.group(0)]
                if not any(strength_of(c) == "finding" for c in near):
                    problems.append(f"'finding' said of no finding: {sentence[:120]!r}")
    return problems


PAGES = ["README.md", "results/README.md", *sorted(os.path.relpath(p, ROOT) for p in glob.glob(
    os.path.join(ROOT, "docs", "*.md")))]


def gain_problems(readme, adaptive_words="gamma times the optimizer's step per unit of gradient"):
    """A page's words for gain must say what SITE_STATISTICS says under each optimizer: gamma^2 under SGD,
    gamma times the optimizer's step per unit of gradient under AdamW or Muon (adaptive_words: the page's
    form of the latter), and never gamma^2 under an adaptive optimizer."""
    said = re.sub(r"\s+", " ", readme)
    sgd = re.search(r"gamma\^2 under SGD", SITE_STATISTICS["gain"]).group(0)
    assert re.search(r"under AdamW or Muon gamma times the optimizer's step per unit of gradient", SITE_STATISTICS["gain"])
    problems = [f"the page's gain lacks {w!r}" for w in (sgd, adaptive_words) if w not in said]
    return problems + [f"the page says gain is {m.group(0)!r} under an adaptive optimizer"
                       for m in re.finditer(r"(?:under (?:AdamW|Adam|Muon)[^.;]{0,80}?|proportional to )gamma\^2(?!,? not| under SGD)",
                                            said) if "not gamma^2" not in m.group(0)]


@pytest.fixture(scope="module")
def records():
    return summary_counts(), table_rows()


RESULTS_GAIN = "gamma times Adam's step per unit of gradient"  # results/README.md's form of it, under AdamW


def test_the_front_page_and_results_words_are_the_records(records):
    counts, rows = records
    readme = read("README.md")
    assert front_page_problems(front_page(readme), counts, rows) == []
    assert bold_strength_problems(read("results/README.md"), rows) == []
    assert gain_problems(readme) == []
    assert gain_problems(read("results/README.md"), RESULTS_GAIN) == []


@pytest.mark.parametrize("page", PAGES)
def test_every_word_beside_a_row_on_every_page_is_its_rows(records, page):
    """README.md, results/README.md and docs/: each quoted interval sits in a paragraph about its file,
    with its row's strength, its untuned mark, no direction where it crosses 0; "finding" only where
    the summary's family says so."""
    assert page_problems(read(page), records[1]) == []


def test_the_assets_words_are_their_rows(records):
    """The generated tables' headings and notes (assets/*.md), by the same rules."""
    for path in sorted(glob.glob(os.path.join(ROOT, "assets", "*.md"))):
        text = re.sub(r"^\|.*$", "", open(path).read(), flags=re.M)  # the tables themselves are the rows
        assert page_problems(text, records[1]) == [], path


def test_the_which_unified_note_names_each_readings_files():
    """results/README.md's note lists, for each reading, exactly the files with an arm of that reading's
    names, and each such arm's config is that reading (dual_sites "all" or "prenorm")."""
    from research.ablation import load_ablation, run_config

    note = re.sub(r"\s+", " ", read("results/README.md").split("**Which unified.**", 1)[1].split("\n## ", 1)[0])
    earlier_text, paper_text = note.split("The paper's unified", 1)
    said = [set(re.findall(r"`(\w+)`", t)) & ABLATIONS for t in (earlier_text, paper_text)]
    earlier, paper = set(), set()
    for path in glob.glob(os.path.join(ROOT, "configs", "ablations", "*.py")):
        spec = load_ablation(path)
        for v in spec["variants"]:
            cfg = run_config(spec, next(iter(spec["settings"])), v, spec["seeds"][0])[0]
            if v in ("unified_dp_all", "dnp_all", "dp_all"):
                assert cfg["dual_sites"] == "all", (spec["name"], v)
                earlier.add(spec["name"])
            if v in ("unified", "dnp", "dp"):
                assert cfg["dual_sites"] == "prenorm", (spec["name"], v)
                paper.add(spec["name"])
    assert said == [earlier, paper]


def swap(text, a, b):
    return text.replace(a, "\0").replace(b, a).replace("\0", b)


def swap_sentences(items, a, b):
    """items with the first interval-quoting sentence of the item naming `a` and that of the one naming
    `b` swapped whole."""
    ia, ib = (next(i for i, it in enumerate(items) if f"`{f}`" in it and INTERVAL.search(it)) for f in (a, b))
    sa, sb = (next(s for s in sentences(items[i]) if INTERVAL.search(s)) for i in (ia, ib))
    out = list(items)
    out[ia], out[ib] = items[ia].replace(sa, sb, 1), items[ib].replace(sb, sa, 1)
    return out


def test_a_planted_change_of_each_kind_is_caught(records):
    """A count, a strength, two rows' labels swapped, gain's words under AdamW on the front page; and the
    seven the checks above once missed: two rows' sentences swapped whole (results/README.md), "finding"
    for C3's untuned rows (README.md's C3 paragraph, results/README.md), the untuned mark removed from the
    Muon row, a direction where the interval crosses 0, an unresolved share stated as a gain, gain's words
    in results/README.md: each fails a check."""
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
    readme = re.sub(r"\s+", " ", readme)
    adamw = readme.replace("gamma times the optimizer's step per unit of gradient", "gamma over the gradients' scale")
    assert adamw != readme and gain_problems(adamw)

    items = prose_items(results)
    assert not item_problems(items, rows)
    raw_readme = read("README.md")
    seven = {
        "two rows' sentences swapped whole": (item_problems, items, swap_sentences(items, "c8_regime", "c8_replication")),
        "'finding' for C3's rows, README.md": (page_problems, raw_readme, plant(raw_readme, "a lead at both widths",
                                                                                 "a finding at both widths")),
        "'finding' for C3's rows, results": (page_problems, results, plant(results, "untuned LR: a **lead** at most",
                                                                           "untuned LR: a **finding**")),
        "the Muon row's untuned mark removed": (page_problems, results, plant(
            results, ", a **lead** at the shared, untuned base LR;", ", a **lead**;")),
        "a direction where the interval crosses 0": (page_problems, raw_readme, plant(
            raw_readme, "indistinguishable from it under Muon + WSD", "lower than it under Muon + WSD too")),
        "an unresolved share stated as a gain": (page_problems, raw_readme, plant(
            raw_readme, "DNP's scale vectors' share over the normalization alone is",
            "DNP's scale vectors add the rest over the normalization alone:")),
        "gain's words in results/README.md": (lambda text, _: gain_problems(text, RESULTS_GAIN), results, plant(
            results, "proportional to gamma, not gamma^2,", "proportional to gamma^2,")),
    }
    for kind, (check, base, text) in seven.items():
        assert text != base, kind
        assert not check(base, rows), kind
        assert check(text, rows), kind


def plant(text, old, new):
    """text with old (matched across line breaks) replaced by new, once."""
    return re.sub(r"\s+".join(map(re.escape, old.split())), lambda _: new, text, count=1)


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
