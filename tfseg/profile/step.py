"""`StepConfig`: which training step the profiler measures, and that step, built as
`--mode=train` builds it. A `StepConfig` crosses to the measuring process as JSON."""

import dataclasses
import importlib

from tfseg.config import Config
from tfseg.errors import InputError
from tfseg.memory import rewrite
from tfseg.models.xception import DEFAULT_RECOMPUTE
from tfseg.runtime import builders
from tfseg.training import optim
from tfseg.training import loop

VARIANTS = ("stock", "memory_saving", "recompute")
# Not settings of the run: what is measured, and how.
_OWN = ("variant", "num_classes", "recompute_blocks", "timed_steps", "analyze",
        "analyze_batches", "builder", "run_steps", "launches")


@dataclasses.dataclass(frozen=True)
class StepConfig:
    """One training-step measurement: the step of the run `run` describes.

    Args:
      run: the `tfseg.config.Config` of the run whose step is measured: its model,
        crop (`height`, `width`), batch, dtype policy, strategy, jit, optimizer,
        weight decay and class weights. Its model's `memory_saving` / `recompute`
        are set by the variant.
      num_classes: the logits' classes.
      variant: "stock" (Keras layers), "memory_saving" (fused ReLU+depthwise and
        output-only norms) or "recompute" (memory saving plus recompute of
        `recompute_blocks` (any `--recompute` names), by default
        `tfseg.models.xception.DEFAULT_RECOMPUTE`;
        `blocks_used()` says which a variant uses).
      timed_steps: steps timed (and their peaks measured) after the measured one.
      analyze: also return the static analysis of the traced step
        (`tfseg.profile.analysis.step_breakdown`).
      analyze_batches: more batch sizes for the analysis to estimate the peak at
        (traced, not run), e.g. for the budget fit's per-sample slope (`tfseg.budget.fit`).
      run_steps: False: only estimate, run nothing (`tfseg.profile.measure`:
        the step is traced and analysed, and the result's base and peak are the
        static estimates).
      builder: None (DeepLabv3+ of `run`), or (module, function name) of
        `f(config) -> keras.Model` to measure instead (e.g. a small stack in a
        test), imported by name since the config crosses to a fresh process as
        JSON. "memory_saving" then measures `tfseg.memory.rewrite` of its model;
        the model must take [batch, height, width, 3] images and return
        `num_classes` logits at that size.
      launches: also run one more warm step under TensorFlow's profiler, after the
        measured ones, and return its executed ops and XLA time by block
        (`tfseg.profile.launches`).
    """

    run: Config = Config()
    num_classes: int = 21
    variant: str = "stock"
    recompute_blocks: tuple = None
    timed_steps: int = 2
    analyze: bool = False
    analyze_batches: tuple = ()
    builder: tuple = None
    run_steps: bool = True
    launches: bool = False

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        if self.builder is not None and self.variant == "recompute":
            raise ValueError('a builder\'s model has no backbone blocks to recompute: '
                             'measure "stock" or "memory_saving"')
        weights = self.run.optim.class_weights
        if weights and len(weights) != self.num_classes:
            raise InputError(f"--class_weights: {len(weights)} values for "
                             f"{self.num_classes} classes")

    @classmethod
    def of(cls, **fields):
        """The default with ``replace``'s changes
        (`StepConfig.of(variant="recompute", height=65, width=97, batch=2, norm="group")`)."""
        return cls().replace(**fields)

    def replace(self, **changes):
        """A copy with fields changed: its own, `run`, `height` / `width` / `batch`, and
        the run's settings by flag name (`step.replace(batch=4, jit_compile=True)`)."""
        run = changes.pop("run", self.run)
        own = {k: changes.pop(k, getattr(self, k)) for k in _OWN}
        height = changes.pop("height", run.data.crop_size[0])
        width = changes.pop("width", run.data.crop_size[1])
        changes.setdefault("batch_size", changes.pop("batch", run.data.batch_size))
        return dataclasses.replace(self, run=run.replace(crop_size=(height, width), **changes),
                                   **own)

    @property
    def height(self):
        return self.run.data.crop_size[0]

    @property
    def width(self):
        return self.run.data.crop_size[1]

    @property
    def batch(self):
        return self.run.data.batch_size

    def blocks_used(self):
        """The backbone blocks this variant recomputes: () unless "recompute"."""
        if self.variant != "recompute":
            return ()
        if self.recompute_blocks is None:
            return tuple(DEFAULT_RECOMPUTE)
        return tuple(self.recompute_blocks)

    def run_config(self):
        """`run` with the variant's model: what `--mode=train` builds the step from."""
        return self.run.replace(memory_saving=self.variant != "stock",
                                recompute=self.blocks_used())

    def record(self):
        """A flat dict for the result: the run's settings by flag name, the shape and
        the measurement's own fields."""
        own = {k: getattr(self, k) for k in _OWN}
        return {**self.run_config().flat(), **own, "recompute_blocks": list(self.blocks_used()),
                "height": self.height, "width": self.width, "batch": self.batch}

    def to_json(self):
        return {"run": self.run.to_dict(), **{k: getattr(self, k) for k in _OWN}}

    @classmethod
    def from_json(cls, payload):
        own = {k: tuple(v) if isinstance(v, list) else v
               for k, v in payload.items() if k != "run"}
        return cls(run=Config.from_dict(payload["run"]), **own)


def build_model(config, norm=None):
    """The model `config` measures: DeepLabv3+ as `tfseg.runtime.builders.model`
    builds it for training (with the strategy's `norm`), or `config.builder`'s
    (rewritten by `tfseg.memory.rewrite` unless the variant is "stock")."""
    if config.builder is not None:
        module, name = config.builder
        model = getattr(importlib.import_module(module), name)(config)
        return model if config.variant == "stock" else rewrite(model)
    return builders.model(config.run_config(), config.num_classes, norm, training=True)


def build_step(config):
    """The training step `config` describes, built by `tfseg.training.loop.build_step`.

    Sets the dtype policy; returns (strategy, model, optimizer, step), where
    `step(batch)` is `tfseg.training.step.make_train_step`'s distributed step.
    """
    run = config.run_config()
    strategy = builders.strategy(run)
    builders.set_dtype_policy(run)
    model, optimizer, counter, step = loop.build_step(
        run, strategy, lambda norm: build_model(config, norm), builders.norm_for(run, strategy))
    return strategy, model, optimizer, step


def describe_optimizer(config, model, optimizer):
    """What the built step optimises with: a record of what ran, for the result."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    l2_weight, l2_kernels = optim.l2_weight_decay(config.run_config(), model)
    return {
        "class": type(optimizer).__name__,
        "inner_class": type(inner).__name__,
        "momentum": float(inner.momentum),
        "decoupled_weight_decay": float(inner.weight_decay or 0.0),
        "l2_weight_decay": float(l2_weight),
        "l2_kernels": len(l2_kernels),
        "momentum_slots": len(getattr(inner, "momentums", None) or ()),
    }
