"""Segmentation metrics over a confusion matrix accumulated by ``keras.metrics.MeanIoU``."""

import csv

import numpy as np

import keras

from tfseg.data import IGNORE_LABEL


def iou_from_confusion(confusion):
    """Per-class IoU (NaN where a class is neither labelled nor predicted), mIoU and pixel accuracy.

    ``confusion[i, j]`` counts pixels labelled ``i`` and predicted ``j``. The mean
    skips NaN classes, as ``keras.metrics.MeanIoU`` and the Cityscapes scripts do.
    """
    confusion = np.asarray(confusion, np.float64)
    true_positive = np.diag(confusion)
    union = confusion.sum(0) + confusion.sum(1) - true_positive
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = np.where(union > 0, true_positive / union, np.nan)
    total = confusion.sum()
    return {
        "iou": iou,
        "miou": float(np.nanmean(iou)) if np.isfinite(iou).any() else 0.0,
        "pixel_accuracy": float(true_positive.sum() / total) if total else 0.0,
    }


class SegmentationMetrics:
    """mIoU, per-class IoU and pixel accuracy; labels equal to 255 are ignored.

    Wraps ``keras.metrics.MeanIoU`` (its ``total_cm`` is the confusion matrix)
    and derives the rest from that matrix.
    """

    def __init__(self, num_classes, class_names=None):
        self.num_classes = num_classes
        self.class_names = tuple(class_names or (str(i) for i in range(num_classes)))
        self.mean_iou = keras.metrics.MeanIoU(num_classes, ignore_class=IGNORE_LABEL,
                                              sparse_y_true=True, sparse_y_pred=True)

    def update(self, labels, predictions):
        """labels, predictions: int [..., H, W] class ids (labels may hold 255)."""
        self.mean_iou.update_state(labels, predictions)

    @property
    def confusion(self):
        return np.asarray(self.mean_iou.total_cm.numpy(), np.int64)

    def result(self):
        """A JSON-ready dict: miou, pixel_accuracy, per_class {name: iou or None}, pixels."""
        values = iou_from_confusion(self.confusion)
        return {
            "miou": values["miou"],
            "pixel_accuracy": values["pixel_accuracy"],
            "per_class_iou": {name: (None if np.isnan(v) else float(v))
                              for name, v in zip(self.class_names, values["iou"])},
            "labelled_pixels": int(self.confusion.sum()),
        }

    def table(self):
        """Per-class IoU as text lines, of the classes with labelled pixels only; a line
        under the table counts the classes absent from the labels and names those that
        were predicted anyway (each an IoU of 0 in the mIoU)."""
        result = self.result()
        labelled = self.confusion.sum(1) > 0
        present = [name for name, there in zip(self.class_names, labelled) if there]
        width = max(len(n) for n in (*present, "pixel acc."))
        lines = [f"{'class':<{width}}  IoU"]
        lines += [f"{name:<{width}}  {result['per_class_iou'][name]:.4f}" for name in present]
        lines.append(f"{'mIoU':<{width}}  {result['miou']:.4f}")
        lines.append(f"{'pixel acc.':<{width}}  {result['pixel_accuracy']:.4f}")
        absent = len(self.class_names) - len(present)
        if absent:
            # A class with no pixels on either side has no IoU; averaging it as 0 would
            # punish a data set for the classes it does not have. One that is predicted
            # but not labelled is a 0 in the mean, and named, since it lowers the mIoU.
            predicted = [name for name, there in zip(self.class_names, labelled)
                         if not there and result["per_class_iou"][name] is not None]
            counted = len(present) + len(predicted)
            line = (f"not listed: {absent} of {len(self.class_names)} classes absent from "
                    f"the labels")
            if predicted:
                line += (f"; {len(predicted)} of them predicted (IoU 0 in the mIoU): "
                         f"{', '.join(predicted)}")
            lines.append(f"{line}; the mIoU is the mean over {counted} classes")
        return lines

    def write_confusion_csv(self, path):
        """The confusion matrix (rows: label, columns: prediction) with class-name headers."""
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["label\\prediction", *self.class_names])
            for name, row in zip(self.class_names, self.confusion):
                writer.writerow([name, *(int(v) for v in row)])
