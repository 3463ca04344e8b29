"""What every command shares, beside the reading path (train.py -> model.py -> norms.py, optim.py):
how a run starts and owns its folder (start), what it checks and says (ops), checkpoints and the log
(checkpoint), token files and codecs (dataset), memory estimates (memory), the mechanism statistics
(mechanism) and process utilities (common). Importing the package loads no torch."""
