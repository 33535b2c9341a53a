"""A fast subset of the surface probe (tests/probe_surface.py, issue 39): each case in its own
subprocess, with a timeout and an address-space cap, must end as expected -- a one-line error
naming the argument, or the right result; never a traceback, a hang or a silently wrong result."""

import importlib.util
import io
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("probe_surface", Path(__file__).with_name("probe_surface.py"))
probe = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = probe  # dataclasses look their module up
_spec.loader.exec_module(probe)

#: one case per kind of input path, each failing (or finishing) before any fit
SUBSET = (
    "--output and --model-card on one path",
    "--numeric-ids id beyond int64",
    "--ratings a FIFO",
    "roster given as a set",
    "atomic write keeps a 0664 mode",
    "CSV rating nan",
)


def test_the_subset_names_fast_cases():
    cases = {c.name: c for c in probe.CASES}
    assert all(name in cases and cases[name].fast for name in SUBSET)
    assert len(cases) == len(probe.CASES)  # case names are unique


def test_the_classes_of_the_probe():
    case = probe.Case("x", ["fit"], error=["--ratings"])
    folder = Path(".")
    assert probe.classify(case, None, "", "", folder) == "hang"
    assert probe.classify(case, 1, "", "Traceback (most recent call last):\n  ...", folder) == "traceback"
    assert probe.classify(case, 0, "", "", folder) == "silent-wrong"
    assert probe.classify(case, 2, "", "privrec fit: error: --ratings x is a folder\n", folder) == "clear error"
    assert probe.classify(case, 2, "", "privrec fit: error: something else\n", folder) == "unclear error"
    good = probe.Case("y", ["fit"], check=lambda f, out, err: out == "fine")
    assert probe.classify(good, 0, "fine", "", folder) == "correct"
    assert probe.classify(good, 0, "wrong", "", folder) == "silent-wrong"


def test_a_fast_subset_of_the_probe_ends_as_expected():
    cases = [c for c in probe.CASES if c.name in SUBSET]
    outcomes = probe.run(cases, verbose=True, stream=io.StringIO())
    bad = {o.case.name: (o.kind, o.detail[-600:]) for o in outcomes if not o.expected}
    assert not bad, probe.summary(outcomes) + "\n" + "\n".join(f"{k}: {v}" for k, v in bad.items())
