"""tfseg/io/claims.py: an output folder claimed for a whole write, against a second
writer in a real process (each loads the modules alone: no TensorFlow)."""

import os
import subprocess
import sys
import textwrap

import pytest

from tests.io.test_outputs import _tree
from tfseg.errors import InputError
from tfseg.io import claims, outputs

MODULE = claims.__file__


CLAIMANT = textwrap.dedent("""
    import os, sys
    from tfseg.io import claims, outputs
    out = sys.argv[2]
    with claims.claimed(out, "--output_dir", False, "a predict batch", lambda n: True):
        with outputs.replaced_folder(out) as new:
            with open(os.path.join(new, "a.png"), "w") as f:
                f.write("first")
            print("claimed", flush=True)
            sys.stdin.readline()  # the other writer tries now
    print("done", flush=True)
""")


def _claimant(out):
    proc = subprocess.Popen([sys.executable, "-c", CLAIMANT, MODULE, str(out)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(MODULE))))
    assert proc.stdout.readline().strip() == "claimed"
    return proc


def test_a_second_writer_of_a_claimed_folder_is_refused_and_the_first_is_whole(tmp_path):
    """Two writers into one new folder (two predicts at once): the second is refused in
    one line naming the first's pid, and the first's files are all there."""
    out = tmp_path / "predictions"
    first = _claimant(out)
    try:
        with pytest.raises(InputError) as error:
            with claims.claimed(str(out), "--output_dir", False, "a predict batch",
                                 lambda n: True):
                pytest.fail("claimed a folder another process holds")
        assert str(error.value) == (f"--output_dir: {out} is being written by another tfseg "
                                    f"process (pid {first.pid}); wait for it to end, or "
                                    f"choose another folder")
        first.stdin.write("go\n")
        first.stdin.flush()
        assert first.wait(timeout=60) == 0 and first.stdout.read().strip() == "done"
    finally:
        first.kill()
    assert _tree(tmp_path) == {"predictions/": None, "predictions/a.png": "first"}  # no lock
    with pytest.raises(InputError, match="is not empty; pass --overwrite"):
        with claims.claimed(str(out), "--output_dir", False, "a predict batch",
                             lambda n: True):
            pass


def test_a_claim_whose_process_was_killed_is_free(tmp_path):
    """kill -9 ends the claim with the process; the file it leaves is reused, then gone."""
    out = tmp_path / "export"
    first = _claimant(out)
    first.kill()
    first.wait(timeout=60)
    assert (tmp_path / (claims.CLAIM_PREFIX + "export")).exists()
    with claims.claimed(str(out), "--export_dir", False, "an export", lambda n: True):
        with outputs.replaced_folder(str(out)) as new:
            open(os.path.join(new, "model.keras"), "w").close()
    assert sorted(os.listdir(tmp_path)) == ["export"]
