"""``Config``: every setting of a run, one frozen value in five sections, without TensorFlow.

    Config(data=Data(...), model=Model(...), optim=Optim(...), eval=Eval(...), run=Run(...))

The sections are the parts' own arguments: ``Model`` is ``deeplab_v3_plus``'s
keyword arguments, ``Eval`` is ``InferenceConfig``'s, ``Data`` the shared part of
each split's ``DataConfig``. Each field is also a command-line flag: its name
is the field's, or ``flag=`` where a bare name would be ambiguous (``--eval_mode``),
and its help, type and list shape are in the field's metadata, so main.py
generates the flags from here (``flag_table``) and nothing restates them.
Flag names are unique across sections: ``Config(...)``, ``Config.from_flat`` and
``replace`` take them.
Each setting is parsed one way (``tfseg.config.values``) from a flag's text or a Python
value (``crop_size="65,65"`` or ``(65, 65)``), so the command and the Python API accept
and refuse the same settings, in the same words.

Names that TensorFlow-side packages also check (data sets, norms, recomputable
blocks) are defined here, once: ``--mode=validate`` imports no TensorFlow.
Validation messages name the flag (``--crop_size: ...``).
"""

from tfseg.config.config import Config, flag_table
from tfseg.config.names import (ARCHITECTURE, DATASETS, DTYPE_POLICIES, EVAL_MODES,
                                MEMORY_ANCHORS, MODES, NORMS, RECOMPUTE_BLOCKS, RECOMPUTE_HEAD,
                                REPORT_VARIANTS, RESIZE_MODES, STRATEGIES, WEIGHT_DECAY_TYPES,
                                crop_ok, recompute_names, setting, unit_name)
from tfseg.config.sections import SECTIONS, Data, Eval, Model, Optim, Run

__all__ = ["ARCHITECTURE", "Config", "flag_table", "DATASETS", "DTYPE_POLICIES",
           "EVAL_MODES", "MEMORY_ANCHORS", "MODES", "NORMS", "RECOMPUTE_BLOCKS",
           "RECOMPUTE_HEAD", "REPORT_VARIANTS", "RESIZE_MODES", "STRATEGIES",
           "WEIGHT_DECAY_TYPES", "crop_ok", "recompute_names", "setting", "unit_name",
           "SECTIONS", "Data", "Eval", "Model", "Optim", "Run"]
