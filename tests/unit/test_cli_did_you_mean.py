"""A mistyped subcommand, choice or option is a usage error (exit 2) naming the nearest one."""

from __future__ import annotations

import pytest

from leaseguard.cli.main import main

CASES = [
    (["chek"], "invalid choice: 'chek'", "did you mean 'check'?"),
    (["drian", "--deadline-s", "1"], "invalid choice: 'drian'", "did you mean 'drain'?"),
    (["check", "--jsn"], "unrecognized arguments: --jsn", "did you mean '--json'?"),
    (["check", "--tabel", "runs"], "unrecognized arguments: --tabel runs", "'--table'?"),
    (["check", "--tabel=runs"], "unrecognized arguments: --tabel=runs", "'--table'?"),
    (["budgets", "--on-drift", "aply"], "invalid choice: 'aply'", "did you mean 'apply'?"),
]


@pytest.mark.parametrize(("argv", "error", "hint"), CASES, ids=[c[0][-1] for c in CASES])
def test_a_near_miss_names_the_nearest_known_word(argv, error, hint, capsys):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    stderr = capsys.readouterr().err
    assert error in stderr
    assert hint in stderr


def test_nothing_near_is_said_as_argparse_says_it(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["check", "--frobnicate"])
    assert exited.value.code == 2
    stderr = capsys.readouterr().err
    assert "unrecognized arguments: --frobnicate" in stderr
    assert "did you mean" not in stderr
