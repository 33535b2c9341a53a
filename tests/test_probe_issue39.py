"""Issue 39: silent-wrong results and raw tracebacks found by the surface probe
(tests/probe_surface.py) -- ratings outside the scale checked on the whole file before the split,
colliding output paths, rosters with missing ids or without an order, the model card's text,
--numeric-ids beyond int64, model files larger than the address space left, the mode of
atomically replaced files, --ratings that is not a regular file, and the item ids of a saved model."""

import json
import math
import os
import re
import stat
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from privrec._io import atomic_write_text
from privrec.cli import main
from privrec.commands._running import CommandError
from privrec.models import DPALS, load_model
from privrec.models import model_file as MF

QUICK = ["--factors", "0", "--iterations", "1", "--quiet", "--epsilon", "1"]


def _frame(n_users=120, n_items=30, seed=0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {
            "user": [f"u{u}" for u in rng.integers(0, n_users, 2500)],
            "item": [f"m{i}" for i in rng.integers(0, n_items, 2500)],
            "rating": rng.integers(1, 6, 2500),
        }
    ).drop_duplicates(["user", "item"])
    return df[~((df.user == "u1") & (df.item == "m99"))].reset_index(drop=True)


@pytest.fixture
def files(tmp_path):
    df = _frame()
    df.to_csv(tmp_path / "r.csv", index=False)
    base = (tmp_path / "r.csv").read_text()
    n_lines = base.count("\n")
    for name, extra in {"neg": "u1,m99,-3\n", "seven": "u1,m99,7\n", "huge": "u1,m99,1e9\n"}.items():
        (tmp_path / f"{name}.csv").write_text(base + extra)
    (tmp_path / "dup.csv").write_text(base + "u1,m99,3\nu1,m99,4\n")
    (tmp_path / "text.csv").write_text(base + "u1,m99,five\n")
    tmp_path.joinpath("n_lines").write_text(str(n_lines))
    return tmp_path


def _error(capsys, argv) -> tuple[int, list[str]]:
    rc = main(argv)
    err = capsys.readouterr().err
    return rc, [line for line in err.splitlines() if "error:" in line]


def _quiet_fit(model, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(*args, **kwargs)


# ---------------------------------------------------------------------- 1. the whole file is checked


@pytest.mark.parametrize(
    "name, extra, value",
    [
        ("neg", ["--rating-range", "1", "5"], "-3"),
        ("seven", ["--rating-range", "1", "5"], "7"),
        ("huge", [], "1e+09"),
    ],
)
def test_a_bad_rating_is_refused_whatever_the_split(files, capsys, name, extra, value):
    line = int(files.joinpath("n_lines").read_text()) + 1
    for seed in range(4):  # the rating lands in the training part for some seeds, held out for others
        rc, lines = _error(
            capsys, ["fit", "--ratings", str(files / f"{name}.csv"), *extra, "--seed", str(seed), *QUICK]
        )
        assert rc == 2 and len(lines) == 1, (seed, lines)
        assert f"{name}.csv, line {line}: rating {value} (user 'u1', item 'm99')" in lines[0]
        assert ("outside the declared rating_range [1, 5] (--rating-range)" in lines[0]) == bool(extra)


def test_duplicates_are_resolved_before_the_range_is_checked(files, capsys):
    n = int(files.joinpath("n_lines").read_text())
    for seed in range(3):
        argv = ["fit", "--ratings", str(files / "dup.csv"), "--duplicates", "sum", "--rating-range", "1", "5"]
        rc, lines = _error(capsys, [*argv, "--seed", str(seed), *QUICK])
        assert rc == 2 and len(lines) == 1
        assert (
            f"dup.csv, lines {n + 1} and {n + 2}: the rating of user 'u1', item 'm99', 7 after --duplicates sum"
            in (lines[0])
        )
    # max keeps 4: inside the range, the file is fitted (at an epsilon where 120 users' items pass the
    # private item selection of a file with nothing declared)
    argv = ["fit", "--ratings", str(files / "dup.csv"), "--duplicates", "max", "--rating-range", "1", "5", *QUICK]
    assert main([*argv, "--epsilon", "200"]) == 0


def test_a_rating_that_is_not_a_number_names_its_line(files, capsys):
    n = int(files.joinpath("n_lines").read_text())
    rc, lines = _error(capsys, ["fit", "--ratings", str(files / "text.csv"), *QUICK])
    assert rc == 2 and lines[0].endswith(f"text.csv, line {n + 1}: rating column 'rating' must be numeric, got 'five'")


def test_a_parquet_file_names_the_row(tmp_path, capsys):
    df = _frame()
    bad = pd.concat([df, pd.DataFrame({"user": ["u1"], "item": ["m99"], "rating": [9]})], ignore_index=True)
    bad.to_parquet(tmp_path / "r.parquet")
    rc, lines = _error(capsys, ["fit", "--ratings", str(tmp_path / "r.parquet"), "--rating-range", "1", "5", *QUICK])
    assert rc == 2 and f"r.parquet, row {len(bad)}: rating 9 (user 'u1', item 'm99') is outside" in lines[0]


# ---------------------------------------------------------------------- 2. colliding outputs


def test_outputs_on_one_path_are_refused_before_the_fit(files, capsys):
    r = str(files / "r.csv")
    os.symlink(files / "x.png", files / "link.png")
    for argv, flags in (
        (["--output", str(files / "same.out"), "--model-card", str(files / "same.out")], ("--output", "--model-card")),
        (["--output", str(files / "x.png"), "--plot", str(files / "x.png")], ("--output", "--plot")),
        (["--output", str(files / "x.png"), "--plot", str(files / "link.png")], ("--output", "--plot")),
        (["--output", r], ("--output", "--ratings")),
    ):
        rc, lines = _error(capsys, ["fit", "--ratings", r, *argv, *QUICK])
        assert rc == 2 and len(lines) == 1 and all(f in lines[0] for f in flags), lines
    assert not (files / "same.out").exists() and not (files / "x.png").exists()
    assert files.joinpath("r.csv").read_text().startswith("user,item,rating\n")  # the data is intact


def test_distinct_paths_compare_real_files(tmp_path):
    from privrec.commands._paths import check_distinct_paths

    class Args:
        pass

    (tmp_path / "a.npz").write_bytes(b"x")
    os.link(tmp_path / "a.npz", tmp_path / "hard.npz")
    args = Args()
    args.output, args.model = str(tmp_path / "hard.npz"), str(tmp_path / "a.npz")  # export --model a --output hard
    with pytest.raises(CommandError, match=r"^--output and --model name the same file .*would replace the --model"):
        check_distinct_paths(args)
    args.output = str(tmp_path / "sub" / ".." / "other.npz")
    check_distinct_paths(args)  # different files: fine
    args.model = str(tmp_path / "other.npz")  # two inputs never collide; an input and an output do
    with pytest.raises(CommandError):
        check_distinct_paths(args)


# ---------------------------------------------------------------------- 3. rosters and catalogues


def test_rosters_and_catalogues_must_be_ordered_and_complete():
    df = _frame()
    users, items = sorted(df.user.unique()), sorted(df.item.unique())
    model = DPALS(epsilon=1.0, factors=0, iterations=1, show_progress=False)
    for bad in (users + [None], users + [float("nan")], np.array(users + [None], dtype=object)):
        with pytest.raises(ValueError, match=r"^users \(the public user roster\) holds 1 missing value"):
            _quiet_fit(model, df, users=bad)
    with pytest.raises(ValueError, match=r"got a set: a set has no order.*pass sorted\(ids\)"):
        _quiet_fit(model, df, users=set(users))
    with pytest.raises(ValueError, match=r"^items \(the public item catalogue\) must be an ordered.*frozenset"):
        _quiet_fit(model, df, items=frozenset(items))
    with pytest.raises(ValueError, match="holds 1 missing value"):
        _quiet_fit(model, df, items=items + [math.nan])
    fitted = _quiet_fit(model, df, users=iter(users), items=pd.Series(items))  # ordered iterables are fine
    assert fitted.n_items_ == len(items)
    from privrec.data import from_pandas

    with pytest.raises(ValueError, match="the user vocabulary must be an ordered sequence"):
        from_pandas(df, user_ids=dict.fromkeys(users, 1))


# ---------------------------------------------------------------------- 4. the model card


def test_model_card_text_is_true_and_inert():
    df = _frame()
    model = _quiet_fit(DPALS(epsilon=999.0, factors=2, iterations=1, show_progress=False, random_state=0), df)
    card = model.model_card(dataset="x\n# Injected heading\n```\n<b>bold</b>")
    assert "= inf" not in card and re.search(r"a factor e\^99\d ~ 10\^43\d\.\d \(a bound that protects nothing\)", card)
    lines = card.splitlines()
    assert not any(line.startswith("# Injected") for line in lines) and "```" not in card and "<b>" not in card
    assert "- dataset: x \\# Injected heading \\`\\`\\` \\<b\\>bold\\</b\\>" in lines
    flat = model.model_card(metrics={"rmse": float("nan")})
    assert "| this model | n/a |" in flat
    rows = model.model_card(metrics={"this model": {"rmse": 0.9, "recall": np.nan}, "a|b": {"rmse": 1.0}})
    assert "| this model | 0.9 | n/a |" in rows and "| a\\|b | 1 |  |" in rows
    assert "| model | rmse | x\\|y |" in model.model_card(metrics={"rmse": 1.0, "x|y": (0.5, np.nan)})
    with pytest.raises(ValueError, match=r"^model_card: metrics\['this model'\]\['rmse'\] must be a number"):
        model.model_card(metrics={"this model": {"rmse": {"a": 1}}})
    text = model.describe()["personal_part"]
    assert "1/4, 1, 4, 16, 64" not in text and "the user bias alone" in text


# ---------------------------------------------------------------------- 5. --numeric-ids


def test_numeric_ids_beyond_int64_name_the_line(tmp_path, capsys):
    path = tmp_path / "n.csv"
    path.write_text("user,item,rating\n1,2,3\n99999999999999999999999,3,4\n")
    rc, lines = _error(capsys, ["fit", "--ratings", str(path), "--numeric-ids", *QUICK])
    assert rc == 2 and len(lines) == 1
    assert "n.csv, data row 2: 'user' id '99999999999999999999999' is outside the 64-bit integer range" in lines[0]
    (tmp_path / "users.txt").write_text("1\n-99999999999999999999999\n")
    rc, lines = _error(capsys, ["fit", "--ratings", str(path), "--numeric-ids", "--users", str(tmp_path / "users.txt")])
    assert rc == 2 and "users.txt: line 2 (--users): id '-99999999999999999999999' is outside" in lines[0]


# ---------------------------------------------------------------------- 6. memory limits of a load


def test_the_declared_sizes_respect_the_address_space_left(tmp_path, monkeypatch):
    model = _quiet_fit(DPALS(axes="warn", epsilon=1.0, factors=2, iterations=1, show_progress=False), _frame())
    model.save(tmp_path / "m.npz")
    monkeypatch.setattr(MF, "_address_space_left", lambda: [("RLIMIT_AS", 5 << 30, (5 << 30) - (1 << 20), 1 << 20)])
    with pytest.raises(
        ValueError, match=r"m\.npz: its arrays declare .* under its RLIMIT_AS limit \(5 GiB, .*ulimit -v"
    ):
        load_model(tmp_path / "m.npz")
    monkeypatch.setattr(MF, "_address_space_left", lambda: [])
    assert load_model(tmp_path / "m.npz").n_items_ == model.n_items_


def test_a_crafted_file_is_refused_under_a_real_rlimit_as(tmp_path):
    """A 256 MiB declared array in a ~1 MB deflated file, read with 128 MiB of address space left:
    refused before numpy allocates; a real model still loads under the same limit."""
    model = _quiet_fit(DPALS(axes="warn", epsilon=1.0, factors=2, iterations=1, show_progress=False), _frame())
    model.save(tmp_path / "small.npz")
    code = textwrap.dedent(
        """
        import io, json, resource, sys, zipfile
        import numpy as np
        from privrec.models import load_model
        with np.load("small.npz") as z:
            meta = json.loads(str(z["__meta__"]))
        n_rows = 8 << 20
        meta["arrays"] = {"item_factors_": {"shape": [n_rows, 8], "dtype": "<f4"}}
        meta["params"]["factors"] = 8
        meta.pop("item_ids", None)
        buf, hdr = io.BytesIO(), io.BytesIO()
        np.save(buf, np.array(json.dumps(meta)))
        np.lib.format.write_array_header_1_0(hdr, {"descr": "<f4", "fortran_order": False, "shape": (n_rows, 8)})
        with zipfile.ZipFile("crafted.npz", "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
            zf.writestr("__meta__.npy", buf.getvalue())
            with zf.open("item_factors_.npy", "w", force_zip64=True) as fh:
                fh.write(hdr.getvalue())
                for _ in range(16):
                    fh.write(bytes(16 << 20))
        with open("/proc/self/status") as fh:
            used = next(int(l.split()[1]) * 1024 for l in fh if l.startswith("VmSize:"))
        resource.setrlimit(resource.RLIMIT_AS, (used + (128 << 20), resource.getrlimit(resource.RLIMIT_AS)[1]))
        try:
            load_model("crafted.npz")
        except ValueError as exc:
            print(exc)
        print(load_model("small.npz").n_items_)
        """
    )
    import privrec

    env = dict(os.environ, PYTHONPATH=str(Path(privrec.__file__).parents[1]))  # the privrec under test
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, second = proc.stdout.strip().splitlines()[-2:]
    assert first.startswith("crafted.npz: its arrays declare 256 MiB, more than this process can still allocate")
    assert "RLIMIT_AS limit" in first and second == str(model.n_items_)


# ---------------------------------------------------------------------- 7. modes, and paths that are not files


def test_atomic_writes_keep_the_mode(tmp_path):
    from privrec._io import replacement_mode

    budget = tmp_path / "budget.json"
    budget.write_text("{}")
    os.chmod(budget, 0o664)
    atomic_write_text(budget, '{"a": 1}')
    assert stat.S_IMODE(budget.stat().st_mode) == 0o664 and budget.read_text() == '{"a": 1}'
    os.symlink(budget, tmp_path / "link.json")  # through a link: the target keeps its mode
    atomic_write_text(tmp_path / "link.json", "{}")
    assert stat.S_IMODE(budget.stat().st_mode) == 0o664 and (tmp_path / "link.json").is_symlink()
    old = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "new.txt", "x")
        assert replacement_mode(tmp_path / "missing") == 0o640
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o640
    model = _quiet_fit(DPALS(axes="warn", epsilon=1.0, factors=0, iterations=1, show_progress=False), _frame())
    path = tmp_path / "m.npz"
    path.write_bytes(b"")
    os.chmod(path, 0o644)
    model.save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_ratings_that_are_not_regular_files_say_what_they_are(tmp_path, capsys):
    os.mkfifo(tmp_path / "fifo.csv")
    (tmp_path / "empty.csv").write_text("")
    for path, what in (
        ("/dev/null", "is a character device, not a regular file"),
        (str(tmp_path / "fifo.csv"), "is a FIFO (named pipe), not a regular file"),  # never opened: no hang
        (str(tmp_path), "is a directory, not a file"),
        (str(tmp_path / "empty.csv"), "is an empty file"),
        (str(tmp_path / "nothing.csv"), "file not found"),
    ):
        rc, lines = _error(capsys, ["fit", "--ratings", path, *QUICK])
        assert rc == 2 and len(lines) == 1 and what in lines[0] and "--ratings" in lines[0], lines
    rc, lines = _error(capsys, ["fit", "--ratings", "/dev/null", "--items", "/dev/null"])
    assert rc == 2


# ---------------------------------------------------------------------- 8. the item ids of a saved model


def test_a_dataframe_model_keeps_its_item_ids_through_save_and_pickle(tmp_path):
    import pickle

    df = _frame()
    model = _quiet_fit(
        DPALS(axes="warn", epsilon=1.0, factors=2, iterations=1, show_progress=False, random_state=0), df
    )
    ids, scores = model.recommend_ids("u1", df, N=5)
    assert all(str(i).startswith("m") for i in ids)
    model.save(tmp_path / "m.npz")
    meta = json.loads(str(np.load(tmp_path / "m.npz")["__meta__"]))
    assert (
        meta["item_axis"] == {"source": "data", "public": False} and len(meta["item_ids"]["values"]) == model.n_items_
    )
    loaded = load_model(tmp_path / "m.npz")
    again, again_scores = loaded.recommend_ids("u1", df, N=5)
    assert again.tolist() == ids.tolist() and np.allclose(again_scores, scores)
    assert (
        loaded.similar_items_ids(str(ids[0]), N=3)[0].tolist() == model.similar_items_ids(str(ids[0]), N=3)[0].tolist()
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        unpickled = pickle.loads(pickle.dumps(model))
    assert unpickled.item_ids_.tolist() == model.item_ids_.tolist() and unpickled.user_factors_ is None


def test_recommend_and_export_name_the_same_items(files, capsys):
    """End to end through the CLI, without --items (needs commands/fit.py to give the split's item
    ids to every model it saves: see the issue 39 report)."""
    m, r = str(files / "m.npz"), str(files / "r.csv")
    fit = ["fit", "--ratings", r, "--output", m, "--factors", "2", "--iterations", "1", "--quiet", "--noise-seed", "0"]
    assert main(fit) == 0
    capsys.readouterr()
    assert main(["recommend", "--model", m, "--ratings", r, "--user", "u1", "-n", "5", "--json"]) == 0
    out = capsys.readouterr()
    recommended = [row["item"] for row in json.loads(out.out)["items"]]
    assert "cannot check" not in out.err and all(i.startswith("m") for i in recommended)
    assert main(["export", "--model", m, "--ratings", r, "--output", str(files / "top.parquet"), "-n", "5"]) == 0
    assert "holds no item ids" not in capsys.readouterr().err
    top = pd.read_parquet(files / "top.parquet")
    assert top[top.user == "u1"].sort_values("rank")["item"].tolist() == recommended
    assert load_model(m).similar_items_ids(recommended[0], N=2)[0].size == 2
