"""Output paths checked before any work.

``--output``, ``--plot``, ``--model-card`` and a new ``--budget-file`` are checked before any data
is loaded: a folder, a device such as ``/dev/null``, or a folder where no file can be created
fails at once, not after the fit.
"""

from __future__ import annotations

from ._running import CommandError, _one_line


def _check_output_path(path, flag: str) -> None:
    """Fail before fitting when ``path`` (``--output``, ``--plot``, a new ``--budget-file``) cannot
    be written: it is not a regular file (a folder, ``/dev/null``, a FIFO: see
    :func:`privrec._io.check_write_target`; a symbolic link is checked at its target), a part of
    its folder is a file, or no file can be created in its folder (or, when the folder is still to
    be created, in the nearest one that exists) -- probed with a privrec temporary file, removed
    at once."""
    if path is None:
        return
    from .._io import check_write_target, make_temp_file

    try:
        target = check_write_target(path)
    except ValueError as exc:
        raise CommandError(f"{flag}: {_one_line(exc)}") from None
    folder = target.parent
    while not folder.exists() and folder != folder.parent:  # save() creates missing folders
        folder = folder.parent
    if not folder.is_dir():
        raise CommandError(f"{flag} {path}: {folder} is not a folder")
    try:
        probe = make_temp_file(folder, target.name)
    except OSError as exc:
        raise CommandError(f"{flag} {path}: cannot create a file in {folder} ({exc.strerror or exc})") from None
    probe.unlink(missing_ok=True)
