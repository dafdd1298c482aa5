"""The streaming host (``pyrofling host``): capture, encode, fan-out and pacing.

Built on :mod:`pyrofling.core` in the host/viewer issue.
"""
