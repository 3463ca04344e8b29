"""A run's regime from its config: its parameters and training FLOPs (the model on the meta device),
its tokens and what they are (characters or tokens, with the GPT-2 token equivalent), tokens per
parameter, what its random windows cover of the training data, and the cumulative decoupled-decay
pull of its schedule: the numbers each table states beside its losses."""

import math
from types import SimpleNamespace

import torch

from configurator import UserError
from model import GPT, model_config
from optim import lr_multiplier
from research.ablation import plan


def train_flops(config):
    """Training FLOPs of a run: its model's FLOPs per token (forward and backward, attention
    included: GPT.flops_per_token, meta device) times its tokens; None for a config model.py rejects."""
    cfg = dict(config)
    cfg["vocab_size"] = cfg["vocab_size"] or 80
    try:
        with torch.device("meta"):
            return GPT(model_config(cfg)).flops_per_token() * run_tokens(cfg)
    except UserError:
        return None


_PARAMS = {}  # GPTConfig's repr -> its parameters: the tables ask for a few shapes hundreds of times


def param_count(config):
    """Parameters of a run's model (meta device); None for a config this model.py rejects."""
    cfg = dict(config)
    cfg["vocab_size"] = cfg["vocab_size"] or 80  # only the difference between variants matters
    try:
        shape = model_config(cfg)
        if repr(shape) not in _PARAMS:
            with torch.device("meta"):
                _PARAMS[repr(shape)] = GPT(shape).num_params()
        return _PARAMS[repr(shape)]
    except UserError:
        return None


# Training tokens of a dataset's train split, for the passes over it a table states. Records do not
# carry it and data/ may not be prepared in a clean clone, so it is a constant here:
# shakespeare_char from data/shakespeare_char/prepare.py's output "train 4,531,100 chars" (one token
# per character; train.bin holds 4,531,100 uint16 ids). Other datasets: no passes stated.
TRAIN_TOKENS = {"shakespeare_char": 4_531_100}


# Vocabulary sizes of the datasets whose records say 0 ("from the data's meta.pkl"), for the loss of a
# uniform guess, ln(V), that no trained arm should end above: shakespeare_char's meta.pkl holds 80
# characters (data/shakespeare_char/prepare.py; its iteration-0 val loss, 4.382, is ln 80).
VOCAB_SIZE = {"shakespeare_char": 80}


def uniform_loss(cfg):
    """ln(vocab size) of a run's config: the loss of a uniform guess; None where the size is unknown."""
    vocab = cfg.get("vocab_size") or VOCAB_SIZE.get(cfg.get("dataset"))
    return math.log(vocab) if vocab else None


def run_tokens(cfg):
    """Training tokens of a run: max_iters x batch_size x block_size x gradient_accumulation_steps."""
    return cfg["max_iters"] * cfg["batch_size"] * cfg["block_size"] * cfg["gradient_accumulation_steps"]


# Characters per GPT-2 BPE token of a character-level dataset's text, so that a character run's
# budget can be read against the paper's (in BPE tokens): tiktoken's r50k_base encode_ordinary on
# shakespeare_char's training text gives 1,390,451 tokens for its 4,531,100 characters
# (tests/test_sweep.py recomputes it where tiktoken's file is at hand).
CHARS_PER_BPE_TOKEN = {"shakespeare_char": 4_531_100 / 1_390_451}


def unit(cfg):
    """What a run's tokens are: "characters" for a character-level dataset (CHARS_PER_BPE_TOKEN),
    else "tokens"."""
    return "characters" if cfg.get("dataset") in CHARS_PER_BPE_TOKEN else "tokens"


def loss_unit(spec, short=False):
    """The unit of an ablation's losses: "nats per character" for a character-level dataset (unit),
    else "nats per token" (short: "nats/char", "nats/token", for axis labels)."""
    chars = unit(plan(spec, "runs")[0]["config"]) == "characters"
    return ("nats/char" if chars else "nats/token") if short else \
        ("nats per character" if chars else "nats per token")


def per_param(cfg, params):
    """'20 tokens per parameter', or for characters '20 characters per parameter (6.14 GPT-2 tokens)'."""
    ratio = run_tokens(cfg) / params
    chars = CHARS_PER_BPE_TOKEN.get(cfg.get("dataset"))
    return f"{ratio:.3g} {unit(cfg)} per parameter" + (f" ({ratio / chars:.3g} GPT-2 tokens)" if chars else "")


def coverage(cfg, train):
    """(never, twice or more): the expected shares of a training split of `train` tokens that the
    run's random windows never cover and cover at least twice. Each of the W = max_iters x
    batch_size x gradient_accumulation_steps windows covers block_size + 1 tokens from a uniform
    start (train.get_batch), so an interior token is in it with p = (block_size + 1) / (train -
    block_size); the count of windows holding it is binomial (W, p)."""
    windows = cfg["max_iters"] * cfg["batch_size"] * cfg["gradient_accumulation_steps"]
    p = (cfg["block_size"] + 1) / (train - cfg["block_size"])
    never = (1 - p) ** windows
    return never, 1 - never - windows * p * (1 - p) ** (windows - 1)


def regime(cfg, params, name):
    """The line stating a setting's regime: the reference's parameters, its tokens (characters for a
    character-level dataset, with the GPT-2 token equivalent), their ratio and, for a dataset in
    TRAIN_TOKENS, what the random windows cover of its training split (passes are expected
    coverage, not epochs); '' without a config or count."""
    if not cfg or not params:
        return ""
    tokens, what = run_tokens(cfg), unit(cfg)
    train = TRAIN_TOKENS.get(cfg.get("dataset"))
    seen = ""
    if train:
        never, again = coverage(cfg, train)
        seen = (f"; expected coverage of the training data {1 - never:.0%} ({never:.0%} of its {what} never in a "
                f"window, {again:.0%} in two or more; {tokens / train:.3g} passes of random windows over "
                f"{cfg['dataset']}'s {train:,} training {what})")
    return (f"Regime: {params / 1e6:.3g}M parameters (`{name}`), {tokens / 1e6:.3g}M {what}, "
            f"{per_param(cfg, params)}{seen}.")


def decay_pull(cfg):
    """(exp(-S), S) with S = sum over the run's iterations of lr_t * weight_decay.

    The factor decoupled weight decay alone (AdamW: p <- p (1 - lr_t wd)) applies to
    a parameter over the run, the schedule's AdamW LR at each iteration (optim.lr_multiplier).
    """
    ns = SimpleNamespace(**cfg)
    total = sum(cfg["learning_rate"] * lr_multiplier(it, ns) for it in range(cfg["max_iters"])) * cfg["weight_decay"]
    return math.exp(-total), total


def decay_caption(decayed):
    """The cumulative decoupled-decay pull of a setting's decayed runs' configs, as a sentence."""
    pull, total = decay_pull(decayed[0])
    mults = sorted({c.get("magnitude_lr_mult", 1) for c in decayed
                    if c["reparam"] != "plain" and c.get("magnitude_lr_mult", 1) != 1})
    return (f"Cumulative decay pull on a decayed scale with no gradient: exp(-sum_t lr_t * wd) = {pull:.3f} "
            f"(sum = {total:.2f}; weight_decay={decayed[0]['weight_decay']:g}, "
            f"{decayed[0]['max_iters']} iterations; the effect needs it well below e^-0.5 = 0.607)"
            + "".join(f"; an OR/ER magnitude at {m:g}x the LR (magnitude_lr_mult) is pulled {m:g}x as "
                      f"hard: exp(-{m:g} sum) = {pull ** m:.3f}" for m in mults) + ".")

