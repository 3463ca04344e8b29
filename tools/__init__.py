"""Tools beside training: export to Hugging Face (export.py, with the modeling_scalevec.py it
ships), benchmarks (bench.py), the GPU check (gpu_check.py) and claim C3's toy
(toy_preconditioner.py). Run from the repository root: python -m tools.export ...."""
