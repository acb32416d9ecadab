"""Blame's statistics against published reference values (R's binom.test, the Wilson score formula, the
Benjamini-Hochberg paper's procedure) and the labelling rules of docs/blame.md."""
import pytest

from git_pf.blame import stats


def close(a, b, tol=1e-4):
    return all(abs(x - y) < tol for x, y in zip(a, b))


def test_wilson_matches_reference_values():
    assert close(stats.wilson(8, 10), (0.4901625, 0.9433178))
    assert close(stats.wilson(0, 10), (0.0, 0.2775328))
    assert close(stats.wilson(10, 10), (0.7224672, 1.0))
    assert stats.wilson(0, 0) == (0.0, 1.0)


def test_clopper_pearson_matches_r_binom_test():
    assert close(stats.clopper_pearson(8, 10), (0.4439045, 0.9747893))
    assert close(stats.clopper_pearson(0, 10), (0.0, 0.3084971))
    assert close(stats.clopper_pearson(3, 7, conf=0.9), (0.1287564, 0.7746784))
    lo, hi = stats.clopper_pearson(50, 100)
    assert close((lo, hi), (0.3983211, 0.6016789))


def test_binomial_p_value_is_the_upper_tail():
    assert stats.binom_p_value(5, 5, 0.1) == pytest.approx(1e-5)
    assert stats.binom_p_value(0, 5, 0.1) == pytest.approx(1.0)
    assert stats.binom_p_value(2, 4, 0.5) == pytest.approx(11 / 16)


def test_benjamini_hochberg_q_values_are_monotone_and_keep_untested_steps():
    q = stats.benjamini_hochberg([0.01, None, 0.04, 0.03, 0.005])
    assert q[1] is None
    assert q[0] == pytest.approx(0.02) and q[2] == pytest.approx(0.04) and q[4] == pytest.approx(0.02)
    assert stats.benjamini_hochberg([]) == []


def test_bad_counts_are_refused():
    with pytest.raises(ValueError):
        stats.wilson(3, 2)
    with pytest.raises(ValueError):
        stats.binom_p_value(1, 2, 1.5)


def test_labels_and_the_decisive_step_is_the_last_decisive_one():
    rows = [stats.step_stats(1, 5, 0, 0, null_rate=0.1),   # all flip
            stats.step_stats(2, 0, 5, 1, null_rate=0.1),   # none flip
            stats.step_stats(3, 5, 0, 0, null_rate=0.1),   # all flip: the point of no return
            stats.step_stats(4, 1, 1, 3, null_rate=0.1),   # too few gradable trials
            stats.step_stats(5, 0, 4, 0, null_rate=0.1)]
    out, decisive = stats.summarize(rows)
    assert [r["label"] for r in out] == ["decisive", "none", "decisive", "insufficient", "none"]
    assert decisive == 3
    assert out[3]["rate"] is None and out[3]["trials"] == 5 and out[3]["undefined"] == 3


def test_undefined_trials_never_count_as_no_flips():
    row = stats.step_stats(1, 3, 0, 7, null_rate=0.1)
    assert row["rate"] == 1.0 and row["trials"] == 10 and row["no_flips"] == 0


def test_a_rate_near_the_null_is_no_more_than_suggestive():
    rows = [stats.step_stats(1, 3, 7, 0, null_rate=0.1)] + [stats.step_stats(s, 0, 10, 0, null_rate=0.1)
                                                            for s in range(2, 12)]
    out, decisive = stats.summarize(rows)
    assert out[0]["p"] < 0.1 and out[0]["label"] in ("suggestive", "none")
    assert decisive is None
