"""Large pictures in small slices, decoded as they arrive: the figures the host and the viewer share.

A picture of ``EARLY_PICTURE_BYTES`` or more takes about a millisecond to arrive behind the host's 200 Mbit/s
pacer.  The viewer decodes such a picture from its first slices while the rest is on its way; the host cuts
it into slices of at most ``SMALL_SLICE_BYTES`` so that the first parts hold most of it (x264 otherwise makes
one slice a thread, by rows, and the rows with the most detail hold most of a picture in one slice).  Measured
on a 16-CPU machine with an NVIDIA H200 (docs/streaming.md): capture -> decoded at 1080p60 0.6-0.8 ms sooner;
a 720p60 picture (21 KB) decoded that way lost 0.6 ms.
"""

from __future__ import annotations

#: The least picture that the viewer decodes early, and that the host cuts into small slices.
EARLY_PICTURE_BYTES = 24_000
#: The host's largest slice (x264's ``slice-max-size``) where its pictures average ``EARLY_PICTURE_BYTES`` or
#: more: a 1080p picture of the test scene in about six; at 4,000 a 360p key frame at 3 Mbit/s came out blurred.
SMALL_SLICE_BYTES = 8000
