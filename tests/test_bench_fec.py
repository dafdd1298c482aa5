"""The FEC bench: its JSON shape, and the reference's known recovery figures within sampling error."""

import json
from typing import Any

import pytest

from pyrofling.bench.fec import FecBenchConfig, LossSpec, run, wilson_interval
from pyrofling.bench.fec_report import format_table
from pyrofling.cli import main


def _rows(**kw: Any) -> dict[tuple[str, int, str], dict[str, Any]]:
    cfg = FecBenchConfig(compare=False, throughput=False, **kw)
    result = run(cfg, progress_stream=None)
    assert all(r["mismatches"] == 0 for r in result["rows"])
    return {(r["scheme"], r["k"], r["loss_model"]): r for r in result["rows"]}


def _within(row: dict[str, Any], expected: float) -> bool:
    lo, hi = wilson_interval(round(row["frame_success"] * row["trials"]), row["trials"], z=3.3)
    return lo <= expected <= hi


def test_single_losses_are_always_repaired() -> None:
    rows = _rows(ks=(5, 20, 100, 200), losses=(LossSpec.parse("n=1"),), trials=300)
    for k in (5, 20, 100, 200):
        for scheme in ("reference/peel", "tuned/peel", "tuned/pyrofling"):
            assert rows[(scheme, k, "n=1")]["frame_success"] == 1.0


@pytest.mark.slow
def test_reference_two_losses_at_k20_matches_the_reference() -> None:
    rows = _rows(ks=(20,), losses=(LossSpec.parse("n=2"),), trials=4000, reed_solomon=False)
    assert _within(rows[("reference/peel", 20, "n=2")], 0.936)  # measured with the C++ code
    assert rows[("none", 20, "n=2")]["frame_success"] < 0.2


@pytest.mark.slow
def test_reference_k40_at_5_percent_and_tuned_beats_it_at_k100() -> None:
    # Without the Reed-Solomon code, which this test does not judge (half the time).
    rows = _rows(ks=(40, 100), losses=(LossSpec.parse("iid:5%"),), trials=1500, reed_solomon=False)
    assert _within(rows[("reference/peel", 40, "iid 5%")], 0.955)
    ref = rows[("reference/peel", 100, "iid 5%")]["residual_frame_loss"]
    tuned = rows[("tuned/pyrofling", 100, "iid 5%")]["residual_frame_loss"]
    assert ref > 0.1  # the reference collapses (≈18 %)
    assert tuned < 0.01


def test_json_rows_have_the_documented_fields(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "bench",
            "fec",
            "--quick",
            "--k",
            "9",
            "--loss",
            "n=1,ge:0.02,0.3,0.5",
            "--trials",
            "50",
            "--no-compare",
            "--json",
        ]
    )
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["losses"] == ["n=1", "GE(0.02,0.3,0.5)"]
    row = doc["rows"][1]
    for key in ("scheme", "k", "repair_blocks", "loss_model", "trials", "frame_success", "encode_MBps", "decode_MBps"):
        assert key in row
    speeds = [r for r in doc["rows"] if r["scheme"] == "tuned/pyrofling"]
    assert all(r["encode_MBps"] and r["encode_MBps"] > 0 for r in speeds)
    assert "Residual frame loss" in format_table(doc)


def test_bad_loss_model_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "fec", "--loss", "iid:7", "--no-throughput"]) == 2
    assert "bad loss model" in capsys.readouterr().err


def test_loss_spec_parsing() -> None:
    assert LossSpec.parse("iid:1%").value == pytest.approx(0.01)
    assert LossSpec.parse("IID:0.02").label == "iid 2%"
    assert LossSpec.parse("data=3").label == "data=3"
    with pytest.raises(ValueError):
        LossSpec.parse("ge:1,2")
