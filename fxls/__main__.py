"""``python -m fxls``: the command line (``fxls serve``, ``fxls check``).

Before anything else is imported, the working directory and the script directory leave
``sys.path``. ``python -m`` puts the working directory first on it; an editor that starts the
server inside a repository would otherwise import that repository's ``logging.py``,
``typing.py`` or ``json.py`` (shadowing the standard library) inside the server, outside the
sandbox. Python 3.11+ does this itself with ``-P`` or ``PYTHONSAFEPATH=1`` (which every
documented launcher sets), and the launchers also start the server in a neutral directory: this
guard is for Python 3.10 and for launchers that do neither. It cannot help when the repository
holds an ``fxls`` package of its own, since that one is imported in place of this file: only
the neutral working directory or ``-P`` prevents that.
"""

import os
import sys


def _drop_working_directory() -> None:
    """Remove ``''``, ``'.'``, the working directory and the script directory from sys.path,
    keeping the folder this package was imported from."""
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:
        cwd = None
    script = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c", "-m") else ""
    script_dir = os.path.realpath(os.path.dirname(os.path.abspath(script))) if script else None
    unsafe = {cwd, script_dir} - {None, os.path.realpath(package_root)}
    keep = []
    for entry in sys.path:
        if entry in ("", "."):
            continue
        try:
            real = os.path.realpath(entry)
        except (OSError, ValueError):
            real = entry
        if real in unsafe:
            continue
        keep.append(entry)
    sys.path[:] = keep


_drop_working_directory()

from fxls.cli.main import main  # noqa: E402

raise SystemExit(main())
