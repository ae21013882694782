"""A small, deterministic synthetic data set written in the Cityscapes layout.

Scenes are sky over road with a sidewalk band, plus rectangles, ellipses and
triangles of several classes. Colour *and* texture follow the class, so a
model learns it to high mIoU in minutes on CPU. Labels are real Cityscapes
labelIds PNGs (including ids that map to 255: ego vehicle and static), so
reading it back exercises the official id -> train id mapping.
"""

import json
import os
import shutil
import tempfile

import numpy as np
from PIL import Image, ImageDraw

from tfseg.data import cityscapes, registry
from tfseg.data.cityscapes import LABEL_ID_TO_TRAIN_ID
from tfseg.data.registry import register_reader
from tfseg.errors import InputError
from tfseg.io.folders import missing, remove_empty

# Cityscapes label id -> (base RGB, texture). Colour and texture are both
# class-specific so that neither alone is needed to tell classes apart.
CLASS_STYLE = {
    23: ((110, 160, 230), "gradient"),   # sky
    7: ((70, 70, 75), "noise"),          # road
    8: ((230, 120, 200), "checker"),     # sidewalk
    11: ((150, 110, 70), "stripes"),     # building
    21: ((40, 170, 40), "noise"),        # vegetation
    26: ((20, 30, 200), "flat"),         # car
    24: ((220, 30, 30), "flat"),         # person
    20: ((240, 220, 0), "stripes"),      # traffic sign
    1: ((10, 10, 10), "flat"),           # ego vehicle (-> 255)
    4: ((90, 90, 90), "checker"),        # static (-> 255)
}
LABEL_IDS = tuple(sorted(CLASS_STYLE))
# Train ids that occur in the synthetic data (8 of the 19 Cityscapes classes).
TRAIN_IDS = tuple(sorted(LABEL_ID_TO_TRAIN_ID[i] for i in LABEL_IDS if i in LABEL_ID_TO_TRAIN_ID))
MARKER = "tfseg_synthetic.json"
_CITIES = {"train": ("synth0", "synth1"), "val": ("synth2",)}


def _scene(rng, height, width):
    """Label ids (uint8 [H, W]) for one random scene."""
    label = Image.new("L", (width, height), 23)
    draw = ImageDraw.Draw(label)
    horizon = int(height * rng.uniform(0.35, 0.55))
    band = max(2, int(height * 0.08))
    draw.rectangle([0, horizon, width, height], fill=7)
    draw.rectangle([0, horizon, width, horizon + band], fill=8)
    for _ in range(rng.integers(1, 4)):                     # buildings rise from the horizon
        x0 = rng.integers(0, width - width // 8)
        w, h = rng.integers(width // 10, width // 4), rng.integers(horizon // 3, horizon)
        draw.rectangle([x0, horizon - h, x0 + w, horizon], fill=11)
    for _ in range(rng.integers(1, 4)):
        cx, cy = rng.integers(0, width), rng.integers(height // 8, horizon + band)
        rx, ry = rng.integers(width // 20, width // 8), rng.integers(height // 12, height // 5)
        draw.ellipse([cx - rx, cy - ry, cx + rx, cy + ry], fill=21)
    for _ in range(rng.integers(1, 4)):                     # cars and people on the road
        x0, y0 = rng.integers(0, width - width // 10), rng.integers(horizon, height - height // 6)
        w, h = rng.integers(width // 10, width // 5), rng.integers(height // 12, height // 6)
        draw.rectangle([x0, y0, x0 + w, y0 + h], fill=26)
        px, py = rng.integers(0, width), rng.integers(horizon - height // 10, height - height // 5)
        draw.ellipse([px, py, px + width // 40 + 2, py + height // 6], fill=24)
    for _ in range(rng.integers(0, 3)):
        x, y, s = rng.integers(0, width), rng.integers(0, horizon), rng.integers(6, height // 6 + 7)
        draw.polygon([(x, y), (x + s, y), (x + s // 2, y + s)], fill=20)
    if rng.random() < 0.5:
        x, y = rng.integers(0, width - 8), rng.integers(horizon, height - 8)
        draw.rectangle([x, y, x + rng.integers(4, 16), y + rng.integers(4, 12)], fill=4)
    draw.rectangle([0, height - max(2, height // 16), width, height], fill=1)
    return np.asarray(label)


def _render(rng, ids):
    """An RGB uint8 image for label ids: class colour + class texture + noise."""
    height, width = ids.shape
    y, x = np.mgrid[0:height, 0:width]
    textures = {
        "flat": np.zeros((height, width)),
        "noise": rng.normal(0, 22, (height, width)),
        "stripes": ((y // 3) % 2) * 45.0 - 22,
        "checker": (((y // 6) + (x // 6)) % 2) * 50.0 - 25,
        "gradient": (y / height) * 50.0 - 25,
    }
    image = np.zeros((height, width, 3))
    for label_id, (colour, texture) in CLASS_STYLE.items():
        mask = ids == label_id
        image[mask] = np.array(colour) + textures[texture][mask][:, None]
    image += rng.normal(0, 6, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def write_synthetic_cityscapes(root, num_train=40, num_val=10, height=128, width=256, seed=0):
    """Write the synthetic set under ``root`` (leftImg8bit/ and gtFine/ labelIds).

    Idempotent: a marker file records the arguments; a complete set with the same
    arguments is left untouched. The set is written only into a new or empty folder
    (built beside it and renamed into place whole), so that no file of the user's is
    ever replaced. The same arguments always produce byte-identical files.

    Args:
      root: output folder (created).
      num_train, num_val: images per split.
      height, width: image size (>= 32 x 32).
      seed: content seed.

    Returns:
      ``root``.

    Raises:
      InputError: ``root`` holds a synthetic set made with other arguments, or files
        that are no synthetic set (naming what it holds and the layout it looks like),
        or cannot be written (a full or read-only disk; nothing is left behind).
    """
    params = dict(num_train=num_train, num_val=num_val, height=height, width=width, seed=seed)
    marker = os.path.join(root, MARKER)
    if os.path.isfile(marker):
        with open(marker) as f:
            existing = json.load(f)
        if existing == params:
            return root
        raise InputError(f"{root} holds a synthetic set made with {existing}, not {params}")
    if min(height, width) < 32:
        raise InputError(f"synthetic images must be at least 32x32, got {height}x{width}")
    require_free(root)
    # Written to a staging folder and renamed into place, so that processes starting
    # together (the workers of a multi-worker run) never read or write a half set.
    parent = os.path.dirname(os.path.abspath(root))
    made, staging = missing(parent), None
    try:
        os.makedirs(parent, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=".synthetic-", dir=parent)
        os.chmod(staging, 0o755)  # mkdtemp's 0700 would become root's mode
        _write(staging, params)
        _move_into_place(staging, root)
    except OSError as error:  # a full or read-only disk
        raise InputError(f"--data_dir: could not write the synthetic set into {root}: "
                         f"{error.strerror or error}") from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        remove_empty(made)  # a failed write leaves no folder of its own
    return root


@register_reader("synthetic", classes=(cityscapes.CLASS_NAMES, cityscapes.PALETTE))
def source(root, split, missing_ok=False):
    """The default set (``write_synthetic_cityscapes(root)``, written unless complete
    there) as a Cityscapes ``Source``; ``missing_ok`` as ``cityscapes.files``."""
    if not os.path.isfile(os.path.join(root, MARKER)):
        # The one run that writes it says so (the folder is the user's to keep or delete),
        # once the folder is known to take it: a refusal comes alone.
        require_free(root)
        print(f"writing the synthetic data set to {root}: 40 train and 10 val images of "
              f"128x256 in the Cityscapes layout, {len(TRAIN_IDS)} of its "
              f"{len(cityscapes.CLASS_NAMES)} classes (once; later runs read it)", flush=True)
    write_synthetic_cityscapes(root)
    return cityscapes.source(root, split, missing_ok)


def require_free(root):
    """``InputError`` of one line unless ``root`` is missing, empty or holds the synthetic
    set: it names what the folder holds and, where its layout is a data set's, the
    ``--dataset`` that reads it. Nothing is written into such a folder."""
    if os.path.lexists(root) and not os.path.isdir(root):
        raise InputError(f"--data_dir: {root} is a file, not a folder")
    entries = sorted(os.listdir(root)) if os.path.isdir(root) else []
    if not entries or MARKER in entries:
        return
    layouts = registry.looks_like(root)
    shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3
                                      else "")
    advice = (f"it looks like a {layouts[0]} data set: pass --dataset={layouts[0]}"
              if layouts else "pass --dataset=NAME to read it (tfseg --help lists them)")
    raise InputError(f"--data_dir: {root} holds {shown} and no synthetic set, which "
                     f"--dataset=synthetic writes only into a new or empty folder; {advice}, "
                     f"or choose an empty --data_dir")


def _move_into_place(staging, root):
    try:
        os.rename(staging, root)  # atomic where root is new or empty
        return
    except OSError:
        pass
    if os.path.isfile(os.path.join(root, MARKER)):  # another process finished first
        return
    require_free(root)  # files appeared in root meanwhile: refused, none replaced
    raise InputError(f"--data_dir: could not write the synthetic set into {root}")


def _write(root, params):
    seed, height, width = params["seed"], params["height"], params["width"]
    for split_index, (split, count) in enumerate((("train", params["num_train"]),
                                                  ("val", params["num_val"]))):
        cities = _CITIES[split]
        for city in cities:
            for top in ("leftImg8bit", "gtFine"):
                os.makedirs(os.path.join(root, top, split, city))
        for i in range(count):
            rng = np.random.default_rng([seed, split_index, i])
            ids = _scene(rng, height, width)
            city = cities[i % len(cities)]
            stem = f"{city}_{i:06d}_000019"
            Image.fromarray(_render(rng, ids)).save(
                os.path.join(root, "leftImg8bit", split, city, stem + "_leftImg8bit.png"))
            Image.fromarray(ids, "L").save(
                os.path.join(root, "gtFine", split, city, stem + "_gtFine_labelIds.png"))
    with open(os.path.join(root, MARKER), "w") as f:
        json.dump(params, f)
