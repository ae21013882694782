"""The predict run: images in (a file or a folder), colour-coded label PNGs and overlays out."""

import os

import numpy as np
from PIL import Image

from tfseg.errors import InputError
from tfseg.evaluation.evaluate import inference_config
from tfseg.evaluation.inference import Predictor
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


def predict(config, log=print):
    """Writes ``NAME_label.png`` (palette colours) and ``NAME_overlay.png`` per input image.

    Returns the list of written paths. Output goes to ``config.output_dir``
    (default ``MODEL_DIR/predictions``).
    """
    if not config.run.input_path:
        raise InputError("--input_path: required for --mode=predict (an image or a folder)")
    paths = list_images(config.run.input_path)
    # The palette comes from the run's config.json: no data set needed.
    model, classes, _, config = load_model(config, log=log)
    predictor = Predictor(model, inference_config(config))
    out_dir = config.run.output_dir or os.path.join(config.run.model_dir, "predictions")
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for path in paths:
        try:
            rgb = np.asarray(Image.open(path).convert("RGB"))
        except OSError as error:
            raise InputError(f"tfseg: cannot read image {path}: {error}") from None
        labels = predictor.classes(rgb[np.newaxis])[0]  # uint8: normalised inside
        colours = colourise(labels, classes.palette).numpy()
        overlay = (OVERLAY_ALPHA * colours + (1 - OVERLAY_ALPHA) * rgb).astype(np.uint8)
        stem = os.path.splitext(os.path.basename(path))[0]
        for suffix, pixels in (("label", colours), ("overlay", overlay)):
            target = os.path.join(out_dir, f"{stem}_{suffix}.png")
            Image.fromarray(pixels).save(target)
            written.append(target)
    log(f"wrote {len(written)} PNGs for {len(paths)} image(s) to {out_dir}")
    return written
