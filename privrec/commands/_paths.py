"""Output paths checked before any work.

``--output``, ``--plot``, ``--model-card`` and a new ``--budget-file`` are checked before any data
is loaded: a folder, a device such as ``/dev/null``, or a folder where no file can be created
fails at once, not after the fit (:func:`_check_output_path`). No two of a command's file options
may name the same file when one of them is written -- ``--output same --model-card same`` would
keep only the card, ``--output r.csv --ratings r.csv`` would replace the data
(:func:`check_distinct_paths`).
"""

from __future__ import annotations

import os
from pathlib import Path

from ._running import CommandError, _one_line

#: file options a command writes, by ``args`` attribute (``--budget-file`` is read and rewritten)
OUTPUT_OPTIONS = (
    ("output", "--output"),
    ("plot", "--plot"),
    ("model_card", "--model-card"),
    ("budget_file", "--budget-file"),
)
#: file options a command only reads
INPUT_OPTIONS = (("ratings", "--ratings"), ("users", "--users"), ("items", "--items"), ("model", "--model"))


def _same_file_key(path) -> tuple:
    """What identifies the file ``path`` names: its real path (every symbolic link followed, also
    of a file still to be created) and, for an existing file, its device and inode (hard links)."""
    real = os.path.realpath(os.path.expanduser(str(path)))
    try:
        st = os.stat(real)
    except OSError:
        return (real,)
    return (real, (st.st_dev, st.st_ino))


def check_distinct_paths(args) -> None:
    """``CommandError`` (one line, before anything is loaded or written) when two of the file options
    of ``args`` name the same file and at least one of them is written: the outputs
    (:data:`OUTPUT_OPTIONS`) must differ from each other and from every input
    (:data:`INPUT_OPTIONS`). Compared by real path, symbolic links followed, and for existing files
    by device and inode (hard links). Options a command does not have, or that are not given, are
    skipped."""
    given = []
    for options, written in ((OUTPUT_OPTIONS, True), (INPUT_OPTIONS, False)):
        for attr, flag in options:
            value = getattr(args, attr, None)
            if isinstance(value, (str, os.PathLike)) and str(value) != "":
                given.append((flag, value, written, _same_file_key(value)))
    for k, (flag_a, path_a, written_a, key_a) in enumerate(given):
        for flag_b, path_b, written_b, key_b in given[k + 1 :]:
            if not (written_a or written_b):
                continue
            same = key_a[0] == key_b[0] or (len(key_a) > 1 and len(key_b) > 1 and key_a[1] == key_b[1])
            if same:
                how = "" if Path(path_a) == Path(path_b) else f" ({path_b} is the same file as {path_a})"
                if written_a and written_b:
                    lost = "one file would replace the other"
                else:
                    lost = f"writing {flag_a if written_a else flag_b} would replace the {flag_b if written_a else flag_a} file"
                raise CommandError(
                    f"{flag_a} and {flag_b} name the same file {Path(path_a)}{how}: {lost}; give them different paths"
                )


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
