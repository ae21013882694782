"""What ``--memory_budget_gb`` and ``--device_overhead_gb`` mean in bytes (no TensorFlow):
the memory budget (``tfseg.budget``) and the split across devices (``tfseg.split``) read
them the same way."""

# --memory_budget_gb counts GiB, as the report does and as cards are sized
# (an "11 GB" card has 11,264 MiB).
GB = 2**30
# Memory a GPU process holds outside TF's allocator, which the budget must leave:
# the CUDA context (about 0.3-0.5 GiB with lazy module loading, more without) and
# the cuDNN and cuBLAS handles and workspaces. Reasoned from those libraries'
# documented behaviour, not measured: no GPU has run tfseg yet. Measure yours
# (nvidia-smi's use minus the step's allocator peak) and pass --device_overhead_gb.
GPU_OVERHEAD_GB = 0.8


def overhead_bytes(setting_gb, has_gpu):
    """The device overhead in bytes: `setting_gb` when >= 0, else 0 on the CPU and
    `GPU_OVERHEAD_GB` on a GPU."""
    if setting_gb >= 0:
        return int(setting_gb * GB)
    return int(GPU_OVERHEAD_GB * GB) if has_gpu else 0
