"""The research workflow. Run from the repository root: python -m research.sweep ..., python -m
research.plot ..., python -m research.ladder ....

The commands: sweep.py trains and records an ablation's runs (slurm.py: as Slurm jobs), plot.py
writes its tables and figures from the records alone (--run: runs' curves from their logs), and
ladder.py plans a size ladder before anything runs. Beneath them, one concept a module:
    ablation.py            an ablation file: its format, its checks and the runs it plans
    records.py             a run's record (results/<name>.json): its log read and checked, its provenance
    stats.py               the statistics, and every word a row may use (verdict, strength)
    regime.py              a run's parameters, FLOPs, tokens and their unit, data coverage, decay pull
    comparisons.py         an ablation's records gathered and paired by seed: its comparisons
    tables.py              an ablation file's tables (<name>.md)
    trends.py              the gap against width or tokens per parameter
    multipliers.py         the token multiplier, and the compute multiplier along a ladder
    summary.py             the summary of every ablation (BH, strengths) and its README block
    figures.py             an ablation file's figures
    mechanism_figures.py   the mechanism statistics per site kind, and a file's figure of them
    mechanism_question.py  a file's pre-registered mechanism question: its rows, table and figure
    run_figures.py         runs' figures from their logs (plot.py --run)
"""
