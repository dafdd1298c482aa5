"""Audio output devices: PortAudio through sounddevice (the default) or PyAudio, each fed by an OutputRing.

PortAudio lists devices once, when it starts, so a sound server started since
(a JACK server a bench starts) is found by starting PortAudio again.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from pyrofling.client.audio.ring import OutputRing

AUDIO_BACKENDS = ("sounddevice", "pyaudio")


class AudioOutput(Protocol):
    """An open output stream that calls ``ring.fill`` from its own thread."""

    rate: int
    name: str

    def start(self) -> None: ...

    def close(self) -> None: ...


class SoundDeviceOutput:
    """PortAudio through sounddevice: float32 frames, the callback straight into the ring."""

    def __init__(self, ring: OutputRing, rate: int, device: str | None) -> None:
        import sounddevice as sd

        dev: Any = int(device) if device is not None and device.isdigit() else device
        if _no_output_devices(sd):
            # PortAudio lists devices once, when it starts; a sound server started since is missed.
            reinitialize_portaudio()
        if _no_output_devices(sd):
            raise OSError("no audio output device (no sound card or sound server; start JACK or use --no-audio)")
        self._ring = ring

        def callback(outdata: Any, frames: int, time_info: Any, status: Any) -> None:
            ring.fill(outdata, frames, time_info.outputBufferDacTime, time_info.currentTime, status.output_underflow)

        stream = None
        for try_rate in (rate, None):  # the stream's rate, else the device's own (JACK runs at one rate)
            try:
                stream = sd.OutputStream(
                    device=dev,
                    samplerate=try_rate,
                    channels=ring.channels,
                    dtype="float32",
                    callback=callback,
                    latency="low",
                )
                break
            except (sd.PortAudioError, ValueError) as exc:
                error = exc
        if stream is None:
            raise OSError(f"cannot open audio output {device or '(default)'}: {error}")
        self._stream = stream
        self.rate = int(stream.samplerate)
        info = sd.query_devices(stream.device)
        self.name = f"{info['name']} ({sd.query_hostapis(info['hostapi'])['name']})"

    def start(self) -> None:
        self._stream.start()

    def close(self) -> None:
        self._stream.close(ignore_errors=True)


def _no_output_devices(sd: Any) -> bool:
    try:
        return not any(d["max_output_channels"] > 0 for d in sd.query_devices())
    except Exception:
        return True


class PyAudioOutput:
    """PortAudio through PyAudio (where it is installed).  PyAudio wants bytes back, so each
    callback converts one block (a small allocation sounddevice avoids)."""

    def __init__(self, ring: OutputRing, rate: int, device: str | None) -> None:
        try:
            import pyaudio
        except ImportError as exc:
            raise OSError("PyAudio is not installed (pip install pyaudio; it needs portaudio19-dev)") from exc
        self._pa = pyaudio.PyAudio()
        block = np.zeros((4096, ring.channels), dtype=np.float32)

        def callback(_in: Any, frames: int, time_info: dict[str, float], status: int) -> tuple[bytes, int]:
            out = block[:frames] if frames <= len(block) else np.zeros((frames, ring.channels), np.float32)
            ring.fill(
                out,
                frames,
                time_info.get("output_buffer_dac_time", 0.0),
                time_info.get("current_time", 0.0),
                bool(status & pyaudio.paOutputUnderflow),
            )
            return out.tobytes(), pyaudio.paContinue

        index = int(device) if device is not None and device.isdigit() else None
        self._stream = self._pa.open(
            format=pyaudio.paFloat32,
            channels=ring.channels,
            rate=rate,
            output=True,
            output_device_index=index,
            stream_callback=callback,
            start=False,
        )
        self.rate = rate
        self.name = "PyAudio default output" if index is None else f"PyAudio device {index}"

    def start(self) -> None:
        self._stream.start_stream()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._stream.close()
        self._pa.terminate()


OutputFactory = Callable[[OutputRing, int, "str | None"], AudioOutput]


def output_factory(backend: str) -> OutputFactory:
    if backend == "sounddevice":
        return SoundDeviceOutput
    if backend == "pyaudio":
        return PyAudioOutput
    raise ValueError(f"unknown audio backend {backend!r}; choose from {', '.join(AUDIO_BACKENDS)}")


def terminate_portaudio() -> None:
    """Close PortAudio in this process if sounddevice started it (open streams must be closed first).

    PortAudio's JACK client must let go before its JACK server stops, or PortAudio's exit
    handler aborts the process."""
    sd = sys.modules.get("sounddevice")
    if sd is not None:
        while sd._initialized > 0:
            sd._terminate()


def reinitialize_portaudio() -> None:
    """Make sounddevice see sound servers started since it was imported."""
    import sounddevice as sd

    terminate_portaudio()
    sd._initialize()
