"""Where an evaluation's results are kept: one JSON file and one confusion CSV per inference
setting, so that a whole-image, a sliding-window and a multi-scale evaluation of the same
checkpoint sit side by side in ``MODEL_DIR/eval`` and in TensorBoard.

The name of a setting says everything that changes the numbers:
  * ``whole``: one pass per image;
  * ``sliding_129x129_stride86x86``: the window HEIGHTxWIDTH and its stride;
  * ``multiscale_0.75-1-1.25_flip``: the scales, and ``_flip`` with left-right flips.
Its files are ``NAME.json`` and ``NAME_confusion.csv``; its TensorBoard scalars are
``miou/NAME`` and ``pixel_accuracy/NAME`` (training's ``--eval_every`` points are
``miou/whole``: one curve with the whole-image eval runs).

Example:
    from tfseg.evaluation.inference import InferenceConfig
    result_name(InferenceConfig("sliding", (129, 129), (86, 86)))  # 'sliding_129x129_stride86x86'
    settings(InferenceConfig("multiscale", scales=(0.75, 1.0), flip=True, size_multiple=32))
    # {'mode': 'multiscale', 'scales': [0.75, 1.0], 'flip': True, 'size_multiple': 32,
    #  'size_plus_one': False}
"""

import json

import tensorflow as tf

from tfseg.io.outputs import staged


def _size(pair):
    return f"{pair[0]}x{pair[1]}"


# Per --eval_mode: (the name's tail, the settings that apply), both of an InferenceConfig.
_MODES = {
    "whole": (lambda c: "", lambda c: {}),
    "sliding": (lambda c: f"_{_size(c.crop)}_stride{_size(c.stride)}",
                lambda c: {"window": list(c.crop), "stride": list(c.stride)}),
    "multiscale": (lambda c: "_" + "-".join(f"{s:g}" for s in c.scales)
                   + ("_flip" if c.flip else ""),
                   lambda c: {"scales": list(c.scales), "flip": c.flip}),
}
CONFUSION_SUFFIX = "_confusion.csv"


def result_name(inference):
    """The file and tag name of ``inference`` (an ``InferenceConfig``; see the module)."""
    return inference.mode + _MODES[inference.mode][0](inference)


def settings(inference):
    """The settings of ``inference`` that its mode uses, and the sizes its passes are
    padded to (``InferenceConfig.pass_size``), as a JSON-ready dict."""
    return {"mode": inference.mode, **_MODES[inference.mode][1](inference),
            "size_multiple": inference.size_multiple, "size_plus_one": inference.size_plus_one}


def write_scalars(writer, result, step, name):
    """``miou/NAME`` and ``pixel_accuracy/NAME`` of ``result`` at ``step`` (none at a step
    of None: a point at no step would misplace the curve; the JSON file has it)."""
    if step is None:
        return
    with writer.as_default():
        tf.summary.scalar(f"miou/{name}", result["miou"], step)
        tf.summary.scalar(f"pixel_accuracy/{name}", result["pixel_accuracy"], step)
    writer.flush()


def write(out_dir, name, result, metrics):
    """Writes ``NAME.json`` (``result``), ``NAME_confusion.csv`` (of ``metrics``, a
    ``SegmentationMetrics``) and a TensorBoard events file into ``out_dir``, renamed into
    place together (the JSON file last; ``tfseg.io.outputs.staged``); the results of
    other names stay. Returns the JSON file's name. Raises OSError or
    ``tf.errors.OpError`` when the folder cannot be written (nothing is changed then)."""
    json_name = f"{name}.json"
    with staged(out_dir, last=(json_name,)) as stage:
        with open(stage.path(json_name), "w") as f:
            json.dump(result, f, indent=2)
        metrics.write_confusion_csv(stage.path(name + CONFUSION_SUFFIX))
        # A new events file each time, beside training's and the other evaluations'.
        writer = tf.summary.create_file_writer(stage.dir)
        write_scalars(writer, result, result["step"], name)
        writer.close()
    return json_name
