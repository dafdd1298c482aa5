import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from pyrofling.core.samples import SAMPLES_KEPT, median_and_p95, recent_samples, tail


def test_a_window_keeps_only_the_most_recent_samples() -> None:
    window = recent_samples()
    for i in range(SAMPLES_KEPT + 500):
        window.append(float(i))
    assert len(window) == SAMPLES_KEPT
    assert window[0] == 500.0 and window[-1] == SAMPLES_KEPT + 499.0


def test_tail_returns_the_last_values_in_order() -> None:
    window = recent_samples()
    window.extend([1.0, 2.0, 3.0, 4.0])
    assert tail(window, 2) == [3.0, 4.0]
    assert tail(window, 10) == [1.0, 2.0, 3.0, 4.0]
    assert tail([5, 6, 7], 1) == [7] and tail(iter([1, 2, 3]), 2) == [2, 3]
    assert tail(window, 0) == []


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), max_size=700))
def test_the_live_median_and_95th_percentile_are_numpys(values: list[float]) -> None:
    median, p95 = median_and_p95(values)
    if not values:
        assert (median, p95) == (None, None)
        return
    assert median is not None and p95 is not None
    assert np.isclose(median, np.median(values), rtol=1e-12, atol=1e-9)
    assert np.isclose(p95, np.percentile(values, 95), rtol=1e-12, atol=1e-9)
