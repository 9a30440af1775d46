"""The core commands from the command line: output, exit codes, one-line errors."""
import json

import pytest

from gpucomm.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_algo_list_json_has_every_collective(capsys):
    code, out, _ = run(capsys, "algo", "list", "--format", "json")
    rows = json.loads(out)
    assert code == 0
    assert {r["collective"] for r in rows} >= {"all_reduce", "all_to_all", "barrier", "sendrecv"}


def test_algo_show_prints_steps_and_bytes(capsys):
    code, out, _ = run(capsys, "algo", "show", "ring", "all_reduce", "--ranks", "4", "--size", "1M")
    assert code == 0
    assert "step 0: 0→1 c0 (reduce)" in out
    assert "rank 3: 1572864 B (1.5000 × S)" in out


def test_algo_run_checks_against_reference(capsys):
    code, out, _ = run(capsys, "algo", "run", "recursive_halving_doubling", "all_reduce",
                       "--ranks", "6", "--size", "1000", "-d", "bfloat16", "-o", "sum")
    assert code == 0 and "matches the numpy reference" in out


@pytest.mark.parametrize("argv, message", [
    (["algo", "show", "ring", "allreducex"], "unknown collective 'allreducex'"),
    (["algo", "show", "spiral", "all_reduce"], "unknown algorithm 'spiral' for all_reduce"),
    (["algo", "show", "ring", "all_reduce", "--ranks", "0"], "--ranks must be >= 1"),
    (["algo", "show", "ring", "all_reduce", "--size", "6"], "not a multiple of the float32"),
    (["algo", "run", "ring", "all_reduce", "-d", "int32", "-o", "avg"],
     "op 'avg' is not supported"),
    (["algo", "run", "ring", "all_reduce", "-o", "xor"], "unknown reduction op 'xor'"),
    (["algo", "show", "hierarchical", "all_reduce", "--ranks", "6", "--param", "group_size=4"],
     "group_size"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert message in err and "Traceback" not in err and err.count("\n") == 1


def test_negative_size_is_rejected_by_the_parser(capsys):
    with pytest.raises(SystemExit) as e:
        main(["algo", "show", "ring", "all_reduce", "--size", "-8"])
    assert e.value.code == 2
    assert "negative" in capsys.readouterr().err


def test_verify_all_max_ranks_33(capsys):
    code, out, _ = run(capsys, "algo", "verify", "--all", "--max-ranks", "33")
    assert code == 0 and "FAIL" not in out
