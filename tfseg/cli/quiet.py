"""TensorFlow imported without its start-up lines, unless ``--verbose``.

TensorFlow's C++ libraries log on load ("All log messages before absl::InitializeLog()
…", "oneDNN custom operations are on …"). ``TF_CPP_MIN_LOG_LEVEL`` silences them only
when it is set before the process starts (the libraries read it once absl's logging is
up), so the import runs with file descriptor 2 sent to a temporary file, which is
shown only if the import fails: a one-line error stays the only line.

Example:
    from tfseg.cli import quiet
    quiet.import_tensorflow(verbose=False)
"""

import os
import sys
import tempfile


def import_tensorflow(verbose=False):
    """Imports TensorFlow (and Keras); what its libraries print on load is dropped unless
    ``verbose`` or the import fails. A no-op once TensorFlow is imported."""
    if verbose or "tensorflow" in sys.modules:
        import keras  # noqa: F401  (imports TensorFlow, its backend)
        return
    # TensorFlow's INFO and WARNING lines after the import too (absl's Python logging,
    # which tfseg's messages do not use, keeps its own level).
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.stderr.flush()
    with tempfile.TemporaryFile() as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            import keras  # noqa: F401  (imports TensorFlow, its backend)
            import tensorflow  # noqa: F401
        except BaseException:
            os.dup2(saved, 2)
            sink.seek(0)
            sys.stderr.write(sink.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
