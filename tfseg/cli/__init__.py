"""The command line: ``tfseg`` (installed) or ``python main.py`` in a checkout.

``main`` turns flags into one ``Config`` and runs a mode from ``modes.MODES``;
``usage`` is ``--help``; ``quiet`` imports TensorFlow without its start-up lines.
The top of tfseg's layering: nothing in the library imports it.
"""
