"""PortAudio housekeeping for sounddevice: it lists devices once, when it starts."""

from __future__ import annotations

import sys


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
