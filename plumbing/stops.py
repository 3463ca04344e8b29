"""How a process stops: the signals that ask it to end (SIGTERM, a closed terminal's SIGHUP, Ctrl-C), a
stdout whose reader went away, and standard streams closed at start. common.cli and train.py's loop
(StopSignals) act on them; every command imports this (through plumbing.common) before torch, so a
SIGTERM during its imports is one line."""

import os
import signal
import sys
import threading
from contextlib import contextmanager


def _terminated_while_starting(signum, frame):
    os.write(2, f"terminated ({signal.Signals(signum).name}) while starting: nothing was done; run the same command "
                f"again\n".encode())
    os._exit(128 + signum)


# Every command imports this module first, before torch (seconds): a SIGTERM or SIGHUP meanwhile ends it
# with one line instead of none (Python's default); cli then installs the handler that cleans up.
if threading.current_thread() is threading.main_thread():
    for _sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(_sig) is signal.SIG_DFL:
            signal.signal(_sig, _terminated_while_starting)


def attach_closed_streams():
    """Give each of the standard descriptors 0, 1, 2 that the process was started without (`>&-`,
    `2>&-`, `<&-`) /dev/null, and make sys.stdin, sys.stdout and sys.stderr, which Python then sets to
    None, read or write it. Without this the first file the command opens takes descriptor 1 and a
    child process started later writes its output into that file, and sys.stdout.flush() is an
    AttributeError after the work is done."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: this one
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
            os.set_inheritable(fd, True)  # (os.open's are not): a child's stdout too
    for name, mode in (("stdin", "r"), ("stdout", "w"), ("stderr", "w")):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, mode))


def stdout_target():
    """Where descriptor 1 goes, as a path ('/dev/full', a log file), or None (a pipe, a socket, or a
    system without /proc)."""
    try:
        target = os.readlink("/proc/self/fd/1")
    except OSError:
        return None
    return target if target.startswith("/") else None


class NamedStdout:
    """sys.stdout as cli runs a command: a write refused by the file system where stdout goes (a full
    disk, a quota, a file-size limit) raises an OSError naming that path, with `stream` set, so cli's
    line names it instead of no path; the first such error is kept (`failed`), as argparse and other
    callers swallow a print's OSError and cli raises it at the end. A reader that went away
    (BrokenPipeError) passes unchanged. Everything else is the wrapped stream's."""

    stream = "this command's standard output"

    def __init__(self, wrapped):
        self.wrapped, self.failed = wrapped, None

    def write(self, text):
        try:
            return self.wrapped.write(text)
        except OSError as e:
            raise self._named(e) from e

    def flush(self):
        try:
            return self.wrapped.flush()
        except OSError as e:
            raise self._named(e) from e

    def _named(self, e):
        if isinstance(e, BrokenPipeError) or e.filename is not None:
            return e
        named = OSError(e.errno, e.strerror, stdout_target() or "standard output")
        named.stream = self.stream
        self.failed = self.failed or named
        return named

    def __getattr__(self, name):
        return getattr(self.wrapped, name)


def name_stdout():
    """Make sys.stdout a NamedStdout (once)."""
    if not isinstance(sys.stdout, NamedStdout):
        sys.stdout = NamedStdout(sys.stdout)


def drop_stdout():
    """Point descriptor 1 at /dev/null: output still buffered for a stdout that refused it goes nowhere,
    instead of a second error when the interpreter flushes at exit. The refusal is then said (cli's
    line, or say()'s), so NamedStdout forgets it."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    if isinstance(sys.stdout, NamedStdout):
        sys.stdout.failed = None


# The signals that ask a process to end: a scheduler's SIGTERM, and SIGHUP, which a terminal that closes
# (a dropped ssh session) sends to every process it started. cli and StopSignals treat them alike.
TERMINATING = (signal.SIGTERM, signal.SIGHUP)


class Terminated(BaseException):
    """Raised in the main thread by a SIGTERM or SIGHUP (`name`) under cli: every finally on the way
    out runs. A BaseException, as KeyboardInterrupt: a library's `except Exception` must not swallow it
    (a half-done import would be left behind)."""

    def __init__(self, name="SIGTERM"):
        super().__init__(name)
        self.name = name


def _terminate(signum, frame):
    for sig in TERMINATING:  # one cleanup: schedulers may send several, a closing terminal SIGHUP and SIGCONT
        if signal.getsignal(sig) is _terminate:
            signal.signal(sig, signal.SIG_IGN)
    raise Terminated(signal.Signals(signum).name)


class StopSignals:
    """A context in which SIGTERM, SIGHUP and SIGINT ask the program to stop cleanly instead of killing it.

    Clusters send SIGTERM some seconds before SIGKILL; a terminal that closes (a dropped ssh session)
    sends SIGHUP; Ctrl-C sends SIGINT. Inside the context the first of them sets `received` (its name,
    e.g. "SIGTERM") and writes `note` (if any) to stderr; the program polls `received` at a point where
    stopping is clean. A stdout whose reader went away (say: EPIPE), or that refuses a write (a full
    disk), stops the program the same way, as "SIGPIPE". A later SIGINT raises KeyboardInterrupt when
    `repeat_quits` (a second Ctrl-C quits at once; cli shows it as one line), except inside `saving()`,
    where a file is being written: it waits there for the file to be whole. Otherwise a later signal is ignored (schedulers may send
    several). A signal that was ignored when the context began (SIGINT in a background job, SIGHUP
    under nohup) stays ignored; outside the main thread nothing is installed. The previous handlers
    come back on exit.

    train.py's loop polls once per iteration (agree), so the step under way finishes, every
    micro-step of its accumulation, or after the current batch of an evaluation (which the resume
    runs again); it saves the last whole iteration and exits with 128 + the signal's number (143,
    129, 130, 141: what a shell reports for a process that signal killed), printing how to continue
    (--init_from=resume, or --init_from=auto, the one command for a job that may be preempted and
    requeued); the resumed run is the uninterrupted one, bit for bit. Under torchrun, signal
    torchrun (it passes SIGTERM to every process) or any one process: all ranks stop after the same step.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    active = None  # the context open now, which say() tells of a stdout gone

    def __init__(self, note="", repeat_quits=True):
        self.note, self.repeat_quits = note, repeat_quits
        self.received, self.previous, self.writing, self.quit_asked = None, {}, False, False

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self.previous[sig] = signal.signal(sig, self.handle)
            StopSignals.active = self
            if _stdout_lost:  # before the context began: the stop is asked now
                self.received = "SIGPIPE"
        return self

    def handle(self, signum, frame):
        name = signal.Signals(signum).name
        if self.received is None:
            self.received = name
            if self.note:  # os.write: a print here could re-enter a print the signal interrupted
                _write_stderr(f"{name}: {self.note}\n")
        elif signum == signal.SIGINT and self.repeat_quits:
            if not self.writing:
                raise KeyboardInterrupt
            if not self.quit_asked:
                _write_stderr("SIGINT: a checkpoint is being written; the run quits once it is whole\n")
            self.quit_asked = True

    @contextmanager
    def saving(self):
        """A block that writes a file (a checkpoint): a second Ctrl-C inside it waits for its end, then
        raises KeyboardInterrupt (the file written whole; cli says "interrupted" in one line), instead of
        breaking the write in the middle, where torch's writer adds its own error to the traceback."""
        self.writing, self.quit_asked = True, False
        try:
            yield
        finally:
            self.writing = False
        if self.quit_asked:
            raise KeyboardInterrupt

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
        self.previous = {}
        if StopSignals.active is self:
            StopSignals.active = None


def _write_stderr(text):
    try:
        os.write(2, text.encode())
    except OSError:  # stderr closed or gone: the run goes on
        pass


_stdout_lost = False  # say() met a stdout whose reader went away, or that refused a write


def say(*args):
    """print(*args) to stdout, flushed: a run's progress lines. When stdout's reader has gone away (a pipe
    closed mid-run: `| head`, a log collector that died), or where it goes refuses the write (a full
    disk, a file-size limit), the write's error does not end the process unsaved: stdout then goes to
    /dev/null, the open StopSignals (or the next one) receives "SIGPIPE", so train.py saves at the step
    and stops as for SIGTERM, and this line and every later one go to stderr."""
    global _stdout_lost
    if not _stdout_lost:
        try:
            print(*args, flush=True)
            return
        except OSError as e:
            _stdout_lost = True
            drop_stdout()  # the buffered rest goes nowhere, and no error at exit
            active = StopSignals.active
            if active is not None and active.received is None:
                active.received = "SIGPIPE"
            why = "stdout's reader went away" if isinstance(e, BrokenPipeError) else \
                f"stdout ({e.filename or 'standard output'}) refused a write: {e.strerror}"
            _write_stderr(f"SIGPIPE: {why}; the run stops after the step under way, saved, and says the rest here\n")
    print(*args, file=sys.stderr, flush=True)
