"""What training and evaluation share: building a run from a ``tfseg.config.Config``
(``builders``), checkpoints by variable path (``state``, ``checkpoints``) and the stop
request that SIGTERM/SIGINT set (``signals``).

Below ``tfseg.evaluation`` and ``tfseg.training``, which both import it.
"""
