from pyrofling.core.samples import SAMPLES_KEPT, recent_samples, tail


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
