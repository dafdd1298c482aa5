"""The spectators' mountpoint lifecycle and their key frames, in virtual time (pyrofling.core.host.spectators)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

from pyrofling.core.host.spectators import (
    CreateMountpoint,
    ForceKeyFrame,
    KeepAlive,
    Phase,
    Publish,
    RemoveMountpoint,
    Say,
    SendReport,
    SpectatorsConfig,
    SpectatorsCore,
    SpectatorsOutput,
    StopPublishing,
)

JANUS = "http://10.0.0.2:8088/janus"


def kinds(outputs: list[SpectatorsOutput]) -> list[type]:
    return [type(o) for o in outputs]


def lines(outputs: Sequence[object]) -> list[str]:
    return [o.text for o in outputs if isinstance(o, Say)]


def publishing(now: float = 0.0, config: SpectatorsConfig | None = None) -> SpectatorsCore:
    core = SpectatorsCore(JANUS, config)
    assert kinds(core.start(now)) == [CreateMountpoint]
    out = core.created(now, 20000, 20002)
    assert out[0] == Publish(20000, 20002) and SendReport in kinds(out) and ForceKeyFrame in kinds(out)
    assert lines(out) == [f"spectators: publishing to a mountpoint on {JANUS}"]
    return core


def run_until(core: SpectatorsCore, end: float) -> list[tuple[float, SpectatorsOutput]]:
    """Every timer the core asks for up to ``end``, as a shell would, and what came of each."""
    seen = []
    while (t := core.next_timer()) is not None and t <= end:
        seen += [(t, o) for o in core.timer(t)]
    return seen


def test_a_flood_of_key_frame_requests_forces_at_most_two_idrs_a_second_and_none_is_lost() -> None:
    core = publishing()  # forced one at 0.0 for the new mountpoint
    forced_at = []
    for i in range(1, 2001):  # 2,000 PLIs over 2 s from a crowd of late joiners
        now = i / 1000
        forced_at += [now for o in core.keyframe_asked(now) if isinstance(o, ForceKeyFrame)]
        forced_at += [t for t, o in run_until(core, now) if isinstance(o, ForceKeyFrame)]
    assert forced_at == [0.5, 1.0, 1.5, 2.0]  # at the interval, not one per request
    assert core.summary()["keyframes_asked"] == 2000 and core.summary()["keyframes_forced"] == 5
    # The one at 2.0 answered a request at once: one more follows, then a quiet spell.
    assert [t for t, o in run_until(core, 5.0) if isinstance(o, ForceKeyFrame)] == [2.5]
    # A request after a quiet spell is answered at once and once more an interval later (spectators whose
    # connection came up after the first IDR: Janus asks only once a second); what comes meanwhile waits for that.
    assert kinds(core.keyframe_asked(5.0)) == [ForceKeyFrame]
    assert core.keyframe_asked(5.2) == [] and core.next_timer() == pytest.approx(5.5)
    assert [o for _, o in run_until(core, 5.5) if isinstance(o, ForceKeyFrame)] == [ForceKeyFrame()]
    later = [type(o) for _, o in run_until(core, 20.0)]
    assert ForceKeyFrame not in later and core.summary()["keyframes_forced"] == 8  # nothing left pending


def test_the_session_is_kept_alive_and_janus_told_where_to_send_feedback_while_publishing() -> None:
    core = publishing(config=SpectatorsConfig(keepalive_s=25, report_s=10))
    seen = run_until(core, 50)
    assert [(t, type(o)) for t, o in seen if isinstance(o, KeepAlive)] == [(25, KeepAlive), (50, KeepAlive)]
    assert [t for t, o in seen if isinstance(o, SendReport)] == [10, 20, 30, 40, 50]
    core.failed(51.0, "timed out")
    assert core.next_timer() == pytest.approx(51.5)  # only the retry: no keepalive or report for a lost session


def test_janus_lost_mid_stream_is_one_line_then_retries_with_backoff_and_a_key_frame_when_back() -> None:
    core = publishing(config=SpectatorsConfig(retry_min_s=0.5, retry_max_s=2.0))
    out = core.failed(30.0, "connection refused")
    assert kinds(out) == [StopPublishing, Say] and out[1].warning  # type: ignore[union-attr]
    assert lines(out) == [f"spectators: lost {JANUS} (connection refused); the players' stream goes on, "
                          "publishing again when it is back"]  # fmt: skip
    attempts = []
    for _ in range(4):  # Janus still down: each try fails, silently, further apart up to the most
        t = core.next_timer()
        assert t is not None
        assert kinds(core.timer(t)) == [CreateMountpoint]
        attempts.append(t)
        assert core.failed(t, "connection refused") == []
    assert [round(b - a, 3) for a, b in itertools.pairwise(attempts)] == [1.0, 2.0, 2.0]
    assert attempts[0] == pytest.approx(30.5)
    t = core.next_timer()
    assert t is not None and kinds(core.timer(t)) == [CreateMountpoint]
    out = core.created(t, 30000, None)  # Janus is back (new ports, and this time no audio)
    assert out[0] == Publish(30000, None) and ForceKeyFrame in kinds(out)
    assert lines(out) == [f"spectators: Janus is back, publishing to its mountpoint on {JANUS} again"]
    assert core.summary()["outages"] == 1 and core.summary()["mountpoints_created"] == 2


def test_a_long_stable_run_starts_its_next_outage_with_the_shortest_wait() -> None:
    core = publishing(config=SpectatorsConfig(retry_min_s=0.5, retry_max_s=4.0))
    core.failed(1.0, "timed out")
    for _ in range(3):  # three failed tries: the wait grew
        t = core.next_timer()
        assert t is not None
        core.timer(t)
        core.failed(t, "timed out")
    t = core.next_timer()
    assert t is not None
    core.timer(t)
    core.created(t, 20000, 20002)
    core.failed(t + 600, "timed out")  # up for ten minutes, then gone again
    assert core.next_timer() == pytest.approx(t + 600.5)


def test_a_wrong_key_or_secret_is_one_line_and_never_tried_again() -> None:
    core = SpectatorsCore(JANUS)
    core.start(0.0)
    out = core.failed(0.1, "wrong admin_key", refused=True)
    assert lines(out) == [f"spectators: {JANUS} refused the mountpoint (wrong admin_key); the players' stream "
                          "goes on without spectators"]  # fmt: skip
    assert core.phase is Phase.REFUSED and core.next_timer() is None
    assert core.keyframe_asked(1.0) == [] and core.timer(100.0) == [] and core.created(2.0, 1, 2) == []
    assert core.stop(3.0) == []


def test_janus_unreachable_at_start_is_said_once_and_tried_until_it_answers() -> None:
    core = SpectatorsCore(JANUS)
    core.start(0.0)
    first = core.failed(0.0, "connection refused")
    assert lines(first) == [f"spectators: cannot reach {JANUS} (connection refused); trying again until it answers"]
    said = []
    for _ in range(5):
        t = core.next_timer()
        assert t is not None
        core.timer(t)
        said += lines(core.failed(t, "connection refused"))
    assert said == []
    assert core.keyframe_asked(10.0) == []  # nothing published: nothing to force


def test_stopping_removes_the_mountpoint_only_if_there_is_one() -> None:
    core = publishing()
    assert kinds(core.stop(9.0)) == [StopPublishing, RemoveMountpoint]
    assert core.next_timer() is None and core.failed(9.5, "gone") == [] and core.timer(50.0) == []
    waiting = SpectatorsCore(JANUS)
    waiting.start(0.0)
    waiting.failed(0.0, "connection refused")
    assert waiting.stop(1.0) == [] and waiting.next_timer() is None


@pytest.mark.parametrize(
    "fields",
    [{"keyframe_interval_s": 0}, {"keepalive_s": -1}, {"retry_min_s": 0}, {"retry_min_s": 3, "retry_max_s": 2}],
)
def test_impossible_settings_are_refused(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SpectatorsConfig(**fields)


def test_each_edge_lives_on_its_own_one_line_when_lost_one_when_back_and_the_others_go_on() -> None:
    from pyrofling.core.host.spectator_edges import CreateEdge, DropEdge, EdgesCore

    a, b = "http://edge-a:8088/janus", "http://edge-b:8088/janus"
    edges = EdgesCore((a, b), SpectatorsConfig(retry_min_s=0.5, retry_max_s=2.0))
    assert edges.origin_up(0.0) == [CreateEdge(a), CreateEdge(b)]
    assert edges.created(a, 0.1) == [] and edges.created(b, 0.1) == [] and edges.up() == [a, b]
    lost = edges.failed(a, 5.0, "timed out")
    assert lost[0] == DropEdge(a) and len(lines(lost)) == 1
    assert lines(lost)[0].startswith(f"spectators: lost the edge {a}") and "the other edges go on" in lines(lost)[0]
    assert edges.up() == [b]  # the other goes on
    assert edges.next_timer() == pytest.approx(5.5)
    assert edges.timer(5.4) == [] and edges.timer(5.5) == [CreateEdge(a)]
    assert edges.failed(a, 5.6, "refused") == []  # still away: tried again, nothing said
    assert edges.next_timer() == pytest.approx(6.6)  # the wait doubled
    assert edges.timer(6.6) == [CreateEdge(a)]
    assert lines(edges.created(a, 6.7)) == [f"spectators: the edge {a} is back, fed by the origin again"]
    assert edges.summary()[a] == {"phase": "up", "outages": 1}


def test_the_origin_gone_takes_its_edges_and_an_edge_absent_at_start_is_one_line() -> None:
    from pyrofling.core.host.spectator_edges import CreateEdge, EdgesCore

    a = "http://edge-a:8088/janus"
    edges = EdgesCore((a,))
    edges.origin_up(0.0)
    said = edges.failed(a, 0.2, "Connection refused")
    assert len(said) == 1 and lines(said)[0].startswith(f"spectators: cannot reach the edge {a}")  # no DropEdge
    edges.origin_down()  # the origin went away: nothing to feed the edge from
    assert edges.timer(100.0) == [] and edges.next_timer() is None and edges.failed(a, 100.0, "x") == []
    assert edges.created(a, 100.0) == []  # an answer from before the outage changes nothing
    assert edges.origin_up(101.0) == [CreateEdge(a)]  # the origin back: every edge made again
