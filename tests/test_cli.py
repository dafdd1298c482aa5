import subprocess
import sys

import pytest

from pyrofling.cli import _host_port, main


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "bench" in out and "netsim" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "fec", "--k", "0"], "positive whole numbers"),
        (["bench", "fec", "--trials", "x"], "not a whole number"),
        (["netsim", "--upstream", "localhost:http"], "the port must be a number"),
        (["netsim", "--upstream", "127.0.0.1:1", "--loss", "2"], "not between 0 and 1"),
        (["netsim", "--upstream", "::1:5"], "IPv6"),
        (["netsim"], "--upstream"),
    ],
)
def test_bad_flags_say_what_is_wrong(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_host_port_forms() -> None:
    assert _host_port("9000") == ("127.0.0.1", 9000)
    assert _host_port("[::1]:9000") == ("::1", 9000)
    assert _host_port("example.org:1") == ("example.org", 1)


def test_missing_trace_file_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["netsim", "--upstream", "127.0.0.1:1", "--trace", "/nonexistent", "--duration", "0"]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_netsim_runs_and_reports_as_a_program() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pyrofling", "netsim", "--upstream", "127.0.0.1:9", "--duration", "0.2", "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert '"down"' in out.stdout and "viewers connect to 127.0.0.1:" in out.stderr
