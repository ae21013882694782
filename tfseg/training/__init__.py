"""tfseg training: the distributed step, the training loop, the model-folder lock.

Entry point: ``tfseg.training.loop.train(config, saved, resuming)`` (``tfseg.train`` reads
the last two from the model folder); main.py is the command line.
What training shares with evaluation (builders, checkpoints, signals) is ``tfseg.runtime``.
For ``model.compile`` + ``model.fit``: ``PixelLoss`` (the step's own loss) and
``mean_iou(num_classes)`` (Keras' ``MeanIoU`` on logits).

``PixelLoss`` and ``mean_iou`` load on first use: importing ``tfseg.training.lock`` (which
main.py takes before building anything) must not pay for TensorFlow.
"""

__all__ = ["PixelLoss", "mean_iou"]


def __getattr__(name):
    if name in __all__:
        from tfseg.training import losses
        return getattr(losses, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
