"""The viewer and gamepad client (``pyrofling view``): handshake, reassembly, decode, presentation.  Built on pyrofling.core; see the host/viewer issue."""
