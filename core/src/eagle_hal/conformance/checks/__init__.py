"""The conformance checks, one module per area (``check_<area>.py``).

They are collected only by the conformance plugin when ``--eagle-hal-device`` is given; the
fixtures they use (``backend``, ``device``, ``ops``, ...) come from
``eagle_hal.conformance.fixtures``.
"""
