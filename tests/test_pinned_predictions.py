"""Every prediction of a pinned grid prints the same as when the grid was taken.

The grid and its fixture (tests/data/pinned_predictions.json) come from tests/pin_predictions.py.
Where a change moves predictions on purpose, regenerate the fixture with one command:

    PYTHONPATH=src python tests/pin_predictions.py --write
"""
import json

import pytest

import pin_predictions as pin

PINNED = json.loads(pin.FIXTURE.read_text())
CASES = pin.cases()


def test_the_fixture_holds_exactly_the_grid():
    assert sorted(PINNED) == sorted(pin.key(c) for c in CASES)


@pytest.mark.parametrize("system", sorted({c["system"] for c in CASES}))
def test_every_prediction_prints_what_it_printed_when_pinned(system):
    wrong = []
    for case in (c for c in CASES if c["system"] == system):
        want, got = PINNED[pin.key(case)], pin.run_case(case)
        same = want.keys() == got.keys() and all(
            got[k] == pytest.approx(v, rel=1e-9, abs=0) if k == "time_s" else got[k] == v
            for k, v in want.items())
        if not same:
            wrong.append(f"{pin.key(case)}: pinned {want}, now {got}")
    assert not wrong, f"{len(wrong)} predictions changed:\n" + "\n".join(wrong[:20])
