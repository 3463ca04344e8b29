"""Tools beside training: export to Hugging Face (export.py, with the modeling_scalevec.py it
ships), benchmarks (bench.py, over variants.py's variants; step_profile.py: where a step's time
goes), the GPU check (gpu_check.py, judged by gpu_report.py) and claim C3's toy
(toy_preconditioner.py). Run from the repository root: python -m tools.export ...."""
