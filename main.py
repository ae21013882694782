"""``python main.py [flags]`` in a checkout: the same command as the installed ``tfseg``.

    python main.py                       # train the synthetic default, then evaluate it
    python main.py --help                # modes and flags, by section
"""

from tfseg.cli.modes import STOP

if __name__ == "__main__":
    # SIGTERM/SIGINT caught before absl's import too: a signal at any moment of a run
    # ends it cleanly (tfseg.cli.modes).
    STOP.__enter__()

from tfseg.cli.main import run  # noqa: E402

if __name__ == "__main__":
    run()
