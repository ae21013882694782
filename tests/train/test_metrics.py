"""SegmentationMetrics against a plain numpy confusion matrix."""

import numpy as np

from tfseg.evaluation.metrics import SegmentationMetrics, iou_from_confusion


def _numpy_miou(labels, predictions, num_classes):
    keep = labels != 255
    confusion = np.zeros((num_classes, num_classes), np.int64)
    np.add.at(confusion, (labels[keep], predictions[keep]), 1)
    ious = []
    for c in range(num_classes):
        tp = confusion[c, c]
        union = confusion[c, :].sum() + confusion[:, c].sum() - tp
        if union:
            ious.append(tp / union)
    return confusion, float(np.mean(ious)), np.trace(confusion) / confusion.sum()


def test_matches_numpy_with_ignore_pixels_and_absent_classes(tmp_path):
    rng = np.random.default_rng(0)
    num_classes = 7
    metrics = SegmentationMetrics(num_classes, [f"c{i}" for i in range(num_classes)])
    all_labels, all_predictions = [], []
    for _ in range(3):  # accumulates over batches
        labels = rng.integers(0, num_classes - 1, (2, 17, 23))  # class 6 is never labelled ...
        labels[rng.random(labels.shape) < 0.2] = 255
        predictions = rng.integers(0, num_classes - 2, (2, 17, 23))  # ... nor predicted
        metrics.update(labels, predictions)
        all_labels.append(labels)
        all_predictions.append(predictions)
    labels, predictions = np.concatenate(all_labels), np.concatenate(all_predictions)
    confusion, miou, accuracy = _numpy_miou(labels, predictions, num_classes)

    np.testing.assert_array_equal(metrics.confusion, confusion)
    result = metrics.result()
    assert abs(result["miou"] - miou) < 1e-9
    assert abs(result["miou"] - float(metrics.mean_iou.result())) < 1e-6  # Keras agrees
    assert abs(result["pixel_accuracy"] - accuracy) < 1e-9
    assert result["per_class_iou"]["c6"] is None
    assert result["labelled_pixels"] == int((labels != 255).sum())

    metrics.write_confusion_csv(tmp_path / "confusion.csv")
    rows = (tmp_path / "confusion.csv").read_text().splitlines()
    assert rows[0].split(",")[1:] == [f"c{i}" for i in range(num_classes)]
    assert [int(v) for v in rows[1].split(",")[1:]] == list(confusion[0])
    table = metrics.table()
    assert table[-3].split() == ["mIoU", f"{miou:.4f}"]
    # c6 is not labelled: not listed, counted under the table with the mean's classes.
    assert [line.split()[0] for line in table[1:-3]] == [f"c{i}" for i in range(6)]
    assert table[-1] == (f"not listed: 1 of {num_classes} classes absent from the labels; "
                         f"the mIoU is the mean over {num_classes - 1} classes")


def test_the_table_lists_the_labelled_classes_and_names_the_predicted_absent_ones():
    """Of 6 classes, "road" and "sky" are labelled; "car" is only predicted (an IoU of 0
    that lowers the mIoU: named); the other three are neither (counted only)."""
    names = ["road", "sidewalk", "sky", "car", "bus", "train"]
    metrics = SegmentationMetrics(len(names), names)
    labels = np.array([[0, 0, 2, 2, 255]])
    metrics.update(labels, np.array([[0, 3, 2, 2, 1]]))  # the ignored pixel's 1 counts not
    table = metrics.table()
    rows = {line.split()[0]: line.split()[-1] for line in table[1:3]}
    assert rows == {"road": "0.5000", "sky": "1.0000"}
    assert table[3].split() == ["mIoU", f"{(0.5 + 1.0 + 0.0) / 3:.4f}"]
    assert table[-1] == ("not listed: 4 of 6 classes absent from the labels; 1 of them "
                         "predicted (IoU 0 in the mIoU): car; the mIoU is the mean over "
                         "3 classes")
    assert len(table) == 6  # header, 2 classes, mIoU, pixel accuracy, the note
    everything = SegmentationMetrics(2, ["a", "b"])
    everything.update(np.array([[0, 1]]), np.array([[0, 1]]))
    assert [line.split()[0] for line in everything.table()] == ["class", "a", "b", "mIoU",
                                                                "pixel"]


def test_perfect_and_empty():
    assert iou_from_confusion(np.eye(3) * 5)["miou"] == 1.0
    assert iou_from_confusion(np.zeros((3, 3)))["miou"] == 0.0
