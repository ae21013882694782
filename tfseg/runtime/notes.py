"""What a library writes to file descriptor 2 while it works, kept from the user.

TensorFlow's TFLite converter writes notes from C++ on every conversion ("Ignored
output_format.", "Ignored drop_control_dependency.", "fully_quantize: 0, inference_type:
6, ...", "Skipping runtime version metadata ...") and, during int8 calibration, the
interpreter's six-line deprecation warning: ten lines after a successful export. Python
cannot catch what C++ writes, so the block's fd 2 goes to a temporary file. A failure
still raises, and its message is the exception's (the converter's errors are in it); a
crash that ends the process at once has Python's fault handler write its traceback to
the real stderr.

Example:
    with kept_from_stderr() as notes:
        converter.convert()
    notes[0]   # what it wrote
"""

import contextlib
import faulthandler
import os
import sys
import tempfile
import warnings


@contextlib.contextmanager
def kept_from_stderr():
    """File descriptor 2 (and Python's warnings) held in the block; yields a list that
    holds the text written there once the block ends."""
    notes = []
    sys.stderr.flush()
    saved = os.dup(2)
    handler_was_on = faulthandler.is_enabled()
    if not handler_was_on:  # one already on (a test runner's) keeps its own file
        faulthandler.enable(file=saved)
    try:
        with tempfile.TemporaryFile() as sink, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            os.dup2(sink.fileno(), 2)
            try:
                yield notes
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                sink.seek(0)
                notes.append(sink.read().decode(errors="replace"))
    finally:
        if not handler_was_on:
            faulthandler.disable()
        os.close(saved)
