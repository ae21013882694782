"""tfseg training: the run config, builders, the distributed step and the training loop.

Entry point: ``tfseg.train.loop.train(RunConfig(...))``; main.py is the command line.
"""
