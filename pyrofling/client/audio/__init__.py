"""Viewer audio: a jitter buffer held at its target by resampling, played through an output device.

:class:`~pyrofling.client.audio.player.AudioPlayer` is what the viewer drives; the ring the
device's callback reads, the device adapters and the player's measurements are its parts.
"""

from pyrofling.client.audio.devices import AUDIO_BACKENDS, output_factory
from pyrofling.client.audio.player import AudioPlayer, AudioPlayerConfig
from pyrofling.client.audio.ring import OutputRing

__all__ = ["AUDIO_BACKENDS", "AudioPlayer", "AudioPlayerConfig", "OutputRing", "output_factory"]
