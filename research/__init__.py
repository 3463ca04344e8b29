"""The research workflow: ablation files (ablation.py), the runner that trains and records their
runs (sweep.py), the statistics (stats.py), and the tables and figures (plot.py). Run from the
repository root: python -m research.sweep ..., python -m research.plot ...."""
