"""A network too big for one device: its consecutive parts on several (plain model
parallelism with TF's own placement), and `cuts`, which chooses where to cut it.

Below ``tfseg.training`` (whose step takes the gradients of a placed model on the
devices of its layers) and ``tfseg.runtime``; above ``tfseg.memory``.
"""

from tfseg.split.parts import Part, parts
from tfseg.split.place import PlacedModel, device_names, place
from tfseg.split.plan import split_for_run

__all__ = ["Part", "PlacedModel", "device_names", "parts", "place", "split_for_run"]
