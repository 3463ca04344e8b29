"""Bring run records made elsewhere (a sweep into another --results folder, on another machine or
commit) into results/, keeping one record per run:

    python -m research.adopt /elsewhere/results/*.json             # into results/
    python -m research.adopt /elsewhere/results/*.json --results=results

A record whose config has no record here is copied as it is. One whose config has a record made on
another CPU type (device name and vector ISA) or commit is kept beside it as a rerun, named
<its name>_rerun-<commit>-<CPU type> with "rerun_of": the name it reruns (records.adopt); the
tables then pair each seed's arms on one CPU type (comparisons.collect). A record of the same run on
the same CPU type and commit, or a damaged one, is one line and nothing is written.
"""

import argparse
import os
import sys

if __package__ in (None, ""):  # run by its path: its imports live at the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from plumbing import common  # noqa: E402 (from the repository root, the path above)

common.set_omp_env()  # before torch loads: idle OpenMP threads sleep instead of spinning

from configurator import UserError, folder_problem  # noqa: E402
from plumbing.common import cli  # noqa: E402
from research.records import adopt, load_records  # noqa: E402


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("records", nargs="+", help="record files (<name>.json) to bring in")
    p.add_argument("--results", default="results", help="the records' folder (default results/)")
    args = p.parse_args(argv)
    if not os.path.isdir(args.results):
        raise UserError(f"--results={args.results}: not a folder of records; name the results/ folder the records join")
    problem = folder_problem(args.results)
    if problem:
        raise UserError(f"--results={args.results}: {problem}")
    for path in args.records:
        if not os.path.isfile(path):
            kind = "a folder" if os.path.isdir(path) else "not a regular file" if os.path.exists(path) else "not found"
            raise UserError(f"{path or repr(path)}: {kind}; give record files (<name>.json) made by research.sweep")
    load_records(args.results)  # a folder that breaks the rules is said before anything is added to it
    for path in args.records:
        print(f"adopted {path} as {adopt(path, args.results)}")
    return 0


if __name__ == "__main__":
    cli(main)
