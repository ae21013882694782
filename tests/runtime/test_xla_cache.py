"""tfseg.runtime.xla_cache: XLA's persistent cache in real processes (a second process compiles
nothing; a damaged entry costs one line and a compilation, never the run), and its
folder's checks on real files."""

import glob
import os
import socket
import subprocess
import sys

import pytest

from tfseg.runtime import xla_cache as cache

# A process that turns the cache on, compiles and runs one XLA function, and prints the
# folder; its XLA modules are dumped (one file per compilation) to count them.
CHILD = """
import sys
from tfseg.runtime import xla_cache as cache
folder = cache.use(sys.argv[1])
import tensorflow as tf
f = tf.function(lambda x: tf.nn.relu(x) * 2.0 + 1.0, jit_compile=True)
print(float(tf.reduce_sum(f(tf.ones([3, 5])))))
print(folder)
"""


def _run(root, dump):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", XLA_FLAGS=f"--xla_dump_to={dump}")
    env.pop("TF_XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(root)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    compiled = len(glob.glob(os.path.join(dump, "*.before_optimizations.txt")))
    return proc.stdout.strip().splitlines(), compiled


@pytest.mark.slow  # three fresh processes, each importing TensorFlow: 15-30 s
def test_a_second_process_compiles_nothing_and_a_damaged_entry_costs_one_line(tmp_path):
    root = tmp_path / "cache"
    lines, compiled = _run(root, tmp_path / "dump1")
    assert lines[0] == "45.0" and compiled == 1
    folder = lines[-1]
    assert os.path.dirname(folder) == str(root) and "tf-" in os.path.basename(folder)
    entries = glob.glob(os.path.join(folder, "*.pb"))
    assert len(entries) == 1
    lines, compiled = _run(root, tmp_path / "dump2")
    assert lines[0] == "45.0" and compiled == 0  # loaded, not compiled
    with open(entries[0], "r+b") as f:  # cut short, as a damaged copy would be
        f.truncate(os.path.getsize(entries[0]) // 2)
    lines, compiled = _run(root, tmp_path / "dump3")
    assert lines[0] == f"compile cache: removed {entries[0]}, which is damaged (not a whole " \
                       f"entry); it is compiled again"
    assert lines[1] == "45.0" and compiled == 1
    assert os.path.getsize(entries[0]) > 0  # written again, whole


def _use(tmp_path, setting="auto", **environ):
    logged, env = [], {"XDG_CACHE_HOME": str(tmp_path / "xdg"), **environ}
    folder = cache.use(setting, logged.append, device="Some GPU 1", environ=env)
    return folder, env.get("TF_XLA_FLAGS"), logged


def test_the_default_folder_is_the_users_cache_per_version_and_device(tmp_path):
    import tensorflow as tf

    folder, flags, logged = _use(tmp_path)
    assert _use(tmp_path, TF_XLA_FLAGS=flags) == (folder, flags, [])  # on already
    assert folder == str(tmp_path / "xdg" / "tfseg" / "xla" /
                         f"tf-{tf.__version__}-Some_GPU_1")
    assert flags == f"--tf_xla_persistent_cache_directory={folder}" and logged == []
    assert _use(tmp_path, "off") == (None, None, [])
    user = "--tf_xla_persistent_cache_directory=/theirs"
    assert _use(tmp_path, TF_XLA_FLAGS=user) == (None, user, [])


def test_damaged_entries_and_a_gone_writers_files_are_removed_the_rest_kept(tmp_path):
    folder = _use(tmp_path)[0]
    host = socket.gethostname()
    files = {"empty.pb": b"", "garbage.pb": b"\xff\xff\xff", "fine.pb": b"\x08\x01",
             f"x.pb{host}-a1-999999999-1.tmp": b"half", f"y.pb{host}-a1-{os.getpid()}-1.tmp": b"",
             "z.pbotherhost-a1-999999999-1.tmp": b"another host's", "notes.txt": b"mine"}
    for name, data in files.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
    logged = _use(tmp_path)[2]
    assert sorted(os.listdir(folder)) == ["fine.pb", "notes.txt",
                                          f"y.pb{host}-a1-{os.getpid()}-1.tmp",
                                          "z.pbotherhost-a1-999999999-1.tmp"]
    assert logged == [f"compile cache: removed {folder}/empty.pb, which is empty; it is "
                      f"compiled again",
                      f"compile cache: removed {folder}/garbage.pb, which is damaged (not a "
                      f"whole entry); it is compiled again"]


def test_a_nearly_full_disk_only_reads_and_an_unwritable_folder_is_off(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "MIN_FREE_BYTES", 2**62)
    folder, flags, logged = _use(tmp_path)
    assert flags.endswith(" --tf_xla_persistent_cache_read_only=true")
    assert len(logged) == 1 and logged[0].startswith("compile cache: ") and \
        logged[0].endswith(f"MiB free on the disk of {folder}: it is read, and nothing new "
                           f"is written to it")
    spaced = _use(tmp_path, str(tmp_path / "my cache"))
    assert spaced[:2] == (None, None) and "has a space" in spaced[2][0]
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    folder, flags, logged = _use(tmp_path, str(blocked))
    assert (folder, flags) == (None, None)
    assert logged[0].startswith(f"compile cache off: cannot write {blocked}/tf-")
