"""The predict run: images in (a file or a folder), label PNGs out, in one of three formats.

``--output_format`` (``config.run.output_format``):
  * ``colour`` (default): ``NAME_label.png`` in the palette's colours and
    ``NAME_overlay.png``, the colours blended over the image, with a legend of the
    classes in it (a colour swatch and the name of each) in a strip below.
  * ``train_ids``: ``NAME_label.png``, one uint8 channel of class ids 0..C-1.
  * ``label_ids``: ``NAME.png``, one uint8 channel of Cityscapes label ids (the
    ``id`` column of cityscapesScripts' ``labels.py``: road = 7), for its
    benchmark server. ``evalPixelLevelSemanticLabeling.py`` pairs a ground truth
    ``CITY_SEQ_FRAME_gtFine_labelIds.png`` with the one prediction matching
    ``CITY_SEQ_FRAME*.png``, so keeping the input's stem
    (``CITY_SEQ_FRAME_leftImg8bit``) is what it needs. Only for runs whose
    classes are Cityscapes' 19 train ids; the mapping is the Cityscapes reader's
    table, inverted.
"""

import os

import numpy as np
from PIL import Image

from tfseg.data import cityscapes
from tfseg.io.claims import claimed
from tfseg.io.outputs import replaced_folder
from tfseg.errors import InputError
from tfseg.evaluation.evaluate import inference_config
from tfseg.evaluation.exported import beyond, default_output, exported_classes
from tfseg.evaluation.images import read_rgb
from tfseg.evaluation.inference import Predictor
from tfseg.evaluation.legend import with_legend
from tfseg.evaluation.loading import load_model
from tfseg.runtime.summaries import colourise

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp")
OVERLAY_ALPHA = 0.5


def list_images(path):
    """``path`` itself if it is a file, else the images in the folder (sorted)."""
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise FileNotFoundError(f"--input_path: no such file or folder: {path!r}")
    images = sorted(os.path.join(path, name) for name in os.listdir(path)
                    if name.lower().endswith(IMAGE_EXTENSIONS))
    if not images:
        raise FileNotFoundError(f"--input_path: no {'/'.join(IMAGE_EXTENSIONS)} images in {path}")
    return images


def train_to_label_ids():
    """uint8 [256]: Cityscapes train id -> label id; 255 (and anything unmapped) -> 0,
    "unlabeled", which the benchmark ignores."""
    table = np.zeros(256, np.uint8)
    for label_id, train_id in cityscapes.LABEL_ID_TO_TRAIN_ID.items():
        table[train_id] = label_id
    return table


def _require_format(output_format, classes):
    """Raise ``InputError`` naming --output_format when the run's classes do not allow it."""
    if output_format == "label_ids" and tuple(classes.class_names) != cityscapes.CLASS_NAMES:
        more = ", ..." if classes.num_classes > 3 else ""
        raise InputError(
            f"--output_format: label_ids writes Cityscapes label ids and needs a model of "
            f"Cityscapes' {cityscapes.NUM_CLASSES} train ids; this one's classes are "
            f"{', '.join(classes.class_names[:3])}{more} ({classes.num_classes}); use "
            f"train_ids or colour")
    if output_format == "train_ids" and classes.num_classes > 256:
        raise InputError(f"--output_format: train_ids writes 8-bit PNGs; this model has "
                         f"{classes.num_classes} classes")


_SUFFIXES = {"colour": ("_label", "_overlay"), "train_ids": ("_label",), "label_ids": ("",)}


def _targets(paths, out_dir, output_format):
    """[[output path per suffix] per input path]; refuses an output folder that holds an
    input (it is replaced as a whole), and two inputs of one stem (``a.png``, ``a.jpg``:
    one would replace the other's output)."""
    targets, sources = [], {}
    for path in paths:
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(out_dir) and os.path.samefile(folder, out_dir):
            raise InputError(f"--output_dir: {out_dir} holds the input image {path}, and "
                             f"predictions replace the folder as a whole; choose another "
                             f"folder")
        stem = os.path.splitext(os.path.basename(path))[0]
        targets.append([os.path.join(out_dir, f"{stem}{s}.png") for s in _SUFFIXES[output_format]])
        if targets[-1][0] in sources:
            raise InputError(f"--input_path: {sources[targets[-1][0]]} and {path} would both "
                             f"write {targets[-1][0]}; rename one")
        sources[targets[-1][0]] = path
    return targets


def _outputs(output_format, rgb, labels, classes):
    """uint8 pixels per ``_SUFFIXES`` entry for one image's class ids ``labels`` [H, W]."""
    if output_format == "train_ids":
        return [labels.astype(np.uint8)]
    if output_format == "label_ids":
        return [train_to_label_ids()[labels]]
    colours = colourise(labels, classes.palette).numpy()
    overlay = (OVERLAY_ALPHA * colours + (1 - OVERLAY_ALPHA) * rgb).astype(np.uint8)
    return [colours, with_legend(overlay, labels, classes.class_names, classes.palette)]


def _read(path, skip, skipped, log):
    """uint8 [H, W, 3] of ``path``; None, with the file named in a line and appended to
    ``skipped``, for an unreadable one when ``skip``; else its ``InputError``."""
    try:
        return read_rgb(path)
    except InputError as error:
        if not skip:
            raise
        log(f"skipped (--skip_bad_examples): {error}")
        skipped.append(path)
        return None


def output_dir(run, log=print):
    """``--output_dir``; by default MODEL_DIR/predictions, and for ``--model_path=DIR/NAME``
    DIR_predictions/NAME, beside the model's folder (``exported.default_output``: never
    in an export folder, which an --overwrite export replaces; nothing in the current
    folder)."""
    if run.output_dir:
        return run.output_dir
    if not run.model_path:
        return os.path.join(run.model_dir, "predictions")
    out_dir = default_output(run.model_path)
    log(f"no --output_dir: writing beside the folder of --model_path, to {out_dir}")
    return out_dir


def predict(config, log=print, classify=None, model_dir_given=None):
    """Writes the label PNGs of ``config.run.output_format`` (see the module) per input image.

    ``classify``, when given, runs instead of the checkpoint in ``--model_dir``:
    ``classify(uint8 [1, H, W, 3]) -> int32 class ids [1, H, W]``, an exported model
    (``tfseg.deploy.open_model`` of ``--model_path``), whose ``labels`` are the classes
    its file carries (``exported.exported_classes``: no ``--model_dir`` needed; one
    given, ``model_dir_given``, must have the same classes).

    Returns the list of written paths. Output goes to ``output_dir(config.run)``
    (default ``MODEL_DIR/predictions``; with ``--model_path=DIR/NAME``,
    DIR_predictions/NAME):
    built in a folder beside it and swapped in whole at the end. A non-empty output
    folder needs ``--overwrite`` (``config.run.overwrite``), and then must hold PNG
    files and nothing else.

    Raises:
      InputError: no --input_path, an unreadable image (without --skip_bad_examples;
        with it, only when no image is readable), an output folder that is a
        file, is not empty (without --overwrite), holds other files than PNGs or an
        input, an --output_format the model's classes do not allow, an exported
        model's classes that are not --model_dir's, or a ``classify`` giving a class
        its classes do not have.
    """
    run = config.run
    if not run.input_path:
        raise InputError("--input_path: required for --mode=predict (an image or a folder)")
    paths = list_images(run.input_path)
    classes = None  # the checkpoint's, once it is loaded
    if classify is not None:
        classes = exported_classes(config, getattr(classify, "labels", None),
                                   model_dir_given, log, getattr(classify, "note", None))
    out_dir = output_dir(run, log)
    with claimed(out_dir, "--output_dir", run.overwrite, "a predict batch (PNG files)",
                 lambda name: name.lower().endswith(".png")
                 and os.path.isfile(os.path.join(out_dir, name))):
        return _predict_into(config, out_dir, paths, classify, classes, log)


def _predict_into(config, out_dir, paths, classify, classes, log):
    """``predict``'s writing, once ``out_dir`` is this process's."""
    run = config.run
    targets = _targets(paths, out_dir, run.output_format)
    skip = config.data.skip_bad_examples
    # The palette comes from the run's config.json: no data set needed.
    if classify is None:
        model, classes, _, config, _ = load_model(config, log=log)
        predictor = Predictor(model, inference_config(config))
        classify = lambda image: predictor.classes(image).numpy()  # noqa: E731
    _require_format(run.output_format, classes)
    written, skipped = [], []
    with replaced_folder(out_dir, "--output_dir") as new:
        for path, outputs in zip(paths, targets):
            rgb = _read(path, skip, skipped, log)
            if rgb is None:
                continue
            labels = np.asarray(classify(rgb[np.newaxis]))[0]  # uint8 in: normalised inside
            if labels.max() >= classes.num_classes:
                raise beyond(config, labels.max(), classes,
                             own=getattr(classify, "labels", None) is not None)
            for target, pixels in zip(outputs, _outputs(run.output_format, rgb, labels,
                                                        classes)):
                Image.fromarray(pixels).save(os.path.join(new, os.path.basename(target)))
                written.append(target)
        if len(skipped) == len(paths):  # nothing to replace the folder with
            raise InputError(f"--input_path: none of the {len(paths)} image file(s) in "
                             f"{run.input_path} could be read")
    log(f"wrote {len(written)} PNGs for {len(paths) - len(skipped)} image(s) to {out_dir}"
        + (f"; skipped {len(skipped)} unreadable file(s)" if skipped else ""))
    return written
