"""What ``--memory_budget_gb`` means in bytes (no TensorFlow): the memory budget
(``tfseg.budget``) and the split across devices (``tfseg.split``) read it the same way.
The device overhead taken off it is ``tfseg.runtime.device.overhead``'s."""

# --memory_budget_gb counts GiB, as the report does and as cards are sized
# (an "11 GB" card has 11,264 MiB).
GB = 2**30
