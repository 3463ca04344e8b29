"""The summary of every ablation given: one row per paired comparison (nested comparisons that files
share merged), the claim rows' Benjamini-Hochberg adjusted p on their planned seeds, each row's
strength (stats.strength), the counts a reader needs to weigh them, and the README block the
summary is written into."""

from configurator import UserError
from research.ablation import is_exploratory
from research.comparisons import comparisons, mode_text
from research.multipliers import ladder_rows, ladder_text
from research.regime import unit
from research.stats import (SCALED_DOWN, SCALED_DOWN_STRENGTH, bh_adjust, excludes_zero, fmt_ci, mean_ci, paired_t_p,
                            strength, verdict)


def rank(c):
    """Which of two nested comparisons of the same runs the summary shows: more seeds, then a claim
    over a control, then one whose verdict says seeds were added after a look."""
    return len(c["seeds"]), bool(c["expected"]), "added after a look" in c["verdict"]


def claim_p_values(rows, key="diffs"):
    """{row index: Benjamini-Hochberg adjusted p} over the summary's claim rows with 2 seeds or more
    (paired_t_p, then bh_adjust over all of them at once); control rows stay out of the family.
    rows: [(comparison, names)] as summary builds them; key: "diffs" (every seed) or
    "planned_diffs" (the seeds planned before any look)."""
    claims = [i for i, (c, _) in enumerate(rows) if is_claim(c) and len(c[key]) > 1 and complete(c)
              and ("ladder" not in c or c["p"] is not None)]
    return dict(zip(claims, bh_adjust([rows[i][0]["p"] if "ladder" in rows[i][0] else paired_t_p(rows[i][0][key])
                                       for i in claims])))


def is_claim(c):
    """Whether a summary row is in the claim family: it has a claim's direction and no file that makes
    it declares itself a control (its `control` line) without another file claiming it."""
    return bool(c["expected"]) and not c.get("control")


def complete(c):
    """Whether every planned seed of a comparison is recorded: a row still running is reported
    but stays out of the correction's family (its p would change as seeds arrive)."""
    return len(c["planned_diffs"]) >= c["planned_n"]


def row_strength(c, p_planned):
    """A summary row's strength on its planned seeds (stats.strength of their interval and of
    p_planned, their Benjamini-Hochberg adjusted p): "pending (k of n planned seeds)" while a claim
    row's planned seeds are not all recorded (complete), "-" for a control row (no claim, or a control
    file's: is_claim), "scaled down" for a row of a --scale_down plot (stats.SCALED_DOWN: no claim word
    for miniature runs); a row a file declared exploratory (its "exploratory" key, set by summary_rows)
    or whose arms shared one untuned LR (its "lr", "shared") a lead at most."""
    if c["verdict"] == SCALED_DOWN:
        return SCALED_DOWN_STRENGTH
    ci = c["planned_ci"] if "ladder" in c else mean_ci(c["planned_diffs"])
    if is_claim(c) and not complete(c):
        return f"pending ({len(c['planned_diffs'])} of {c['planned_n']} planned seeds)"
    if not is_claim(c):
        return "-"
    return strength(ci, p_planned, c["expected"], c.get("exploratory", False),
                    c.get("lr") if c.get("lr") in ("shared", "untuned") else False, c.get("apart", ()))


def summary_rows(collected):
    """The summary's rows and where each file's comparison went: ([[comparison shown, names of the
    files that make it]], {(file name, setting, variant, reference): (row index, the file's own
    comparison)}), ladder rows included (setting: the ladder's name).

    A comparison several files make (the same variant and reference configs as run, seed aside)
    is one row naming them all, showing the largest of their seed sets when these nest (rank
    breaks ties), exploratory when any of them declares it so; seed sets that do not nest stay
    separate rows, so no file's result hides another's. A file that claims nothing (no
    `expected`, e.g. an LR sweep) adds no rows; a row without a claim in a file that has some, and
    every row of a file that declares itself a control (`control`), is a control (is_claim). A
    merged row's arms ran at tuned LRs when any of its files tuned them. collected: as collect_all
    returns it."""
    rows, where = [], {}
    for spec, results, _, _ in sorted(collected, key=lambda x: x[0]["name"]):
        if not spec["expected"] and not any(e for *_, e in spec["comparisons"]):
            continue  # a file that claims nothing (an LR sweep): its tables only
        for c in comparisons(spec, results):
            if not c["diffs"]:
                continue
            c["exploratory"] = is_exploratory(spec, f"{c['variant']} - {c['reference']}")
            i = next((i for i, r in enumerate(rows) if r[0]["key"] == c["key"] and (
                set(c["seeds"]) <= set(r[0]["seeds"]) or set(c["seeds"]) >= set(r[0]["seeds"]))), None)
            where[(spec["name"], c["setting"], c["variant"], c["reference"])] = (len(rows) if i is None else i, c)
            if i is None:  # new, or seed sets that do not nest: a row of its own
                rows.append([c, [spec["name"]]])
                continue
            row = rows[i]
            if spec["name"] not in row[1]:  # (a file's own settings can run alike: --scale_down's miniatures)
                row[1].append(spec["name"])
            c["exploratory"] = row[0]["exploratory"] = c["exploratory"] or row[0]["exploratory"]  # any file's word
            # the same runs: tuned when any file chose their LR by tuning; a control only when every file says so
            c["lr"] = row[0]["lr"] = next(w for w in ("tuned", "untuned", "shared") if w in (c["lr"], row[0]["lr"]))
            c["control"] = row[0]["control"] = c["control"] and row[0]["control"]
            if rank(c) > rank(row[0]):
                if row[0]["expected"] and not c["expected"] and c["seeds"] != row[0]["seeds"]:
                    c = {**c, "expected": row[0]["expected"],  # a control's larger seed set, the claim kept
                         "verdict": c["verdict"] if c["verdict"] == SCALED_DOWN else
                         verdict(c["ci"], len(c["diffs"]), row[0]["expected"])}
                row[0] = c
        for c in ladder_rows(spec, results):
            c.setdefault("lr", "tuned" if spec["tune_lr"] else "shared")
            c.setdefault("control", bool(spec["control"]))
            if c["diffs"]:
                c["exploratory"] = is_exploratory(spec, c["setting"])  # setting: the ladder's name
                where[(spec["name"], c["setting"], c["variant"], c["reference"])] = (len(rows), c)
                rows.append([c, [spec["name"]]])
    return rows, where


def file_strengths(collected):
    """{(file name, setting, variant, reference): the strength the summary gives the row that file's
    comparison is in (row_strength, BH over every claim row of collected)}: the word a file's table
    heading and figure titles state beside its verdict. Where the summary shows another file's seed
    set, its planned seeds differing from the file's own, the word says whose row it is."""
    rows, where = summary_rows(collected)
    planned = claim_p_values(rows, "planned_diffs")
    out = {}
    for key, (i, own) in where.items():
        shown, names = rows[i]
        word = row_strength(shown, planned.get(i))
        if shown["planned_diffs"] != own["planned_diffs"] and word not in ("-", SCALED_DOWN_STRENGTH):
            word = f"the summary's row ({', '.join(names)}), on its {len(shown['planned_diffs'])} planned seeds: {word}"
        out[key] = word
    return out


# The "arms' LR" column: how a row's arms got their LRs (ablation.lr_protocol, computed from the records).
LR_WORDS = {"tuned": "each tuned", "untuned": "each its own, untuned", "shared": "shared, untuned"}


def summary(collected):
    """Markdown: one table of every paired comparison of the given ablations (summary_rows), sorted by
    file name, each claim row's Benjamini-Hochberg adjusted p (claim_p_values; a control row '-'),
    and a last line (counts): how many claim rows would exclude 0 by chance, how many do, how many
    survive the correction. collected: as collect_all returns it."""
    rows, _ = summary_rows(collected)
    adjusted, planned = claim_p_values(rows), claim_p_values(rows, "planned_diffs")
    out = ["| ablation | setting | variant - reference | seeds | mean diff [95% CI] | p (BH) | arms' LR | claim | verdict | "
           "strength |", "|---|---|---|---|---|---|---|---|---|---|"]
    for i, (c, names) in enumerate(rows):
        n, k = len(c["diffs"]), len(c["planned_diffs"])
        p_txt = f"{planned[i]:#.3g}" if i in planned else "-"
        if k < n and i in adjusted:  # seeds added after a look: every seed's p, in its own family, beside
            p_txt += f" (all {n} seeds: {adjusted[i]:#.3g})"
        seeds = f"{n}{f' ({k} planned)' if k < n else ''}" if "ladder" not in c else \
            "per rung " + ", ".join(str(len(x)) for x in c["per_rung"].values())
        diff = fmt_ci(c["ci"]) if "ladder" not in c else f"compute multiplier {ladder_text(c)}"
        out.append(f"| {', '.join(f'`{n}`' for n in names)} | {c['setting']} | {c['variant']} - {c['reference']} | "
                   f"{seeds} | {diff} | {p_txt} | {LR_WORDS[c.get('lr', 'shared')]} | "
                   f"{c['expected'] if is_claim(c) else '(control)'} | {c['verdict']} | {row_strength(c, planned.get(i))} |")
    return "\n".join(out + ["", counts(rows, collected, adjusted, planned)])


def counts(rows, collected, adjusted, planned):
    """The summary's last paragraph: what its rows are, the p (BH) column's family, and how many claim
    rows are findings and leads (a --scale_down plot's: none counted, stats.SCALED_DOWN)."""
    claims = [(i, c) for i, (c, _) in enumerate(rows) if is_claim(c) and complete(c)]
    pending = sum(1 for c, _ in rows if is_claim(c) and not complete(c))
    shared = sum(c.get("lr") != "tuned" for _, c in claims)
    controls = sum(1 for c, _ in rows if c["expected"] and c.get("control"))
    words = [row_strength(c, planned.get(i)) for i, c in claims]
    survivors = [rows[i] for i, p in adjusted.items() if p <= 0.05]
    survive = [f"{', '.join(f'`{n}`' for n in names)} {c['setting']} {c['variant']} - {c['reference']}"
               for c, names in survivors]
    excluding = sum(excludes_zero(c["ci"]) for _, c in claims)
    family = f"the {len(planned)} claim rows" + (" with 2 seeds or more" if len(planned) < len(claims) else "")
    modes = sorted({mode_text(mode) for *_, mode in collected if mode})
    units = {unit(e["config"]) for _, results, *_ in collected for e in results.values() if e["config"]}
    per = {frozenset({"characters"}): "nats per character", frozenset({"tokens"}): "nats per token"}.get(
        frozenset(units), "nats per token; per character for character-level runs")
    head = (f"{len(rows)} comparisons, {len(claims)} of them with a claim whose planned seeds are all recorded"
            f"{f' ({pending} more still running: pending, outside the counts and the correction)' if pending else ''}"
            f", each its own 95% Student-t interval over seeds (final val loss, {per}; negative: the variant "
            f"is lower). p (BH): the two-sided paired t test's p on the seeds planned before any look, adjusted by "
            f"Benjamini-Hochberg over {family}; a row with seeds added after a look also gives the p of all its "
            f"seeds, adjusted over the same rows with all theirs. ")
    own = sum(c.get("lr") == "untuned" for _, c in claims)
    apart = [(i, c) for i, c in claims if c.get("apart")]
    lrs = (f"Arms' LR: of the {len(claims)} claim rows, {len(claims) - shared} ran each arm at its own LR tuned by "
           f"the rule (the mean of 2 tuning seeds or more, every choice interior to its grid, computed from the "
           f"records) and {shared} did not: {shared - own} ran both arms at one shared, untuned LR (it tells about that "
           f"LR, a lead at most about the variants: stats.strength)"
           + (f" and {own} chose each arm's LR otherwise (on one seed, or at a grid's edge: a lead at most)" if own else "")
           + ". Pairs: each seed's arms are records of one CPU type (device name and vector ISA; a record that names "
           "neither is its own unknown type), from the code most of the setting's records name; "
           + (f"{len(apart)} rows pair some seeds across CPU types, marked in their strength (a lead at most)"
              if apart else "every row's seeds pair within one CPU type")
           + f"{f'; {controls} rows of files declared controls are shown, outside the claim family' if controls else ''}. ")
    tail = f"Runs: {'; '.join(modes)}. Full tables: <ablation>.md beside this summary."
    if any(spec.get("scale_down") for spec, *_ in collected):
        return (head + f"Every row is {SCALED_DOWN}: miniature runs of the files' rules through the same code, "
                f"so no row gets a verdict or a strength and none is counted. " + tail)
    return (head + lrs + f"With no effect anywhere, about "
            f"{len(claims) / 20:.2g} of the {len(claims)} would exclude 0 by chance. On the planned seeds: "
            f"{sum(w.startswith('finding') for w in words)} findings (p (BH) <= 0.05: the correction survived), "
            f"{sum(w.startswith('lead') for w in words)} leads (the interval excludes 0 only uncorrected), "
            f"{sum(w.endswith('against the claim') for w in words)} of these against their claim, the rest "
            f"unresolved. With every seed: {excluding} exclude 0 and {len(survive)} survive the correction"
            + (f" ({'; '.join(survive)}: "
               f"{sum(c.get('lr') == 'tuned' for c, _ in survivors)} of them with each arm tuned; the strengths "
               f"stay the planned seeds')" if survive else "")
            + " (the verdicts stay the intervals'). "
            + ("A ladder's row is its compute multiplier (> 1: the variant reaches the reference's loss with less "
               "compute) with its 95% interval over seeds and rungs; its sign on the loss scale, and its p, join "
               "the same family. " if any("ladder" in c for c, _ in rows) else "")
            + tail)


README_BEGIN = "<!-- summary: python -m research.plot configs/ablations/*.py --out=assets --readme=results/README.md -->"
README_END = "<!-- end of summary -->"


def replace_block(text, block, path):
    """text with what lies between README_BEGIN and README_END replaced by block; UserError if the
    markers are missing."""
    i = text.find(README_BEGIN)
    j = text.find(README_END, i + 1) if i >= 0 else -1
    if j < 0:
        raise UserError(f"{path} has no summary block: put the lines {README_BEGIN!r} and {README_END!r} "
                        f"where the table goes")
    return text[:i + len(README_BEGIN)] + "\n" + block + "\n" + text[j:]

