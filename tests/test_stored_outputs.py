"""The rule by which stored outputs are compared (tests/stored_outputs.py, issue 23)."""
import pytest

from stored_outputs import align, cell_difference, numbers_agree


@pytest.mark.parametrize("stored, new, agree", [
    ("0.868", "0.867", True), ("0.868", "0.869", True), ("0.868", "0.866", False),
    ("3.0e-07", "3.1e-07", True), ("3.0e-07", "3.6e-07", False), ("9.7e-17", "0.0e+00", False),
    ("2.92", "2.92", True), ("0.999", "0.998", True), ("6.8", "6.5", False),
    ("17", "18", False), ("17", "17.0", False),  # integers (counts, sizes) are exact
    ("1.00", "0.99", True), ("-0.5", "-0.4", True), ("-0.5", "-0.3", False),
])
def test_a_number_agrees_to_one_unit_of_its_last_digit(stored, new, agree):
    assert numbers_agree(stored, new) is agree


def test_align_keeps_the_words_and_every_number_that_moved_too_far():
    assert align("acc 0.868 on 1000 dates", "acc 0.867 on 1000 dates") == "acc 0.868 on 1000 dates"
    assert align("acc 0.868 on 1000 dates", "acc 0.850 on 1000 dates") == "acc 0.850 on 1000 dates"
    assert align("acc 0.868 on 1000 dates", "acc 0.867 on 999 dates") == "acc 0.868 on 999 dates"
    assert align("acc 0.868", "accuracy 0.867") == "accuracy 0.867"  # another text: left to the exact comparison
    assert align("h0 0.11", "h0 0.12") == "h0 0.11"  # 'h0' is a word, not a number


def test_a_cells_outputs_compare_by_the_rule_after_the_sanitizers():
    stream = lambda text: {"output_type": "stream", "name": "stdout", "text": text}  # noqa: E731
    assert cell_difference([stream("took 1.2 s, acc 0.868\n")], [stream("took 3.4 s, acc 0.867\n")]) is None
    assert cell_difference([stream("acc 0.868\n")], [stream("acc 0.8"), stream("68\n")]) is None  # split print
    assert "stored 'acc 0.868'" in cell_difference([stream("acc 0.868\n")], [stream("acc 0.858\n")])
    fig = {"output_type": "display_data", "data": {"image/png": "AAAA", "text/plain": "<Figure size 640x480 with 1 Axes>"}}
    fig2 = {"output_type": "display_data", "data": {"image/png": "BBBB", "text/plain": "<Figure size 900x480 with 2 Axes>"}}
    assert cell_difference([fig], [fig2]) is None  # images are never compared


def test_nbval_compares_by_the_same_rule():
    from nbval.plugin import IPyNbCell

    assert getattr(IPyNbCell.compare_outputs, "_course_rule", False), "conftest.py's nbval patch is not active"
