"""Where a command meets the file system, for every command: the one line a refusal becomes
(os_error_line: permission, a full disk, a quota, a file-size limit, a read-only disk, a name too
long, a path gone; found under a library's wrapping by os_error, or named by `writing`), a path this
user may not look at (present), and the temporaries a killed run leaves (temporary_prefix,
remove_leftovers). common.cli prints the line; nothing here imports torch.
"""

import errno
import os
import re
import shlex
import shutil
import sys
from contextlib import contextmanager


# errno -> (the cause, the fix); {path} is the path the error names, {folder} the folder that holds it
OS_CAUSES = {
    errno.ENOSPC: ("the disk is full", "free space on it (df -h {folder})"),
    errno.EDQUOT: ("the disk quota is used up", "free space within the quota (quota -s), or use another disk"),
    errno.EFBIG: ("the file passed this process's file-size limit", "raise the limit (ulimit -f unlimited) or "
                  "write elsewhere"),
    errno.EACCES: ("permission denied: this user {access}", "give this user access (ls -ld {path}; chmod or "
                   "chgrp), or use a path it owns"),
    errno.EROFS: ("it is on a read-only file system", "write to a folder on a writable disk"),
    errno.ENAMETOOLONG: ("the path, or a name in it, is longer than the file system allows (as a rule 4096 "
                         "bytes a path, 255 a name)", "use a shorter path"),
    errno.ENOENT: ("it does not exist (moved or removed while the command ran?)", "put it back, or use the path "
                   "where it is"),
}
SHORT_WRITE = -1  # numpy's tofile when the disk takes part of a write: it raises with no errno
OS_CAUSES[SHORT_WRITE] = ("the disk took part of the write: it is full, or a quota or a file-size limit was "
                          "reached", "free space (df -h {folder}), raise the limit (ulimit -f unlimited) or write "
                          "elsewhere")
OS_CAUSES[errno.EPERM] = OS_CAUSES[errno.EACCES]
OS_CAUSES[errno.ENOTDIR] = OS_CAUSES[errno.ENOENT]


def os_error(e):
    """The OSError at the root of exception e, or None: e itself, its cause or context, the first
    failure a torch.distributed.checkpoint CheckpointException carries, or the OS error a safetensors
    SafetensorError or numpy's short write (a full disk's tofile: no errno) describes in words."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in OS_CAUSES:
            return e
        if isinstance(e, OSError) and e.errno is None and re.fullmatch(r"\d+ requested and \d+ written", str(e)):
            return OSError(SHORT_WRITE, f"a short write ({e})")
        failures = getattr(e, "failures", None) if type(e).__name__ == "CheckpointException" else None
        if failures:
            first = failures[min(failures)]
            e = first[0] if isinstance(first, tuple) else first  # a rank's failure: (exception, its stack)
            continue
        code = re.search(r"\(os error (\d+)\)", str(e)) if type(e).__name__ == "SafetensorError" else None
        if code and int(code.group(1)) in OS_CAUSES:
            return OSError(int(code.group(1)), os.strerror(int(code.group(1))))
        e = e.__cause__ or e.__context__
    return None


@contextmanager
def writing(path):
    """A context for a library's write of `path` (numpy's tofile, safetensors, save_pretrained,
    torch.distributed.checkpoint): a refusal of the file system under the library's own wrapping
    (os_error) comes out as an OSError naming path, so cli's line says where; else unchanged."""
    try:
        yield
    except BaseException as e:
        err = os_error(e)
        if err is None or isinstance(e, OSError) and e.filename:
            raise
        raise OSError(err.errno, err.strerror, os.fspath(path)) from e


def os_error_line(e):
    """One line for exception e when an OSError of OS_CAUSES is at its root (os_error), else None:
    'error: <strerror> at <path>: <cause>; nothing saved is lost ...; <fix>, then run the same command
    again'. Every file a command writes is written whole or not at all (a temporary name, then a
    rename), so the line can promise that what was saved before is intact."""
    err = os_error(e)
    if err is None:
        return None
    path = err.filename2 if err.errno == errno.EACCES and err.filename2 and not _may_write(err.filename2) else err.filename
    path = os.fsdecode(path) if path is not None else None
    cause, fix = OS_CAUSES[err.errno]
    fill = {"path": shlex.quote(path or "."), "access": _access_words(path),
            "folder": shlex.quote(os.path.dirname(path) or ".") if path else "of the folder it writes"}
    where = f" at {path}" if path else ""
    cache = hf_cache_on_the_way(path)
    if cache:  # not the command's own path: the true cause is where HOME (or HF_HOME) points
        cause = f"Hugging Face's cache ({cache}, where transformers keeps a model folder's code) cannot be made there"
        fix = "point HF_HOME at a folder this user can write (export HF_HOME=/a/writable/folder)"
    stream = getattr(err, "stream", None)  # (stops.NamedStdout) a file the user gave the shell, not the command
    if stream:
        where = f" at {path} ({stream})" if os.path.isabs(path) else f" at {stream}"
        fill["folder"] = shlex.quote(os.path.dirname(path)) if os.path.isabs(path) else "of where it goes"
    kept = "" if err.errno in (errno.ENOENT, errno.ENOTDIR) and not cache else \
        "; nothing saved before is lost (every file is written whole or not at all)"  # (a path gone took its files)
    return (f"error: {err.strerror or os.strerror(err.errno)}{where}: {cause.format(**fill)}{kept}; "
            f"{fix.format(**fill)}, then run the same command again (a training run: add --init_from=auto to "
            f"continue from its checkpoint)")


def hf_cache_on_the_way(path):
    """Hugging Face's cache folder (HF_HOME, by default ~/.cache/huggingface, as huggingface_hub sets it)
    when path is that folder, inside it, or a folder on the way to it (a HOME this user may not write),
    else None."""
    if not path or not os.path.isabs(path):
        return None
    default = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                           "huggingface")
    cache = os.path.abspath(os.path.expanduser(os.environ.get("HF_HOME") or default))
    path = os.path.abspath(path)
    on_the_way = path == cache or cache.startswith(path.rstrip(os.sep) + os.sep) or path.startswith(cache + os.sep)
    return cache if on_the_way and path != os.sep else None


def _may_write(path):
    return os.access(os.path.dirname(os.fsdecode(path)) or ".", os.W_OK)


def _access_words(path):
    """What this user may not do at path, in words, from what the file system says now."""
    user = _user()
    if path is None:
        return f"({user}) may not open a file it needs"
    if os.path.lexists(path):
        if os.path.isdir(path):
            return f"({user}) may not list or create files in this folder"
        if not os.access(path, os.R_OK):
            return f"({user}) may not read this file"
        return f"({user}) may not write this file"
    folder = os.path.dirname(os.path.abspath(path))
    above = [folder]
    while os.path.dirname(above[-1]) != above[-1]:
        above.append(os.path.dirname(above[-1]))
    locked = next((a for a in reversed(above) if os.path.isdir(a) and not os.access(a, os.X_OK)), None)
    if locked is not None:
        return f"({user}) may not look inside {locked} (no search permission on the folder)"
    return f"({user}) may not create files in {folder}"


def _user():
    try:
        import pwd
        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return f"uid {os.geteuid()}"


def temporary_prefix(prefix):
    """The start of a temporary's name that carries this process's id (prefix + '<pid>-'), so that a
    later run can tell a killed run's leftover (remove_leftovers) from a running one's."""
    return f"{prefix}{os.getpid()}-"


def remove_leftovers(folder, prefix, what):
    """Remove from folder the temporaries a killed run of this command left (a SIGKILL runs no cleanup):
    entries named temporary_prefix(prefix) + anything whose process is no longer running (a running
    one's are another run's, kept; a link is never followed). One line on stderr per entry removed,
    naming it and `what` it held. Returns the paths removed."""
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return []
    removed = []
    for name in names:
        found = re.fullmatch(re.escape(prefix) + r"(\d+)-.*", name, re.S)
        path = os.path.join(folder, name)
        if found is None or _running(int(found.group(1))) or os.path.islink(path):
            continue
        try:
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
        except OSError as e:  # (another user's, in a shared folder): said, and left
            print(f"could not remove {path} ({e.strerror}): {what}, left by a run of this command that was killed; "
                  f"remove it by hand", file=sys.stderr)
            continue
        print(f"removed {path}: {what}, left by a run of this command that was killed", file=sys.stderr)
        removed.append(path)
    return removed


def _running(pid):
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # (an id past any process's: none either)
        return False
    except PermissionError:  # another user's process
        return True
    return True


def present(path):
    """Whether anything is at path (a dangling link too), as os.path.lexists; but where this user may not
    look (a folder above it without search permission), the PermissionError naming path, never False:
    a folder that is only locked is not said to be missing."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    return True
