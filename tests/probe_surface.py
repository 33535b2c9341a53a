"""Probe of privrec's input surface (issue 39): bad inputs must give a one-line error, good ones
the right result -- never a traceback, a hang or a silently wrong result.

Run ``python tests/probe_surface.py`` (all cases; ``--fast`` only those that fail before any fit,
``-k TEXT`` the cases whose name contains TEXT, ``-v`` the output of each unexpected case). Each
case runs in its own subprocess, in its own temporary folder, with a timeout and a cap on its
address space (``RLIMIT_AS``), and is classified as

* ``correct``: the expected result (exit status 0 and the check of its output / files passed);
* ``clear error``: exit status 2 (3: refused by a budget) with one ``error:`` line on stderr that
  names what the case expects (the argument, the file, the line, the value);
* ``unclear error``: a handled error whose message is not one line, or does not name them;
* ``traceback``: a raw Python traceback;
* ``silent-wrong``: exit status 0 although the input is bad, or a wrong result;
* ``hang``: the timeout expired.

A case expects either ``correct`` or ``clear error``; the counts of each class are printed, with
the cases whose outcome was not the expected one. The exit status is 1 when any case was
unexpected. ``tests/test_probe_surface.py`` runs the fast subset under pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: address-space cap of each case (bytes; the interpreter with numpy, scipy, pandas needs ~1 GB)
ADDRESS_SPACE = 6 << 30
#: seconds before a case counts as hung
TIMEOUT = 240.0
CLASSES = ("correct", "clear error", "unclear error", "traceback", "silent-wrong", "hang")

N_USERS, N_ITEMS = 300, 50
#: small, quick fits: the probe tests the surface, not the model
QUICK = ["--factors", "0", "--iterations", "1", "--quiet", "--epsilon", "1"]


# ---------------------------------------------------------------------- data files of every case


def _ratings_rows(seed: int = 0) -> list[tuple[str, str, int]]:
    import random

    rng = random.Random(seed)
    seen, rows = set(), []
    while len(rows) < 4000:
        u, i = f"u{rng.randrange(N_USERS)}", f"i{rng.randrange(N_ITEMS)}"
        if (u, i) not in seen:
            seen.add((u, i))
            rows.append((u, i, rng.randint(1, 5)))
    for u in range(N_USERS):  # every user and item has ratings
        for i in (u % N_ITEMS,):
            if (f"u{u}", f"i{i}") not in seen:
                seen.add((f"u{u}", f"i{i}"))
                rows.append((f"u{u}", f"i{i}", 3))
    return rows


def _write_csv(path: Path, rows, header: str = "user,item,rating") -> None:
    path.write_text(header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))


def make_files(folder: Path) -> None:
    """The files the cases read: ``r.csv`` (good ratings, string ids: u0..u299 x i0..i49), and
    variants with one bad line appended."""
    rows = _ratings_rows()
    _write_csv(folder / "r.csv", rows)
    base = (folder / "r.csv").read_text()
    # u1 never rated i50 (there is no item i50): the appended line is a new (user, item) pair
    for name, extra in {
        "neg.csv": "u1,i50,-3\n",
        "seven.csv": "u1,i50,7\n",
        "huge.csv": "u1,i50,1e9\n",
        "extra_field.csv": "u1,i50,3,9\n",
        "missing_field.csv": "u1,i50\n",
        "empty_field.csv": "u1,,3\n",
        "text_rating.csv": "u1,i50,five\n",
        "nan_rating.csv": "u1,i50,nan\n",
        "inf_rating.csv": "u1,i50,inf\n",
        "dup.csv": "u2,i51,3\nu2,i51,4\n",
    }.items():
        (folder / name).write_text(base + extra)
    (folder / "numeric.csv").write_text(
        "user,item,rating\n" + "".join(f"{u},{i},3\n" for u in range(40) for i in range(5))
    )
    (folder / "numeric_overflow.csv").write_text((folder / "numeric.csv").read_text() + "99999999999999999999999,1,4\n")
    (folder / "numeric_float_id.csv").write_text((folder / "numeric.csv").read_text() + "1.5,1,4\n")
    (folder / "header_only.csv").write_text("user,item,rating\n")
    (folder / "empty.csv").write_text("")
    (folder / "latin1.csv").write_bytes(base.encode() + "u1,caf\xe9,3\n".encode("latin-1"))
    (folder / "bom.csv").write_text("\ufeff" + base)
    users = sorted({r[0] for r in rows}, key=lambda u: int(u[1:]))
    items = sorted({r[1] for r in rows}, key=lambda i: int(i[1:]))
    (folder / "users.txt").write_text("\n".join(users) + "\n")
    (folder / "items.txt").write_text("\n".join(items) + "\n")
    (folder / "items_repeat.txt").write_text("\n".join(items + [items[0]]) + "\n")
    (folder / "items_short.txt").write_text("\n".join(items[:-1]) + "\n")
    (folder / "users_blank.txt").write_text("\n".join(users[:5]) + "\n\n" + "\n".join(users[5:]) + "\n")
    (folder / "ratings.xlsx").write_text("not a spreadsheet")
    (folder / "notes.txt").write_text("a file that is not a model\n")


# ---------------------------------------------------------------------- cases


@dataclass
class Case:
    """One probe: ``argv`` of ``privrec`` (or ``code``: Python source run in the case folder, which
    prints ``RESULT <json>`` when it completes) and what it must do: ``error`` (substrings the one
    error line must contain, case-insensitive) or ``check(folder, stdout, stderr) -> bool`` on
    success; with ``error``, ``check`` is what the failed command must have left intact."""

    name: str
    argv: list[str] | None = None
    code: str | None = None
    error: list[str] | None = None
    check: Callable[[Path, str, str], bool] | None = None
    setup: str | None = None  # Python source run in the folder before the case (not probed)
    fast: bool = False  # fails (or finishes) before any fit: part of the pytest subset
    seeds: tuple[int, ...] = ()  # run argv once per seed (--seed S), all must agree
    timeout: float = TIMEOUT


def _fit(*extra: str) -> list[str]:
    return ["fit", *extra, *QUICK]


def _exists_not(*names: str):
    return lambda folder, out, err: not any((folder / n).exists() for n in names)


def _intact(name: str):
    return lambda folder, out, err: (folder / name).read_text().startswith("user,item,rating\n")


#: Python helpers the ``code`` cases share (run in the case folder)
PRELUDE = textwrap.dedent(
    """
    import json, math, os, stat, sys, warnings
    warnings.simplefilter("ignore")
    import numpy as np
    import pandas as pd

    def result(obj):
        print("RESULT " + json.dumps(obj))

    def frame():
        return pd.read_csv("r.csv", dtype={"user": str, "item": str})

    def quick_model(df=None, **kw):
        from privrec.models import DPALS
        params = dict(epsilon=1.0, factors=2, iterations=1, show_progress=False, random_state=0)
        params.update(kw)
        return DPALS(**params).fit(frame() if df is None else df)
    """
)


def _craft_model_source(declared_rows: int) -> str:
    """Python source writing ``crafted.npz``: a small deflated model file whose ``item_factors_``
    declares ``declared_rows`` x 8 float32 (zeros: the file is ~1000 times smaller)."""
    return textwrap.dedent(
        f"""
        import io, json, zipfile
        import numpy as np
        from privrec._io import atomic_write_text
        model = quick_model()
        model.save("small.npz")
        with np.load("small.npz") as z:
            meta = json.loads(str(z["__meta__"]))
        n_rows = {declared_rows}
        meta["arrays"] = {{"item_factors_": {{"shape": [n_rows, 8], "dtype": "<f4"}}}}
        meta.pop("item_ids", None)
        meta["params"]["factors"] = 8
        buf = io.BytesIO()
        np.save(buf, np.array(json.dumps(meta)))
        hdr = io.BytesIO()
        np.lib.format.write_array_header_1_0(hdr, {{"descr": "<f4", "fortran_order": False, "shape": (n_rows, 8)}})
        with zipfile.ZipFile("crafted.npz", "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
            zf.writestr("__meta__.npy", buf.getvalue())
            with zf.open("item_factors_.npy", "w", force_zip64=True) as fh:
                fh.write(hdr.getvalue())
                chunk, left = bytes(1 << 24), n_rows * 8 * 4
                while left > 0:
                    fh.write(chunk[: min(left, len(chunk))])
                    left -= len(chunk)
        """
    )


def _rlimit_load(cap: str, declared_rows: int) -> str:
    """Code loading ``crafted.npz`` under an RLIMIT_AS of ``cap`` (an expression of ``used``, the
    current VmSize in bytes)."""
    return textwrap.dedent(
        f"""
        import resource
        from privrec.models import load_model
        with open("/proc/self/status") as fh:
            used = next(int(l.split()[1]) * 1024 for l in fh if l.startswith("VmSize:"))
        cap = int({cap})
        resource.setrlimit(resource.RLIMIT_AS, (cap, resource.getrlimit(resource.RLIMIT_AS)[1]))
        try:
            load_model("crafted.npz")
        except ValueError as exc:
            print("privrec probe: error: " + str(exc), file=sys.stderr)
            sys.exit(2)
        result("loaded")
        """
    )


def _ids_agree(folder: Path, out: str, err: str) -> bool:
    """``recommend`` and ``export`` of the same model name the same items for user u1."""
    try:
        rec = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return False
    return rec.get("recommend") == rec.get("export") and bool(rec.get("recommend"))


#: factors of 5 users x 10 items and a test matrix with one column per item
_RANKING_SETUP = textwrap.dedent(
    """
    import scipy.sparse as sp
    from privrec.evaluation.metrics import precision_at_k, ranking_metrics
    rng = np.random.default_rng(0)
    U, V = rng.random((5, 3)).astype(np.float32), rng.random((10, 3)).astype(np.float32)
    T = sp.random(5, 10, density=0.3, format="csr", random_state=1)
    """
)
#: ``r12.csv``: 300 users with six ratings each on a catalogue of 12 items (fewer than the CLI's k = 20)
_SMALL_CATALOGUE = (
    "rng = np.random.default_rng(0)\n"
    "rows = [(f'u{u}', f'i{i}', int(rng.integers(1, 6))) for u in range(300) for i in rng.choice(12, 6, replace=False)]\n"
    "pd.DataFrame(rows, columns=['user', 'item', 'rating']).to_csv('r12.csv', index=False)"
)


def _clamped_json(out: str) -> bool:
    """``fit --json`` on the 12-item catalogue: Recall@12 / NDCG@12 and the note saying why."""
    try:
        res = json.loads(out.strip().splitlines()[-1])["non_private"]
    except (ValueError, IndexError, KeyError):
        return False
    m = res.get("metrics", {})
    return (
        0 <= m.get("recall@12", -1) <= 1
        and "recall@20" not in m
        and str(res.get("ranking_k_note", "")).startswith("ranking metrics at k = 12 instead of 20")
    )


CASES: list[Case] = [
    # 1. ratings outside the scale, whatever part of the split they land in
    Case(
        "rating -3 outside --rating-range",
        _fit("--ratings", "neg.csv", "--rating-range", "1", "5"),
        error=["neg.csv", "line", "-3", "--rating-range"],
        seeds=(0, 1, 2, 3),
    ),
    Case(
        "rating 7 outside --rating-range",
        _fit("--ratings", "seven.csv", "--rating-range", "1", "5"),
        error=["seven.csv", "line", "7", "--rating-range"],
        seeds=(0, 1, 2, 3),
    ),
    Case(
        "rating 1e9 above the 1e8 limit",
        _fit("--ratings", "huge.csv"),
        error=["huge.csv", "line", "1e+09"],
        seeds=(0, 1, 2, 3),
    ),
    Case(
        "--duplicates sum leaves the scale",
        _fit("--ratings", "dup.csv", "--duplicates", "sum", "--rating-range", "1", "5"),
        error=["dup.csv", "lines", "7", "--duplicates sum"],
        seeds=(0, 1, 2, 3),
    ),
    Case(
        "rating range inverted",
        _fit("--ratings", "r.csv", "--rating-range", "5", "1"),
        error=["--rating-range"],
        fast=True,
    ),
    Case(
        "rating range nan",
        _fit("--ratings", "r.csv", "--rating-range", "nan", "5"),
        error=["--rating-range"],
        fast=True,
    ),
    Case(
        "good file within its range",
        _fit("--ratings", "r.csv", "--rating-range", "1", "5"),
        check=lambda f, out, err: "rmse" in out.lower(),
    ),
    # 2. output paths that collide
    Case(
        "--output and --model-card on one path",
        _fit("--ratings", "r.csv", "--output", "same.out", "--model-card", "same.out"),
        error=["--output", "--model-card", "same.out"],
        check=_exists_not("same.out"),
        fast=True,
    ),
    Case(
        "--output and --plot on one path",
        _fit("--ratings", "r.csv", "--output", "x.png", "--plot", "x.png"),
        error=["--output", "--plot"],
        fast=True,
    ),
    Case(
        "--plot through a symlink to --output",
        _fit("--ratings", "r.csv", "--output", "x.png", "--plot", "link.png"),
        setup="os.symlink('x.png', 'link.png')",
        error=["--output", "--plot"],
        fast=True,
    ),
    Case(
        "--output over the --ratings file",
        _fit("--ratings", "r.csv", "--output", "r.csv"),
        error=["--output", "--ratings"],
        check=_intact("r.csv"),
        fast=True,
    ),
    Case(
        "--budget-file and --output on one path",
        _fit(
            "--ratings",
            "r.csv",
            "--output",
            "b.json",
            "--budget-file",
            "b.json",
            "--lifetime-epsilon",
            "4",
            "--lifetime-delta",
            "1e-6",
        ),
        error=["--output", "--budget-file"],
        fast=True,
    ),
    Case(
        "export --output over its --model",
        ["export", "--model", "m.npz", "--ratings", "r.csv", "--output", "./m.npz"],
        setup="quick_model().save('m.npz')",
        error=["--output", "--model"],
        fast=True,
    ),
    # 3. rosters and catalogues of the Python API
    Case(
        "roster with None",
        code="df = frame()\nfrom privrec.models import DPALS\nusers = sorted(df.user.unique()) + [None]\n"
        "DPALS(epsilon=1.0, factors=0, iterations=1, show_progress=False).fit(df, users=users)\nresult('fitted')",
        error=["users", "missing"],
        fast=True,
    ),
    Case(
        "roster with NaN",
        code="df = frame()\nfrom privrec.models import DPALS\n"
        "users = sorted(df.user.unique()) + [float('nan')]\n"
        "DPALS(epsilon=1.0, factors=0, iterations=1, show_progress=False).fit(df, users=users)\nresult('fitted')",
        error=["users", "missing"],
        fast=True,
    ),
    Case(
        "roster given as a set",
        code="df = frame()\nfrom privrec.models import DPALS\n"
        "DPALS(epsilon=1.0, factors=0, iterations=1, show_progress=False).fit(df, users=set(df.user))\nresult('fitted')",
        error=["users", "set", "order"],
        fast=True,
    ),
    Case(
        "catalogue given as a set",
        code="df = frame()\nfrom privrec.models import DPALS\n"
        "DPALS(epsilon=1.0, factors=0, iterations=1, show_progress=False).fit(df, items=set(df.item))\nresult('fitted')",
        error=["items", "set"],
        fast=True,
    ),
    Case(
        "from_pandas vocabulary with None",
        code="from privrec.data import from_pandas\ndf = frame()\n"
        "from_pandas(df, item_ids=list(sorted(df.item.unique())) + [None])\nresult('built')",
        error=["item", "missing"],
        fast=True,
    ),
    # 4. the model card
    Case(
        "model card at epsilon 999",
        code="m = quick_model(epsilon=999.0)\ntext = m.model_card()\n"
        "result({'inf': '= inf' in text, 'power': '10^' in text})",
        check=lambda f, out, err: _result(out) == {"inf": False, "power": True},
    ),
    Case(
        "model card dataset injection",
        code="m = quick_model()\n"
        "text = m.model_card(dataset='x\\n# Injected heading\\n```\\n<script>')\n"
        "lines = text.splitlines()\n"
        "result({'heading': any(l.startswith('# Injected') for l in lines), 'fence': any('```' in l for l in lines),"
        " 'html': '<script>' in text})",
        check=lambda f, out, err: _result(out) == {"heading": False, "fence": False, "html": False},
    ),
    Case(
        "model card metric NaN (flat mapping)",
        code="m = quick_model()\ntext = m.model_card(metrics={'rmse': float('nan')})\nresult('n/a' in text)",
        check=lambda f, out, err: _result(out) is True,
    ),
    Case(
        "model card metric NaN (rows)",
        code="m = quick_model()\n"
        "text = m.model_card(metrics={'this model': {'rmse': float('nan'), 'recall': 0.1}})\nresult('n/a' in text)",
        check=lambda f, out, err: _result(out) is True,
    ),
    Case(
        "model card metric of a wrong type",
        code="m = quick_model()\nm.model_card(metrics={'this model': {'rmse': {'a': 1}}})\nresult('written')",
        error=["metrics", "rmse"],
    ),
    Case(
        "describe of personal='loo' states its two candidates",
        code="m = quick_model(factors=2)\n"
        "text = str(m.describe())\nresult({'grid': '1/4, 1, 4, 16, 64' in text, 'loo': 'leave-one-out' in text})",
        check=lambda f, out, err: _result(out) == {"grid": False, "loo": True},
    ),
    # 5. ids that do not fit --numeric-ids
    Case(
        "--numeric-ids id beyond int64",
        _fit("--ratings", "numeric_overflow.csv", "--numeric-ids"),
        error=["numeric_overflow.csv", "data row", "99999999999999999999999", "--numeric-ids"],
        fast=True,
    ),
    Case(
        "--numeric-ids id 1.5",
        _fit("--ratings", "numeric_float_id.csv", "--numeric-ids"),
        error=["numeric_float_id.csv", "1.5", "not an integer"],
        fast=True,
    ),
    Case(
        "--numeric-ids --users beyond int64",
        _fit("--ratings", "numeric.csv", "--numeric-ids", "--users", "bigusers.txt"),
        setup="open('bigusers.txt', 'w').write('1\\n99999999999999999999999\\n')",
        error=["bigusers.txt", "line 2", "--users"],
        fast=True,
    ),
    # 6. a crafted model file under an address-space limit
    Case(
        "crafted 512 MiB model under a tight RLIMIT_AS",
        code=_craft_model_source(1 << 24) + _rlimit_load("used + (256 << 20)", 1 << 24),
        error=["RLIMIT_AS", "crafted.npz"],
        timeout=300,
    ),
    # 7. atomic writes keep the mode; paths that are not files
    Case(
        "atomic write keeps a 0664 mode",
        code="from privrec._io import atomic_write_text\n"
        "open('b.json', 'w').write('{}')\nos.chmod('b.json', 0o664)\natomic_write_text('b.json', '{\"a\": 1}')\n"
        "result(oct(stat.S_IMODE(os.stat('b.json').st_mode)))",
        check=lambda f, out, err: _result(out) == "0o664",
        fast=True,
    ),
    Case(
        "atomic write of a new file follows the umask",
        code="from privrec._io import atomic_write_text\n"
        "os.umask(0o027)\natomic_write_text('new.txt', 'x')\nresult(oct(stat.S_IMODE(os.stat('new.txt').st_mode)))",
        check=lambda f, out, err: _result(out) == "0o640",
        fast=True,
    ),
    Case(
        "model save keeps a 0644 mode",
        code="m = quick_model()\nopen('m.npz', 'w').close()\nos.chmod('m.npz', 0o644)\n"
        "m.save('m.npz')\nresult(oct(stat.S_IMODE(os.stat('m.npz').st_mode)))",
        check=lambda f, out, err: _result(out) == "0o644",
    ),
    Case(
        "--ratings /dev/null",
        _fit("--ratings", "/dev/null"),
        error=["--ratings", "/dev/null", "not a regular file"],
        fast=True,
    ),
    Case(
        "--ratings a FIFO",
        _fit("--ratings", "fifo.csv"),
        setup="os.mkfifo('fifo.csv')",
        error=["--ratings", "FIFO (named pipe)", "not a regular file"],
        fast=True,
        timeout=60,
    ),
    Case("--ratings a folder", _fit("--ratings", "."), error=["--ratings", "is a directory"], fast=True),
    Case("--ratings an empty file", _fit("--ratings", "empty.csv"), error=["--ratings", "empty"], fast=True),
    Case(
        "--items /dev/null",
        _fit("--ratings", "r.csv", "--items", "/dev/null"),
        error=["--items", "/dev/null", "not a regular file"],
        fast=True,
    ),
    # 8. the item ids of a saved model
    Case(
        "CLI: recommend and export name the same items",
        code=textwrap.dedent(
            """
        import contextlib, io
        from privrec.cli import main
        assert main(["fit", "--ratings", "r.csv", "--output", "m.npz", "--factors", "2", "--iterations", "1",
                     "--quiet", "--epsilon", "1", "--noise-seed", "0"]) == 0
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(["recommend", "--model", "m.npz", "--ratings", "r.csv", "--user", "u1", "-n", "5", "--json"]) == 0
        rec = [r["item"] for r in json.loads(buf.getvalue().strip().splitlines()[-1])["items"]]
        assert main(["export", "--model", "m.npz", "--ratings", "r.csv", "--output", "top.parquet", "-n", "5",
                     "--quiet"]) == 0
        top = pd.read_parquet("top.parquet")
        exp = [str(x) for x in top[top.user == "u1"].sort_values("rank")["item"]]
        print(json.dumps({"recommend": rec, "export": exp}))
        """
        ),
        check=_ids_agree,
    ),
    Case(
        "API: DataFrame fit, save, load, recommend_ids",
        code=textwrap.dedent(
            """
        from privrec.models import load_model
        df = frame()
        m = quick_model(df)
        before = m.recommend_ids("u1", df, N=5)[0].tolist()
        m.save("m.npz")
        after = load_model("m.npz").recommend_ids("u1", df, N=5)[0].tolist()
        similar = load_model("m.npz").similar_items_ids("i3", N=3)[0].tolist()
        result({"same": before == after, "ids": all(str(x).startswith("i") for x in before + similar)})
        """
        ),
        check=lambda f, out, err: _result(out) == {"same": True, "ids": True},
    ),
    # the input paths this probe's fixes touched: malformed CSVs, bad ids, bad ranges
    Case(
        "CSV line with an extra field",
        _fit("--ratings", "extra_field.csv"),
        error=["extra_field.csv", "line"],
        fast=True,
    ),
    Case(
        "CSV line with a missing field",
        _fit("--ratings", "missing_field.csv"),
        error=["missing_field.csv", "line"],
        fast=True,
    ),
    Case(
        "CSV line with an empty item id",
        _fit("--ratings", "empty_field.csv"),
        error=["empty_field.csv", "line"],
        fast=True,
    ),
    Case(
        "CSV rating that is text",
        _fit("--ratings", "text_rating.csv"),
        error=["text_rating.csv", "line", "five"],
        fast=True,
    ),
    Case("CSV rating nan", _fit("--ratings", "nan_rating.csv"), error=["nan_rating.csv", "line", "nan"], fast=True),
    Case("CSV rating inf", _fit("--ratings", "inf_rating.csv"), error=["inf_rating.csv", "line", "inf"], fast=True),
    Case("CSV with only a header", _fit("--ratings", "header_only.csv"), error=["empty"], fast=True),
    Case("CSV not in UTF-8", _fit("--ratings", "latin1.csv"), error=["latin1.csv"], fast=True),
    Case("CSV with a byte-order mark", _fit("--ratings", "bom.csv"), check=lambda f, out, err: "rmse" in out.lower()),
    Case(
        "duplicate rows without --duplicates",
        _fit("--ratings", "dup.csv"),
        error=["duplicate", "--duplicates"],
        fast=True,
    ),
    Case(
        "--ratings with an unknown suffix",
        _fit("--ratings", "ratings.xlsx"),
        error=["--ratings", "ratings.xlsx"],
        fast=True,
    ),
    Case(
        "--user-col that is not a column",
        _fit("--ratings", "r.csv", "--user-col", "uid"),
        error=["uid", "--user-col"],
        fast=True,
    ),
    Case(
        "--items repeats an id",
        _fit("--ratings", "r.csv", "--items", "items_repeat.txt"),
        error=["items_repeat.txt", "line", "--items"],
        fast=True,
    ),
    Case(
        "--items lacks an item of the data",
        _fit("--ratings", "r.csv", "--items", "items_short.txt"),
        error=["item", "not in"],
    ),
    Case(
        "--users with a blank line",
        _fit("--ratings", "r.csv", "--users", "users_blank.txt"),
        error=["users_blank.txt", "line 6", "blank"],
        fast=True,
    ),
    Case("--heldout-users 0", _fit("--ratings", "r.csv", "--heldout-users", "0"), error=["--heldout-users"], fast=True),
    Case(
        "--model that is not a model file",
        ["recommend", "--model", "notes.txt", "--ratings", "r.csv", "--user", "u1"],
        error=["notes.txt", "not"],
        fast=True,
    ),
    Case(
        "--model missing",
        ["recommend", "--model", "nothing.npz", "--ratings", "r.csv", "--user", "u1"],
        error=["nothing.npz"],
        fast=True,
    ),
    Case(
        "recommend for an unknown user",
        ["recommend", "--model", "m.npz", "--ratings", "r.csv", "--user", "nobody"],
        setup="quick_model().save('m.npz')",
        error=["nobody", "not found"],
    ),
    # 9. select_private takes what DPALS.fit takes and refuses what would make its scores exact
    Case(
        "select_private rating_cap=0",
        code="df = frame()\nfrom privrec.models import DPALS\nfrom privrec.tuning import select_private\nimport scipy.sparse as sp\nfrom privrec.data import from_pandas\nR = from_pandas(df).matrix\ncands = [DPALS(factors=0, show_progress=False), DPALS(factors=2, iterations=1, show_progress=False)]\nselect_private(cands, R, epsilon=1.0, delta=1e-5, rating_cap=0)\nresult('selected')",
        error=["rating_cap"],
    ),
    Case(
        "select_private loss_clip=0",
        code="df = frame()\nfrom privrec.models import DPALS\nfrom privrec.tuning import select_private\nimport scipy.sparse as sp\nfrom privrec.data import from_pandas\nR = from_pandas(df).matrix\ncands = [DPALS(factors=0, show_progress=False), DPALS(factors=2, iterations=1, show_progress=False)]\nselect_private(cands, R, epsilon=1.0, delta=1e-5, loss_clip=0)\nresult('selected')",
        error=["loss_clip"],
    ),
    Case(
        "select_private loss_clip NaN",
        code="df = frame()\nfrom privrec.models import DPALS\nfrom privrec.tuning import select_private\nimport scipy.sparse as sp\nfrom privrec.data import from_pandas\nR = from_pandas(df).matrix\ncands = [DPALS(factors=0, show_progress=False), DPALS(factors=2, iterations=1, show_progress=False)]\nselect_private(cands, R, epsilon=1.0, delta=1e-5, loss_clip=float('nan'))\nresult('selected')",
        error=["loss_clip"],
    ),
    Case(
        "select_private candidates as a generator",
        code="df = frame()\nfrom privrec.models import DPALS\nfrom privrec.tuning import select_private\nimport scipy.sparse as sp\nfrom privrec.data import from_pandas\nR = from_pandas(df).matrix\ncands = [DPALS(factors=0, show_progress=False), DPALS(factors=2, iterations=1, show_progress=False)]\nselect_private((c for c in cands), R, epsilon=1.0, delta=1e-5)\nresult('selected')",
        error=["candidates", "list"],
    ),
    Case(
        "select_private epsilon as text",
        code="df = frame()\nfrom privrec.models import DPALS\nfrom privrec.tuning import select_private\nimport scipy.sparse as sp\nfrom privrec.data import from_pandas\nR = from_pandas(df).matrix\ncands = [DPALS(factors=0, show_progress=False), DPALS(factors=2, iterations=1, show_progress=False)]\nselect_private(cands, R, epsilon='5', delta=1e-5)\nresult('selected')",
        error=["epsilon"],
    ),
    Case(
        "select_private COO with duplicate entries",
        code="df = frame()\nfrom privrec.models import DPALS\nfrom privrec.tuning import select_private\nimport scipy.sparse as sp\nfrom privrec.data import from_pandas\nR = from_pandas(df).matrix\ncands = [DPALS(factors=0, show_progress=False), DPALS(factors=2, iterations=1, show_progress=False)]\nX = sp.coo_matrix(([3.0, 4.0], ([0, 0], [1, 1])), shape=(3, 3))\n"
        "select_private(cands, X, epsilon=1.0, delta=1e-5)\nresult('selected')",
        error=["duplicate"],
    ),
    Case(
        "select_private on a long DataFrame",
        code="df = frame()\nfrom privrec.models import DPALS\nfrom privrec.tuning import select_private\nimport scipy.sparse as sp\nfrom privrec.data import from_pandas\nR = from_pandas(df).matrix\ncands = [DPALS(factors=0, show_progress=False), DPALS(factors=2, iterations=1, show_progress=False)]\nres = select_private(cands, df, epsilon=1.0, delta=1e-5, refit_share=0.0)\n"
        "result(res.best_estimator_.item_factors_.shape[0])",
        check=lambda folder, out, err: '"RESULT 50"' in repr(out) or "RESULT 50" in out,
    ),
    # 10. a non-finite release cannot rank silently
    Case(
        "recommend_all with a NaN item factor",
        code="m = quick_model()\nfrom privrec.data import from_pandas\nfrom privrec.serving import recommend_all\n"
        "m.item_factors_[5, 0] = float('nan')\nrecommend_all(m, from_pandas(frame()), 'top.parquet', N=10)\n"
        "result('written')",
        error=["item_factors_", "nan"],
        check=_exists_not("top.parquet"),
    ),
    Case(
        "recommend with an infinite item bias",
        code="m = quick_model(factors=0)\nfrom privrec.data import from_pandas\nR = from_pandas(frame()).matrix\n"
        "m.item_bias_[0] = float('inf')\nids, _ = m.recommend(0, R[0], N=5)\nresult(len(ids))",
        error=["item_bias_", "infinite"],
    ),
    # 11. ranking metrics: k beyond the catalogue refused; fixed-k evaluations of a small catalogue
    Case(
        "ranking_metrics with K beyond the catalogue",
        code=_RANKING_SETUP + "ranking_metrics(U, V, T, ks=(5, 10**6))\nresult('ranked')",
        error=["k = 1000000", "catalogue of 10 items"],
        fast=True,
    ),
    Case(
        "ranking_metrics with K one above the catalogue",
        code=_RANKING_SETUP + "precision_at_k(U, V, T, k=11)\nresult('ranked')",
        error=["k = 11", "catalogue of 10 items"],
        fast=True,
    ),
    Case(
        "ranking_metrics with a narrower test matrix",
        code=_RANKING_SETUP + "ranking_metrics(U, V, T[:, :8], ks=(5,))\nresult('ranked')",
        error=["targets", "(5, 8)", "(5, 10)"],
        fast=True,
    ),
    Case(
        "ranking_metrics with K equal to the catalogue",
        code=_RANKING_SETUP + "m = ranking_metrics(U, V, T, ks=(10,))\n"
        "result(bool(0 <= m['precision@10'] <= 1 and abs(m['recall@10'] - 1) < 1e-9))",
        check=lambda f, out, err: _result(out) is True,
        fast=True,
    ),
    Case(
        "CLI fit on a 12-item catalogue reports Recall@12",
        ["fit", "--ratings", "r12.csv", "--epsilon", "5", "--quiet"],
        setup=_SMALL_CATALOGUE,
        check=lambda f, out, err: (
            "recall@12" in out
            and "recall@20" not in out
            and "k = 12 instead of 20: the catalogue has only 12 items" in out
        ),
    ),
    Case(
        "CLI fit --json on a 12-item catalogue states the clamped k",
        ["fit", "--ratings", "r12.csv", "--epsilon", "5", "--quiet", "--json"],
        setup=_SMALL_CATALOGUE,
        check=lambda f, out, err: _clamped_json(out),
    ),
    Case(
        "CLI compare on a 12-item catalogue reports Recall@12",
        ["compare", "--ratings", "r12.csv", "--epsilon", "5", "--no-als", "--quiet"],
        setup=_SMALL_CATALOGUE,
        check=lambda f, out, err: "recall@12" in out and "k = 12 instead of 20" in out,
    ),
    # 12. budgets: arguments checked, one lock per file
    Case(
        "Budget lock_timeout NaN",
        code="from privrec.privacy import Budget\nBudget.create('b.json', 1.0, 1e-6)\n"
        "Budget('b.json', lock_timeout=float('nan'))\nresult('opened')",
        error=["lock_timeout"],
        fast=True,
    ),
    Case(
        "Budget.check of a list of strings",
        code="from privrec.privacy import Budget\nb = Budget.create('b.json', 1.0, 1e-6)\nb.check(['x'])\n"
        "result('checked')",
        error=["planned events"],
        fast=True,
    ),
]


def _result(out: str):
    for line in reversed(out.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    return None


# ---------------------------------------------------------------------- running and classifying


def _limits() -> None:  # in the child, before exec
    import resource

    os.setsid()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = ADDRESS_SPACE if hard == resource.RLIM_INFINITY else min(ADDRESS_SPACE, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


def _run(cmd: list[str], folder: Path, timeout: float) -> tuple[int | None, str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PRIVREC_CACHE"] = str(folder / ".cache")
    proc = subprocess.Popen(
        cmd, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_limits
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the case's own process group (setsid)
        out, err = proc.communicate()
        return None, out, err
    return proc.returncode, out, err


def _command(case: Case, argv: list[str] | None) -> list[str]:
    if argv is not None:
        return [sys.executable, "-c", "import sys; from privrec.cli import main; sys.exit(main(sys.argv[1:]))", *argv]
    assert case.code is not None
    body = (
        PRELUDE
        + "\ntry:\n"
        + textwrap.indent(case.code, "    ")
        + textwrap.dedent(
            """
        except (ValueError, TypeError) as exc:  # one-line errors of the API (TypeError: a wrong type named)
            print("privrec probe: error: " + " ".join(str(exc).split()), file=sys.stderr)
            sys.exit(2)
        """
        )
    )
    return [sys.executable, "-c", body]


def classify(case: Case, rc: int | None, out: str, err: str, folder: Path) -> str:
    """The class of one run (module docstring)."""
    if rc is None:
        return "hang"
    if "Traceback (most recent call last)" in err:
        return "traceback"
    if rc == 0:
        if case.error is not None:
            return "silent-wrong"
        try:
            ok = case.check is None or bool(case.check(folder, out, err))
        except Exception:
            ok = False
        return "correct" if ok else "silent-wrong"
    if case.check is not None and case.error is not None:
        try:
            intact = bool(case.check(folder, out, err))
        except Exception:
            intact = False
        if not intact:
            return "silent-wrong"  # the error came after something was lost
    lines = [line for line in err.splitlines() if re.search(r"\b(error|refused):", line)]
    if rc in (2, 3) and len(lines) == 1:
        text = lines[0].lower()
        if case.error is None or all(s.lower() in text for s in case.error):
            return "clear error"
    return "unclear error"


@dataclass
class Outcome:
    case: Case
    kind: str
    seconds: float
    detail: str

    @property
    def expected(self) -> bool:
        return self.kind == ("clear error" if self.case.error is not None else "correct")


def run_case(case: Case, base: Path) -> Outcome:
    """Run ``case`` in a fresh copy of the files in ``base``; every seed for a ``seeds`` case (its
    class: the worst of them, in the order hang, traceback, silent-wrong, unclear, clear, correct)."""
    start = time.monotonic()
    folder = Path(tempfile.mkdtemp(prefix="probe-"))
    try:
        for entry in base.iterdir():
            shutil.copy(entry, folder / entry.name)
        if case.setup:
            setup = PRELUDE + "\n" + case.setup
            rc, out, err = _run([sys.executable, "-c", setup], folder, case.timeout)
            if rc != 0:
                return Outcome(case, "traceback", time.monotonic() - start, f"setup failed: {err[-2000:]}")
        runs = []
        for seed in case.seeds or (None,):
            argv = None if case.argv is None else case.argv + ([] if seed is None else ["--seed", str(seed)])
            rc, out, err = _run(_command(case, argv), folder, case.timeout)
            runs.append((classify(case, rc, out, err, folder), rc, out, err))
        order = ("hang", "traceback", "silent-wrong", "unclear error", "clear error", "correct")
        kind, rc, out, err = min(runs, key=lambda r: order.index(r[0]))
        statuses = [r[1] for r in runs]
        detail = f"exit {statuses if len(statuses) > 1 else rc}\n--- stderr (end)\n{err[-1500:]}\n--- stdout (end)\n{out[-800:]}"
        return Outcome(case, kind, time.monotonic() - start, detail)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run(cases: list[Case], verbose: bool = False, stream=sys.stdout) -> list[Outcome]:
    base = Path(tempfile.mkdtemp(prefix="probe-files-"))
    try:
        make_files(base)
        outcomes = []
        for case in cases:
            o = run_case(case, base)
            outcomes.append(o)
            mark = "ok " if o.expected else "BAD"
            print(f"{mark} {o.kind:<13} {o.seconds:6.1f}s  {case.name}", file=stream, flush=True)
            if verbose and not o.expected:
                print(textwrap.indent(o.detail, "      "), file=stream)
        return outcomes
    finally:
        shutil.rmtree(base, ignore_errors=True)


def summary(outcomes: list[Outcome]) -> str:
    counts = Counter(o.kind for o in outcomes)
    bad = [o for o in outcomes if not o.expected]
    lines = [", ".join(f"{k}: {counts.get(k, 0)}" for k in CLASSES)]
    lines.append(f"{len(outcomes) - len(bad)} of {len(outcomes)} cases as expected")
    lines += [f"  unexpected: {o.case.name} ({o.kind})" for o in bad]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fast", action="store_true", help="only the cases that stop before any fit")
    parser.add_argument("-k", default=None, help="only the cases whose name contains this text")
    parser.add_argument("-v", "--verbose", action="store_true", help="print the output of unexpected cases")
    args = parser.parse_args(argv)
    cases = [c for c in CASES if (not args.fast or c.fast) and (args.k is None or args.k.lower() in c.name.lower())]
    outcomes = run(cases, args.verbose)
    print(summary(outcomes))
    return 0 if all(o.expected for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
