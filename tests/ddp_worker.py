"""Run by tests/test_ddp.py under torchrun: train, then save this rank's parameters."""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from plumbing.common import end_distributed  # noqa: E402
from train import load_config, train  # noqa: E402

if __name__ == "__main__":
    cfg, given = load_config(sys.argv[1:])
    model = train(cfg, given)["model"]
    rank = os.environ.get("RANK", "0")
    torch.save(model.state_dict(), os.path.join(cfg["out_dir"], f"params_rank{rank}.pt"))
    end_distributed(clean=True)  # as train.py ends: every rank out of every collective first
