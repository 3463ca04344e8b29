"""What a table heading and a figure title say about an ablation: its measured rows (variant -
reference, the mean [95% CI] of the paired differences in final val loss), each with the verdict
its table gives (stats.verdict) and the strength the summary gives (stats.strength, BH over the
summary's family: summary.file_strengths), and the file's claim beside them, marked "claim:".

Why: a title that restates the claim ("weight decay helps ...") asserts it whatever the records
show; one built from the rows says what was measured, in the words the tables use. So a heading
states no direction of its own: the claim's words ("helps", "beats") come only after "claim:", and
a --scale_down plot's headings start with stats.SCALED_DOWN and give no verdict word (its miniature
runs check the machinery, they are not evidence). Also fit_text: a title wrapped to the width it
is drawn in, so that no figure clips it.
"""

import re
import statistics
import textwrap
from collections import Counter

from research.comparisons import comparisons
from research.stats import SCALED_DOWN, SCALED_DOWN_STRENGTH, fmt_ci, mean_ci, seeds_for_power, verdict
from research.summary import file_strengths

CLAIM = "claim: "  # what precedes the ablation file's claim in every heading: its own words, never the paper's, not a result
MOST_ROWS = 2  # a headline lists up to this many claim rows; past it, their verdicts counted (tally)
VERDICT_ORDER = ("reproduced", "contradicted", "unresolved")


def mark(spec):
    """'scaled down (machinery check, not evidence): ' before every heading of a --scale_down spec, else ''."""
    return f"{SCALED_DOWN}: " if spec.get("scale_down") else ""


def said(verdict_text, strength_word):
    """'verdict; strength' as a heading gives them ('-' or None: the verdict alone); a scaled-down row's
    'scaled down' alone (its heading carries stats.SCALED_DOWN)."""
    if verdict_text == SCALED_DOWN:
        return SCALED_DOWN_STRENGTH
    return verdict_text + ("" if strength_word in (None, "-") else f"; {strength_word}")


def row_words(c, strength_word):
    """The words after a comparison's interval: its verdict and strength (said); 'control, no claim' for
    a row without a claim; for a row with seeds added after a look, the nominal verdict on every seed
    and the verdict on the planned seeds (stats.verdict), which the strength is about."""
    if c["verdict"] == SCALED_DOWN:
        return SCALED_DOWN_STRENGTH
    if not c["diffs"]:
        return "no paired seeds recorded yet"
    if not c["expected"]:
        return "control, no claim"
    if "added after a look" in c["verdict"]:
        n, k = len(c["diffs"]), len(c["planned_diffs"])
        planned = verdict(mean_ci(c["planned_diffs"]), k, c["expected"])
        return (f"{c['verdict'].split(' (seed')[0]} on all {n} seeds, nominal: {n - k} added after a look; "
                f"the {k} planned: {said(planned, strength_word)}")
    return said(c["verdict"], strength_word)


def row_phrase(c, strength_word):
    """'variant - reference +0.0031 [+0.0010, +0.0052] (lead, against the claim)': one comparison as a heading says it."""
    return f"{c['variant']} - {c['reference']} {fmt_ci(c['ci'])} ({row_words(c, strength_word)})"


def measured(spec, results, strengths=None):
    """[(comparison, its strength word)] of every comparison of the file, in table order (comparisons);
    strengths: summary.file_strengths over the files plotted together (default: this file alone, its
    own family), '-' for a row the summary leaves out (no claim, no seeds)."""
    if strengths is None:
        strengths = file_strengths([(spec, results, [], None)])
    return [(c, strengths.get((spec["name"], c["setting"], c["variant"], c["reference"]), "-"))
            for c in comparisons(spec, results)]


def plural(word):
    """'leads, against the claim' of 'lead, against the claim'; 'findings' of 'finding'; others as they are."""
    return re.sub(r"^(lead|finding)\b", r"\1s", word)


def tally(claims):
    """'9 claim rows: 4 reproduced (4 leads), 5 unresolved': the verdicts of many claim rows counted,
    each with its strengths counted ('-' left out); a scaled-down file's: none given."""
    if any(c["verdict"] == SCALED_DOWN for c, _ in claims):
        return f"{len(claims)} claim rows ({SCALED_DOWN_STRENGTH}: no verdicts)"
    by = {}
    for c, word in claims:
        v = c["verdict"].split(" (")[0] if c["diffs"] else "without paired seeds yet"
        by.setdefault(v, Counter())[word.rsplit(": ", 1)[-1]] += 1  # (the word alone, without whose row it is)
    parts = []
    for v in sorted(by, key=lambda v: (VERDICT_ORDER.index(v) if v in VERDICT_ORDER else len(VERDICT_ORDER), v)):
        words = [f"{k} {plural(w) if k > 1 else w}" for w, k in by[v].items() if w not in ("-", None)]
        parts.append(f"{sum(by[v].values())} {v}" + (f" ({', '.join(words)})" if words else ""))
    return f"{len(claims)} claim rows: " + ", ".join(parts)


def question_phrases(question, code=False):
    """Each row of a file's question (mechanism_question.question_rows) as a heading says it: what,
    mean [95% CI] (verdict; strength); code: keep the settings' markdown backticks."""
    return [f"{r['what'] if code else r['what'].replace('`', '')}{' (Welch)' * (r['test'] == 'Welch')} "
            f"{fmt_ci(r['ci'])} ({said(r['verdict'], r['strength'])})" for r in question]


def headline(spec, rows, question=(), most=MOST_ROWS):
    """A figure's title line and the measured part of a table heading: '<mark><name>: <measured>; claim:
    <claim>', the measured part each claim row (row_phrase, with its setting where the file has
    several) when there are at most `most`, else their tally; then the question's rows
    (question: mechanism_question.question_rows, where the file registers one), and whether claim rows ran
    their arms at one shared untuned LR (lr_line). rows: measured()."""
    claims = [(c, w) for c, w in rows if c["expected"]]
    several = len(spec["settings"]) > 1
    if not claims:
        found = "no claim rows on the loss (controls only)"
    elif len(claims) <= most:
        found = "; ".join(f"{c['setting'] + ': ' if several else ''}{row_phrase(c, w)}" for c, w in claims)
    else:
        found = tally(claims)
    if question:
        found += f"; {question[0]['question'].removeprefix('the ')} (no direction claimed): " + "; ".join(question_phrases(question))
    if any(c.get("lr") == "shared" for c, _ in claims) and not spec.get("scale_down"):
        found += "; arms at one shared untuned LR: a lead at most about the variants"
    return f"{mark(spec)}{spec['name']}: {found}; {CLAIM}{spec['claim']}"


def setting_lines(rows, setting):
    """Each comparison of a setting as row_phrase says it (a figure column's title, one line each)."""
    return [row_phrase(c, w) for c, w in rows if c["setting"] == setting]


def table_heading(spec, rows, question=()):
    """The markdown heading of a file's tables: what was measured (every claim row, or every row of a
    file that claims nothing, as row_phrase says it; then its question's rows, question:
    mechanism_question.question_rows), then the paper's claim, marked."""
    claims = [(c, w) for c, w in rows if c["expected"]]
    shown = claims or rows
    words = "scaled down, in place of a verdict" if spec.get("scale_down") else "its verdict and the summary's strength"
    lines = [f"**{mark(spec)}`{spec['name']}`, measured** (seeds {', '.join(map(str, spec['seeds']))}; "
             f"{'each claim row' if claims else 'no claim rows on the loss; each row'}: final val loss, variant minus "
             f"reference, same seed: the mean [95% CI] over seeds, then {words}):", ""]
    lines += [f"- `{c['setting']}`: {row_phrase(c, w)}{seeds_to_resolve(c, w)}" for c, w in shown]
    lines += ["", lr_line(rows)] if claims and not spec.get("scale_down") else []
    if question:
        lines += ["", f"{question[0]['question'].capitalize()} (no direction claimed; its own family, as its table "
                      f"below):", ""]
        lines += [f"- {p}" for p in question_phrases(question, code=True)]
    return lines + ["", f"{CLAIM}{spec['claim']}"]


def seeds_to_resolve(c, strength_word):
    """'; about n seeds would resolve a gap this size ...' for an unresolved claim row of 2 seeds or more
    without a strength (stats.seeds_for_power at its observed mean and SD: the paired t test at 0.05, the
    project's 80% power), '' otherwise."""
    if (not c["expected"] or len(c["diffs"]) < 2 or not c["verdict"].startswith("unresolved") or not c["ci"][0]
            or strength_word not in ("-", None)):
        return ""
    sd = statistics.stdev(c["diffs"])
    n = seeds_for_power(c["ci"][0], sd, 0.05, 0.8, most=1000) if sd > 0 else None
    size = f"about {n}" if n else "more than 1,000"
    return f"; {size} seeds would resolve a gap this size (its own SD {sd:.4f}, 80% power at p 0.05)"


def lr_line(rows):
    """How the claim rows' arms got their LRs, in the words of the summary's rule (stats.UNTUNED_CAP,
    UNTUNED_OWN_CAP; computed from the records: ablation.arm_tuned)."""
    claims = sum(1 for c, _ in rows if c["expected"])
    lines = []
    for kind, what in (("shared", "ran both arms at one shared LR, tuned for neither: a gap may come from that LR "
                                  "fitting one variant more than the other, so such a row tells about that LR and is a "
                                  "lead at most about the variants (tune_lr in the ablation file gives each arm its own)"),
                       ("untuned", "ran each arm at an LR of its own chosen otherwise than by the rule (the mean of 2 "
                                   "tuning seeds or more, every choice interior to its grid): a lead at most about the "
                                   "variants")):
        named = [f"{c['variant']} - {c['reference']}" for c, _ in rows if c["expected"] and c.get("lr") == kind]
        if named:
            some = "every claim row" if len(named) == claims else ", ".join(dict.fromkeys(named))
            lines.append(f"{some} {what}")
    if not lines:
        return "Arms' LR: each arm at its own LR, tuned by the rule on seeds of its own."
    return "Arms' LR: " + "; ".join(lines) + "."


def fit_text(text, inches, fontsize):
    """text with each of its lines wrapped at spaces to fit `inches` of width at `fontsize` points
    (DejaVu Sans: about 0.62 em a character on average), so that a layout engine can make room for
    it and no figure clips it."""
    width = max(20, int(inches * 72 / (0.62 * fontsize)))
    return "\n".join(textwrap.fill(line, width, break_on_hyphens=False) if line else line
                     for line in text.split("\n"))
