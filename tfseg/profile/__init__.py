"""The profiler: the training step's memory and time, measured in fresh processes
(`measure`) and accounted statically from its traced graph (`analysis`, which
replays it on a model of TF's executor and allocator: `simulate`, `step_graph`,
`allocator`).

It sits above `tfseg.training` and `tfseg.memory`: the measured step is the
training step (`tfseg.training.step.make_train_step` with `tfseg.runtime.builders`'
optimizer), and nothing in `tfseg.models`, `tfseg.memory` or `tfseg.training`
imports it. Its modules are imported by name (`tfseg.profile.measure`), so
importing the package imports no TensorFlow.
"""
