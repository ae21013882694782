"""When two blocks are the same computation: the key `Blocks` shares functions by.

Two blocks are the same computation when their layers, in order, have the same
configurations once each layer's own name is replaced by its position (the names are
all that tell the 16 middle units apart), the same wiring (which layer's output each
layer reads, or which of the block's inputs), and variables of the same shapes and
dtypes in the same order. A layer Keras cannot serialize makes its block unique.
"""

import json

import keras


def signature(plan, variables):
    """A key (a string) of the block `plan` ((nodes, input ids, output ids), as
    `tfseg.xla.blocks` plans them) with `variables`: equal keys, the same computation
    on inputs of the same shapes (which `Blocks` compares at the call)."""
    nodes, ins, outs = plan
    made = {id(t): (i, k) for i, node in enumerate(nodes) for k, t in enumerate(node.outputs)}
    position = {key: ("input", i) for i, key in enumerate(ins)}
    try:
        configs = [keras.saving.serialize_keras_object(node.operation) for node in nodes]
    except (TypeError, ValueError, NotImplementedError):
        return f"unique {id(nodes)}"
    names = {}
    for config in configs:
        _collect_names(config, names)
    layers = [_renamed(config, names) for config in configs]
    wiring = [[made.get(id(t), position.get(id(t))) for t in node.input_tensors]
              for node in nodes]
    weights = [(tuple(v.shape), str(v.dtype), bool(v.trainable)) for v in variables]
    text = json.dumps([layers, wiring, [made[key] for key in outs], weights],
                      sort_keys=True, default=repr)
    return text


def _collect_names(value, names):
    """Numbers each layer name in a serialized config (a dict's "name" beside its
    "class_name", or in a layer's "config"), in the order met."""
    if isinstance(value, dict):
        config = value.get("config")
        if "class_name" in value and isinstance(config, dict) and isinstance(
                config.get("name"), str):
            names.setdefault(config["name"], f"#{len(names)}")
        for item in value.values():
            _collect_names(item, names)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect_names(item, names)


def _renamed(value, names):
    """`value` with every string that is a collected layer name replaced by its number
    (a whole string, never part of one)."""
    if isinstance(value, dict):
        return {key: _renamed(item, names) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_renamed(item, names) for item in value]
    if isinstance(value, str):
        return names.get(value, value)
    return value
