"""tfseg training: the distributed step, the training loop, the model-folder lock.

Entry point: ``tfseg.train.loop.train(Config(...))``; main.py is the command line.
What training shares with evaluation (builders, checkpoints, signals) is ``tfseg.runtime``.
"""
