"""tfseg evaluation: metrics, whole / sliding-window / multi-scale inference, and the eval run."""
