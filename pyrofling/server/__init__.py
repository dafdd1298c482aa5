"""The streaming host (``pyrofling host``): capture, encode, fan-out, pacing.  Built on pyrofling.core; see the host/viewer issue."""
