"""train.py's loop keeps the device busy: it reads losses back to the host once per log_interval
(not once per step), reads each micro-batch one micro-step ahead, and still writes the same log
rows, stops every rank alike and names the first diverged iteration."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import train as train_mod
from model import GPT
from plumbing import contracts
from test_reliability import final_weights, signal_at
from test_train import make_dataset, read_log, run, tiny_args


class HostReads(TorchDispatchMode):
    """Counts the reads of a tensor's values by the host while `on`: .item(), float(), int() and
    bool() of a tensor dispatch aten._local_scalar_dense; .tolist() and .numpy() read the memory
    directly, so they are counted by a patch (install). On a GPU each one waits for the device."""

    def __init__(self):
        super().__init__()
        self.count, self.on = 0, False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.on and func is torch.ops.aten._local_scalar_dense.default:
            self.count += 1
        return func(*args, **(kwargs or {}))

    def install(self, monkeypatch):
        for name in ("tolist", "numpy"):
            real = getattr(torch.Tensor, name)

            def counted(tensor, *args, _real=real, **kwargs):
                self.count += self.on
                return _real(tensor, *args, **kwargs)
            monkeypatch.setattr(torch.Tensor, name, counted)


@pytest.mark.parametrize("log_interval", [1, 4])
def test_the_loop_reads_the_device_once_per_log_interval(tmp_path, monkeypatch, log_interval):
    """Counted between the evaluation at iteration 0 and the final one (start-up and evals aside) of
    12 iterations of 2 micro-steps: 12 / log_interval reads (the flushes). The loop before the
    losses were kept on the device read them at every iteration: 12 reads at log_interval=4."""
    reads = HostReads()
    reads.install(monkeypatch)
    real_eval, evals = train_mod.eval_and_save, []

    def counted_outside(*args, **kwargs):
        reads.on = False
        evals.append(reads.count)
        val = real_eval(*args, **kwargs)
        reads.on = True
        return val

    monkeypatch.setattr(train_mod, "eval_and_save", counted_outside)
    ds = make_dataset(tmp_path / "ds")
    with reads:
        run(tiny_args(ds, tmp_path / "o", "--max_iters=12", "--eval_interval=12", f"--log_interval={log_interval}",
                      "--gradient_accumulation_steps=2"))
    assert evals == [0, 12 // log_interval]  # (a slow machine's progress line adds a flush: it had none here)



def probing(monkeypatch):
    """{"on": bool}: True while train.py's start check (contracts.check_model) runs its forwards on a copy of
    the model; a test that counts the loop's forwards leaves those out."""
    state, real = {"on": False}, contracts.check_model

    def check(*args, **kwargs):
        state["on"] = True
        try:
            return real(*args, **kwargs)
        finally:
            state["on"] = False

    monkeypatch.setattr(contracts, "check_model", check)
    return state


def test_each_micro_batch_is_read_one_micro_step_ahead(tmp_path, monkeypatch):
    """The host reads (and on CUDA starts sending) micro-batch (i, j + 1), or (i + 1, 0) after a step's
    last, before the forward of (i, j); every batch of the run once, none past max_iters."""
    events, real_batch, real_forward, probe = [], train_mod.get_batch, GPT.forward, probing(monkeypatch)

    def get_batch(data, split, index, j, *rest):
        if split == "train":
            events.append((index, j))
        return real_batch(data, split, index, j, *rest)

    def forward(self, idx, targets=None):
        if self.training and not probe["on"]:
            events.append("forward")
        return real_forward(self, idx, targets)

    monkeypatch.setattr(train_mod, "get_batch", get_batch)
    monkeypatch.setattr(GPT, "forward", forward)
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=3", "--eval_interval=2", "--gradient_accumulation_steps=2"))
    assert events == [(0, 0), (0, 1), "forward", (1, 0), "forward", (1, 1), "forward", (2, 0), "forward",
                      (2, 1), "forward", "forward"]


def test_the_log_rows_do_not_depend_on_when_they_are_flushed_and_a_stop_flushes_them(tmp_path, monkeypatch, capsys):
    """log_interval=3 writes the rows of log_interval=1, value for value; a SIGTERM during step 4
    (0-based; between flushes: row 5 is still on the device) stops after it with rows 1-5 in the log
    before the checkpoint at 5, and the resume ends as the uninterrupted run."""
    ds = make_dataset(tmp_path / "ds")
    common = ["--max_iters=8", "--eval_interval=4", "--gradient_accumulation_steps=2", "--dropout=0.1"]
    run(tiny_args(ds, tmp_path / "a", *common))
    run(tiny_args(ds, tmp_path / "b", *common, "--log_interval=3"))
    assert read_log(tmp_path / "b") == read_log(tmp_path / "a")
    monkeypatch.setattr(train_mod, "get_batch", signal_at(4, micro_step=1))  # read during step 4 (0-based)
    assert run(tiny_args(ds, tmp_path / "c", *common, "--log_interval=3"))["stopped"] == "SIGTERM"
    monkeypatch.undo()
    assert torch.load(tmp_path / "c" / "ckpt.pt", weights_only=True)["iter"] == 5
    assert read_log(tmp_path / "c") == [r for r in read_log(tmp_path / "a") if r["iter"] <= 5 and r["kind"] == "train"
                                        or r["iter"] < 5]
    assert "stopped by SIGTERM after iteration 5/8" in capsys.readouterr().out
    run(["--init_from=resume", f"--out_dir={tmp_path / 'c'}"])
    assert read_log(tmp_path / "c") == read_log(tmp_path / "a")
    for name, tensor in final_weights(tmp_path / "a").items():
        assert torch.equal(tensor, final_weights(tmp_path / "c")[name]), name


@pytest.mark.parametrize("first_nan, message", [
    (6, "train loss is nan at iter 6: the run diverged; the last good checkpoint .* is kept; .*try a lower learning_rate"),
    (1, "train loss is nan at iter 1: the run diverged; no checkpoint was written yet; .*no optimizer step had acted")])
def test_a_loss_that_diverges_between_flushes_is_named_at_its_own_iteration(tmp_path, monkeypatch, first_nan, message):
    """Read at the flush (iteration 8 with log_interval=4), the message names the first iteration
    whose loss was not finite; the rows before it are in the log, none after, and no checkpoint
    was written after the eval at 4."""
    real_forward, steps, probe = GPT.forward, [], probing(monkeypatch)

    def nan_from(self, idx, targets=None):
        logits, loss, aux = real_forward(self, idx, targets)
        if self.training and not probe["on"]:
            steps.append(1)
            if len(steps) >= first_nan:
                loss = loss * float("nan")
        return logits, loss, aux

    monkeypatch.setattr(GPT, "forward", nan_from)
    ds = make_dataset(tmp_path / "ds")
    with pytest.raises(FloatingPointError, match=message):
        run(tiny_args(ds, tmp_path / "o", "--max_iters=8", "--eval_interval=4", "--log_interval=4"))
    assert [r["iter"] for r in read_log(tmp_path / "o") if r["kind"] == "train"] == list(range(1, first_nan))
    assert (tmp_path / "o" / "ckpt.pt").exists() == (first_nan > 4)
    if first_nan > 4:
        assert torch.load(tmp_path / "o" / "ckpt.pt", weights_only=True)["iter"] == 4


def test_a_progress_line_off_the_log_interval_says_it_is_overdue(tmp_path, monkeypatch, capsys):
    """A line printed because PROGRESS_EVERY_S passed (here 0 s: every iteration) lands at an odd iteration and
    says why; the lines at multiples of log_interval read as always."""
    from plumbing import ops
    monkeypatch.setattr(ops, "PROGRESS_EVERY_S", 0)
    run(tiny_args(make_dataset(tmp_path / "ds"), tmp_path / "a", "--max_iters=8", "--log_interval=4"))
    lines = {int(ln.split()[1].split("/")[0]): ln for ln in capsys.readouterr().out.splitlines()
             if ln.startswith("iter ")}
    assert sorted(lines) == list(range(1, 9))
    for it, line in lines.items():
        assert ("s since the last line; log_interval=4)" in line) == (it % 4 != 0), line
