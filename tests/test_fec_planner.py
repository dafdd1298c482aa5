import pytest

from pyrofling.fec import AdaptivePlanner, FecPlan, make_planner, reference_plan, tuned_plan
from pyrofling.fec.planner import binomial_tail, repair_count, tuned_degrees, uncovered_probability


@pytest.mark.parametrize(
    ("n", "plan"),
    [
        (1, FecPlan(1, 1, 1)),
        (8, FecPlan(1, 8, 8)),
        (9, FecPlan(3, 4, 5)),
        (40, FecPlan(11, 20, 20)),
        (100, FecPlan(26, 50, 50)),
        (200, FecPlan(51, 64, 64)),
    ],
)
def test_reference_rule(n: int, plan: FecPlan) -> None:
    assert make_planner("reference").plan(n) == plan
    assert reference_plan(n) == plan


def test_tuned_has_the_reference_overhead_and_valid_degrees() -> None:
    tuned = make_planner("tuned")
    for n in range(1, 600):
        plan = tuned.plan(n)
        assert plan.repair_blocks == reference_plan(n).repair_blocks
        plan.check(n)
        if n <= 28:
            assert plan == reference_plan(n)  # small frames: the reference is already best
    assert tuned_degrees(100) == (25, 25)
    assert tuned_degrees(200) == (32, 32)


def test_ratio_changes_the_repair_count() -> None:
    assert make_planner("tuned", ratio=0.5).plan(100).repair_blocks == 51
    assert make_planner("none").plan(100) == FecPlan(0, 0, 0)
    assert tuned_plan(100, 0) == FecPlan(0, 0, 0)


def test_unknown_planner_names_the_choices() -> None:
    with pytest.raises(ValueError, match="reference, tuned, adaptive"):
        make_planner("raptor")


def test_binomial_tail() -> None:
    assert binomial_tail(10, 0.5, 10) == 0.0
    assert binomial_tail(10, 0.5, -1) == 1.0
    assert binomial_tail(2, 0.5, 0) == pytest.approx(0.75)
    assert binomial_tail(100, 0.0, 0) == 0.0


def test_adaptive_follows_reported_loss() -> None:
    planner = AdaptivePlanner(initial_loss=0.0, smoothing=1.0)
    quiet = planner.plan(100).repair_blocks
    planner.observe_datagram_loss(5, 100)  # 5 % loss
    lossy = planner.plan(100).repair_blocks
    planner.observe_datagram_loss(0, 100)
    calm_again = planner.plan(100).repair_blocks
    assert quiet == 5  # floor: min_ratio 5 %
    assert lossy > 20
    assert calm_again == quiet
    planner.observe_datagram_loss(1, 0)  # nonsense report is ignored
    assert planner.plan(100).repair_blocks == quiet
    plan = planner.plan(100)
    plan.check(100)


def test_adaptive_validates_configuration() -> None:
    with pytest.raises(ValueError):
        AdaptivePlanner(target_frame_loss=0)
    with pytest.raises(ValueError):
        AdaptivePlanner(min_ratio=0.5, max_ratio=0.1)


def test_uncovered_probability_matches_the_shuffler() -> None:
    import random

    from pyrofling.fec.shuffle import select

    n, d, f = 40, 16, 11  # rounds of 2 blocks leave 8 of 40 out: visible in a short run
    rng = random.Random(4)
    trials = 4000
    uncovered = sum(n - len(set(select(rng.getrandbits(32), n, (d,) * f).picks)) for _ in range(trials))
    measured = uncovered / (trials * n)
    assert measured == pytest.approx(uncovered_probability(n, d, f), rel=0.35)
    for n in range(29, 400):
        even, odd = tuned_degrees(n)
        assert even == odd
        assert uncovered_probability(n, even, repair_count(n)) <= 1e-5
