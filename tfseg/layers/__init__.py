"""tfseg layers: resize and the memory-saving twins of stock Keras compositions."""

from tfseg.layers.resize import ResizeLike

__all__ = ["ResizeLike"]
