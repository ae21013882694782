"""The export run: the trained model, in each format of ``--export_format``, written whole
into ``--export_dir``."""

import os
import re

import tensorflow as tf

from tfseg import data as data_lib
from tfseg.data.footprint import image_size
from tfseg.errors import InputError
from tfseg.io.claims import claimed
from tfseg.io.outputs import replaced_folder
from tfseg.runtime import files
from tfseg.runtime.files import recorded_data
from tfseg.evaluation.evaluate import eval_data, inference_config
from tfseg.evaluation.exported import PREDICTIONS
from tfseg.evaluation.loading import load_model
from tfseg.deploy import labels
from tfseg.deploy.registry import EXPORTERS, all_entries
from tfseg.deploy.serving import Request, resized


# The run's data set, as its config.json records it, where the flags leave these settings
# at their defaults (``files.recorded_data``): int8 calibration reads its training images
# (``files.RECORDED_DATA``), and --export_size's default is the size of its evaluation
# images, else of its crop (RECORDED_SIZES).
RECORDED_SIZES = ("dataset", "data_dir", "eval_split", "crop_size")


def calibration_data(config, saved, run_dir=None):
    """``recorded_data``, whose training images must be on disk: int8 calibration reads
    them, and never writes a data set (the synthetic reader would, into the current
    folder).

    Raises:
      InputError: the data folder is not there (one line naming it and --data_dir).
    """
    data = recorded_data(config, saved, run_dir)
    root = data.data.root
    if not os.path.isdir(root):
        whose = ("--data_dir" if config.data.root != type(config)().data.root else
                 f"as the run's {files.CONFIG_FILE} records it" if saved else
                 "--data_dir's default")
        raise InputError(f"--tflite_quantization=int8: calibration reads the training "
                         f"images in {root} ({whose}), which is not a folder here; give "
                         f"--data_dir: the folder of the run's data set")
    return data


def calibration_images(config, size, count):
    """A function yielding ``count`` uint8 images [1, H, W, 3] of the training split
    (``--train_split``, in file order), each resized to ``size`` as a client would."""
    def images():
        split = config.replace(eval_split=config.data.train_split)
        dataset = data_lib.build_dataset(eval_data(split), training=False).take(count)
        for image, _ in dataset:
            yield resized(image, size)
    return images


def eval_image_size(config):
    """(height, width) shared by every image of ``--eval_split``, read from the files'
    headers; None when the split is not on disk, is TFRecords, or mixes sizes."""
    data = eval_data(config)
    if not os.path.isdir(data.root) or data_lib.reader(data.dataset).records:
        return None  # and the synthetic reader would write its data set
    try:
        pairs = data_lib.get_source(data).pairs
    except InputError:
        return None
    sizes = {image_size(image) for image, _ in pairs}
    return sizes.pop() if len(sizes) == 1 and None not in sizes else None


def export_size(config):
    """``--export_size``, else the size the eval split's images share (the .tflite then
    takes them as they are), else the training crop rounded to the nearest size the
    model maps exactly (``InferenceConfig.pass_size``: k x output stride, + 1 for
    ``--resize=align_corners``). Every format pads other sizes up to one (serving.py).

    Raises:
      InputError: an ``--export_size`` side under the output stride: the model would
        see less than one feature pixel.
    """
    if config.run.export_size:
        size, stride = tuple(config.run.export_size), config.model.output_stride
        if min(size) < stride:
            raise InputError(f"--export_size: {size[0]},{size[1]} is smaller than the output "
                             f"stride ({stride}); give at least {stride},{stride}")
        return size
    found = eval_image_size(config)
    if found:
        return tuple(found)
    sizes = inference_config(config)
    half = sizes.size_multiple // 2
    return tuple(sizes.pass_size(max(n - half, 1)) for n in config.data.crop_size)


def request_of(config, log=print, saved=None, run_dir=None):
    """The ``Request`` of ``config``: the export size (``export_size`` of the data set and
    crop that ``saved``, the config.json of the run in ``run_dir``, records, where no flag
    names others), the pass sizes the model maps exactly (eval's), the logits, the
    quantisation and, for int8, the calibration images (of the data set the run
    records: ``calibration_data``)."""
    run = config.run
    size = export_size(recorded_data(config, saved, run_dir, RECORDED_SIZES))
    calibration = (calibration_images(calibration_data(config, saved, run_dir), size,
                                      run.calibration_images)
                   if run.tflite_quantization == "int8" else None)
    return Request(size=size, logits=run.export_logits, quantization=run.tflite_quantization,
                   calibration=calibration, log=log,
                   sizes=inference_config(config, mode="whole"))


# What a Ctrl-C interrupts, in its one line (else "the writing of ENTRY").
WRITING = {"tflite": "the TFLite conversion", "onnx": "the ONNX conversion"}


def interrupted(doing, export_dir, previous):
    """The line of a Ctrl-C during the export's writing: ``doing`` (None: its renaming into
    place, which finishes), into ``export_dir``, which held an export if ``previous``."""
    if doing is None:
        return (f"interrupted as the new export was renamed into place: {export_dir} holds "
                f"the previous export or the new one, whole")
    kept = (f"the previous export in {export_dir} is as it was" if previous else
            f"nothing was written to {export_dir}")
    return f"interrupted during {doing}; {kept}"


def export(config, log=print):
    """Writes each of ``--export_format`` into EXPORT_DIR (default MODEL_DIR/export);
    returns EXPORT_DIR.

    Formats (``tfseg.deploy.EXPORTERS``): ``saved_model`` (any size), ``keras``
    (model.keras), ``tflite`` (model.tflite, ``--export_size``, ``--tflite_quantization``)
    and ``onnx`` (model.onnx, any size; the ``export`` extra). All but keras take uint8
    RGB [1, H, W, 3] and give int32 class ids [1, H, W], each image padded inside the
    graph to a size the model maps exactly and cropped back, as eval does: at any size
    they give the classes ``--mode=predict`` gives from the checkpoint.

    Each file carries the model's class names, palette, ignore label and training run
    (``tfseg.deploy.labels``): ``--mode=predict --model_path`` needs nothing else.

    The stock Keras model is exported whatever the training used (``--memory_saving``,
    ``--recompute``, the many-class head, a split across devices): it holds the same
    weights and none of the memory-saving twins' custom gradients.

    The export is built in a folder beside EXPORT_DIR and swapped in whole at the end.
    A non-empty EXPORT_DIR needs ``--overwrite`` (``config.run.overwrite``), and then
    must hold an export and nothing else: never predictions (predict writes them beside
    it, ``tfseg.evaluation.exported``).

    Example::

        tfseg.deploy(model_dir="runs/try", export_format=("tflite", "onnx"))

    Raises:
      InputError: a format's converter is missing (names the extra) or failed (names
        the format and the op); EXPORT_DIR is a file, is not empty (without
        --overwrite), holds other files than an export's (predictions: named), or cannot
        be written; the .tflite's conversion would not fit in memory
        (``tfseg.deploy.fits``).
      KeyboardInterrupt: Ctrl-C while the export was written, with the line saying what
        it interrupted and that EXPORT_DIR is as it was (``interrupted``).
    """
    run = config.run
    exporters = [EXPORTERS[name] for name in dict.fromkeys(run.export_format)]
    for exporter in exporters:
        exporter.require()
    export_dir = run.export_dir or os.path.join(run.model_dir, "export")
    entries = all_entries()
    kept = sorted(name for name in (os.listdir(export_dir) if os.path.isdir(export_dir) else ())
                  if name.endswith(PREDICTIONS) and name[:-len(PREDICTIONS)] in entries)
    if kept and run.overwrite:  # (older tfseg's predict wrote them there)
        raise InputError(f"--export_dir: {export_dir} holds {kept[0]}, predictions of its "
                         f"{kept[0][:-len(PREDICTIONS)]}, which --overwrite would delete; "
                         f"move them out of {export_dir} first")
    with claimed(export_dir, "--export_dir", run.overwrite, "an export",
                 lambda name: name in entries):
        return _export_into(config, export_dir, exporters, log)


def _export_into(config, export_dir, exporters, log):
    """``export``'s writing, once ``export_dir`` is this process's."""
    loaded = load_model(config, stock=True, log=log)
    model, path, config = loaded.model, loaded.checkpoint, loaded.config
    run_dir = os.path.dirname(path) or "."
    request = request_of(config, log, files.load_config(run_dir), run_dir)
    for exporter in exporters:
        if exporter.fits:  # before anything is written (a huge --export_size)
            exporter.fits(model, request)
    carried, written = labels.of_model(loaded), []
    doing, previous = None, os.path.isdir(export_dir) and bool(os.listdir(export_dir))
    try:
        with replaced_folder(export_dir, "--export_dir") as new:
            for exporter in exporters:
                doing = WRITING.get(exporter.name, f"the writing of {exporter.entries[0]}")
                written.append(exporter.write(model, new, request))
                labels.write(exporter, new, carried)
            doing = None  # all built: renamed into place now
    except tf.errors.OpError as error:  # TF's own writes (a SavedModel's variables)
        reason = re.sub(r"\s*\[Op:\w+\]$", "", error.message.strip().splitlines()[0])
        raise InputError(f"--export_dir: could not write {export_dir}: "
                         f"{reason.split('; ')[-1]}") from None
    except KeyboardInterrupt:  # Ctrl-C, once the staged export is removed (or renamed in)
        raise KeyboardInterrupt(interrupted(doing, export_dir, previous)) from None
    log(f"exported {path} to {export_dir}, each file with its {carried.num_classes} "
        f"classes ({labels.NAME}):\n" + "\n".join(f"  {w}" for w in written))
    return export_dir
