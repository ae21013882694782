"""--output_format of --mode=predict (tfseg/evaluation/predict.py) on the tiny trained run.

The train_ids and label_ids outputs are compared in-process (``predict`` itself);
the refusal goes through main.py for its exit code and single line. The colour
format is covered by test_modes.py.
"""

import fnmatch
import json
import os
import shutil

import numpy as np
import pytest
from PIL import Image

from tests.train.conftest import run_main, start_main
from tfseg.config import Config
from tfseg.data import cityscapes
from tfseg.errors import InputError
from tfseg.evaluation.loading import Classes
from tfseg.evaluation.predict import _require_format, predict, train_to_label_ids

VAL_CITY = ("leftImg8bit", "val", "synth2")


def _predict(model_dir, images, out, output_format):
    config = Config.from_flat(mode="predict", dataset="cityscapes", model_dir=model_dir,
                              data_dir=str(out / "no_data"), input_path=str(images),
                              output_dir=str(out), output_format=output_format)
    return predict(config, log=lambda *a: None)


def test_the_table_inverts_the_readers_label_id_mapping():
    table = train_to_label_ids()
    assert table[0] == 7 and table[10] == 23 and table[18] == 33  # road, sky, bicycle
    for label_id, train_id in cityscapes.LABEL_ID_TO_TRAIN_ID.items():
        assert table[train_id] == label_id
    assert table[255] == 0  # "unlabeled": ignored by the benchmark


def test_an_unknown_output_format_names_the_flag():
    with pytest.raises(InputError, match="--output_format: must be one of colour, train_ids, "
                                         "label_ids, got 'rgb'"):
        Config.from_flat(output_format="rgb")


def test_label_ids_are_the_mapped_train_ids_named_for_the_benchmark(trained, tmp_path):
    data_dir, model_dir = trained
    images = os.path.join(data_dir, *VAL_CITY)
    train_out, label_out = tmp_path / "train_ids", tmp_path / "label_ids"
    train_files = _predict(model_dir, images, train_out, "train_ids")
    label_files = _predict(model_dir, images, label_out, "label_ids")
    stems = sorted(n[:-len(".png")] for n in os.listdir(images))
    assert sorted(os.listdir(train_out)) == [s + "_label.png" for s in stems]
    assert sorted(os.listdir(label_out)) == [s + ".png" for s in stems]
    for train_file, label_file in zip(sorted(train_files), sorted(label_files), strict=True):
        with Image.open(train_file) as a, Image.open(label_file) as b:
            assert a.mode == b.mode == "L" and a.size == b.size == (96, 64)
            train_ids, label_ids = np.asarray(a), np.asarray(b)
        assert train_ids.max() < 19
        expected = np.vectorize({t: i for i, t in cityscapes.LABEL_ID_TO_TRAIN_ID.items()}.get)(
            train_ids)
        np.testing.assert_array_equal(label_ids, expected)
        # No train id is its own label id: the files differ wherever the model predicts.
        assert (label_ids != train_ids).all()
    # evalPixelLevelSemanticLabeling.getPrediction: exactly one "<city>_<seq>_<frame>*.png"
    # per ground truth file.
    truths = [n for n in os.listdir(os.path.join(data_dir, "gtFine", "val", "synth2"))
              if n.endswith("_gtFine_labelIds.png")]
    assert len(truths) == len(stems)
    for truth in truths:
        pattern = "_".join(truth.split("_")[:3]) + "*.png"
        assert len(fnmatch.filter(os.listdir(label_out), pattern)) == 1, pattern


def test_label_ids_of_a_model_of_other_classes_exits_2_naming_the_flag(trained, tmp_path):
    """The same weights, but config.json says the 19 classes are another data set's."""
    data_dir, model_dir = trained
    run = tmp_path / "run"
    run.mkdir()
    for name in os.listdir(model_dir):
        if name.startswith("ckpt-6."):
            shutil.copy(os.path.join(model_dir, name), run)
    saved = json.load(open(os.path.join(model_dir, "config.json")))
    saved["class_names"] = [f"part{k}" for k in range(19)]
    (run / "config.json").write_text(json.dumps(saved))
    out = tmp_path / "out"
    proc = run_main("--mode=predict", f"--model_dir={run}", f"--checkpoint={run}/ckpt-6",
                    f"--data_dir={data_dir}",
                    f"--input_path={os.path.join(data_dir, *VAL_CITY)}", f"--output_dir={out}",
                    "--output_format=label_ids", check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert lines[0].startswith("tfseg: error: --output_format: label_ids writes Cityscapes "
                               "label ids"), lines[0]
    assert "part0, part1, part2, ... (19)" in lines[0]
    assert not out.exists() or not os.listdir(out)


def test_label_ids_refusal_lists_a_few_classes_without_an_ellipsis():
    few = Classes(("background", "thing one", "thing two"), np.zeros((3, 3), np.uint8))
    with pytest.raises(InputError) as error:
        _require_format("label_ids", few)
    assert "classes are background, thing one, thing two (3); use" in str(error.value)


def _good_and_bad_inputs(data_dir, folder):
    """``folder`` with two good images (a.png, z.png) and a text file named notes.png."""
    os.makedirs(folder)
    val = os.path.join(data_dir, *VAL_CITY)
    for name, source in zip(("a.png", "z.png"), sorted(os.listdir(val))):
        shutil.copy(os.path.join(val, source), folder / name)
    (folder / "notes.png").write_text("not an image: notes of the run\n")
    return folder


def test_skip_bad_examples_writes_every_readable_image_and_names_each_bad_file(trained,
                                                                               tmp_path):
    data_dir, model_dir = trained
    images = _good_and_bad_inputs(data_dir, tmp_path / "images")
    (images / "broken.png").write_bytes(open(images / "a.png", "rb").read()[:200])
    out = tmp_path / "out"
    common = ("--mode=predict", "--dataset=cityscapes", f"--data_dir={tmp_path / 'no_data'}",
              f"--model_dir={model_dir}", f"--input_path={images}", f"--output_dir={out}")
    proc = run_main(*common, "--skip_bad_examples")
    assert sorted(os.listdir(out)) == ["a_label.png", "a_overlay.png", "z_label.png",
                                       "z_overlay.png"]
    skipped = [line for line in proc.stdout.splitlines() if line.startswith("skipped")]
    assert len(skipped) == 2, proc.stdout[-2000:]
    assert skipped[0].startswith(f"skipped (--skip_bad_examples): cannot read image "
                                 f"{images}/broken.png: ")
    assert skipped[1] == (f"skipped (--skip_bad_examples): cannot read image "
                          f"{images}/notes.png: not an image file of a format PIL reads")
    assert f"wrote 4 PNGs for 2 image(s) to {out}; skipped 2 unreadable file(s)" \
        in proc.stdout
    # Without the flag: the first bad file, named in one line; nothing written.
    (images / "broken.png").unlink()
    shutil.rmtree(out)
    proc = run_main(*common, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        f"tfseg: error: cannot read image {images}/notes.png: not an image file of a "
        f"format PIL reads"]
    assert not out.exists() or not os.listdir(out)


def test_skip_bad_examples_with_no_readable_image_exits_2(trained, tmp_path):
    data_dir, model_dir = trained
    images = tmp_path / "images"
    images.mkdir()
    (images / "notes.png").write_text("not an image")
    proc = run_main("--mode=predict", "--dataset=cityscapes",
                    f"--data_dir={tmp_path / 'no_data'}", f"--model_dir={model_dir}",
                    f"--input_path={images}", f"--output_dir={tmp_path / 'out'}",
                    "--skip_bad_examples", check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        f"tfseg: error: --input_path: none of the 1 image file(s) in {images} could be read"]
    assert "skipped (--skip_bad_examples): cannot read image" in proc.stdout
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


def test_overlays_carry_a_legend_of_the_classes_predicted(trained, tmp_path):
    """The overlay is the blend of image and label colours on top, and below it a swatch
    of each class in the label image (and of no other)."""
    from tests.evaluation.test_legend import _has_block
    from tfseg.evaluation.legend import SWATCH

    data_dir, model_dir = trained
    images = _good_and_bad_inputs(data_dir, tmp_path / "images")
    (images / "notes.png").unlink()
    out = tmp_path / "out"
    config = Config.from_flat(mode="predict", dataset="cityscapes", model_dir=model_dir,
                              data_dir=str(tmp_path / "no_data"), input_path=str(images),
                              output_dir=str(out))
    predict(config, log=lambda *a: None)
    palette = np.asarray(json.load(open(os.path.join(model_dir, "config.json")))["palette"],
                         np.uint8)
    for stem in ("a", "z"):
        with Image.open(out / f"{stem}_label.png") as label:
            colours = np.asarray(label)
        with Image.open(out / f"{stem}_overlay.png") as png:
            overlay = np.asarray(png)
        with Image.open(images / f"{stem}.png") as image:
            rgb = np.asarray(image.convert("RGB"))
        blend = (0.5 * colours + 0.5 * rgb).astype(np.uint8)
        np.testing.assert_array_equal(overlay[:64, :96], blend)
        present = {tuple(c) for c in colours.reshape(-1, 3)}
        for colour in palette:
            assert _has_block(overlay[64:], colour, SWATCH - 2) == (tuple(colour) in present)


@pytest.mark.slow  # two fresh processes at once, each importing TensorFlow: 15-30 s
def test_two_predicts_into_one_new_folder_leave_one_whole_set_and_refuse_the_other(
        trained, tmp_path):
    """Started at once: one writes its PNGs and exits 0; the other exits 2 in one line
    (the folder is claimed by the first, or already holds its output); none is lost."""
    data_dir, model_dir = trained
    images = os.path.join(data_dir, *VAL_CITY)
    out = tmp_path / "out"
    procs = [start_main("--mode=predict", f"--model_dir={model_dir}", f"--input_path={images}",
                        f"--output_dir={out}", "--dataset=cityscapes") for _ in range(2)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], outputs
    refused = outputs[[p.returncode for p in procs].index(2)].strip().splitlines()
    assert refused[-1].startswith(f"tfseg: error: --output_dir: {out} is ") and \
        ("being written by another tfseg process" in refused[-1]
         or "is not empty; pass --overwrite" in refused[-1]), refused
    wrote = outputs[[p.returncode for p in procs].index(0)]
    count = len(os.listdir(images))
    assert f"wrote {2 * count} PNGs for {count} image(s) to {out}" in wrote
    assert len(os.listdir(out)) == 2 * count
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith(".")) == []
