"""What a run checks and says at its start: the full config check and the notes on keys that do nothing.

The config module checks what it can alone (types, ranges, memory); the
choices of a switch live with the code that implements them (model.CHOICES:
scale classes, placements; optim.CHOICES: optimizers, schedules, decay
recipes), and so do the rules that say when a key does nothing
(GPTConfig.inert_keys, optim.inert_keys). This module puts them together
for train.py, sweep.py and `--help`.
"""

from types import SimpleNamespace

import model
import optim
from configurator import UserError, check


def choices():
    """{key: {name: meaning}} of every key whose values are a registry's names (model.CHOICES,
    optim.CHOICES), for --help: an entry's `meaning`, a class's first docstring line, else ""."""
    def meaning(entry):
        return getattr(entry, "meaning", "") or (entry.__doc__.strip().splitlines()[0] if isinstance(entry, type) else "")

    return {key: {name: meaning(registry[name]) if isinstance(registry, dict) else "" for name in registry}
            for key, registry in {**model.CHOICES, **optim.CHOICES}.items()}


def check_config(cfg):
    """UserError, one line, for anything a run would refuse, before it reads data or builds
    anything: every value's range (configurator.check, with the memory estimate), the optimizer's
    and schedule's keys (optim.check) and the model's (model.model_config). sweep.py checks every
    run of an ablation this way before starting any."""
    check(cfg)
    try:
        optim.check(SimpleNamespace(**cfg))
    except ValueError as e:
        raise UserError(str(e)) from None
    model.model_config(cfg)


def inert_keys(cfg):
    """[(key, why)]: the keys whose value changes nothing about the run under the rest of cfg (a
    dict with every key; a valid config), each once with the first reason found: the optimizer's
    (optim.inert_keys), the model's (GPTConfig.inert_keys) and W&B's names without W&B.

    Only where certain: every value of the key trains the same run. train.py notes those the
    user gave explicitly (inert_notes); ablation.config_hash leaves a key added later out of a
    run's hash where it does nothing."""
    found = optim.inert_keys(SimpleNamespace(**cfg)) + model.model_config(cfg).inert_keys()
    if not cfg.get("wandb_log"):
        found += [(k, "wandb_log is False (nothing goes to W&B)") for k in ("wandb_project", "wandb_run_name")]
    inert = {}
    for key, why in found:
        inert.setdefault(key, why)
    return list(inert.items())


def inert_notes(cfg, given):
    """One 'note: --key=value has no effect: why; it is ignored' line per key the user gave
    (`given`, as load_config returns it) that inert_keys says changes nothing."""
    return [f"note: --{key}={cfg[key]} has no effect: {why}; it is ignored"
            for key, why in inert_keys(cfg) if key in given]
