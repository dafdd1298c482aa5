"""Players' input, pure: the gamepad (:mod:`.pad`) and the keyboard and mouse (:mod:`.keyboard_mouse`), each
with its viewer-side sender and its host-side router, and the state both sides share.
"""
