"""The viewer and gamepad client (``pyrofling view``): handshake, reassembly, decode, presentation.

Built on :mod:`pyrofling.core` in the host/viewer issue.
"""
