"""tfseg training: the distributed step, the training loop, the model-folder lock.

Entry point: ``tfseg.train.loop.train(Config(...))``; main.py is the command line.
What training shares with evaluation (builders, checkpoints, signals) is ``tfseg.runtime``.
For ``model.compile`` + ``model.fit``: ``PixelLoss`` (the step's own loss) and
``mean_iou(num_classes)`` (Keras' ``MeanIoU`` on logits).
"""

from tfseg.train.losses import PixelLoss, mean_iou

__all__ = ["PixelLoss", "mean_iou"]
