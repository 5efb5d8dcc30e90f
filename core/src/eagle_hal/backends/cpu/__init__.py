"""The CPU reference backend (``eagle_hal.backends.cpu.plugin`` is its entry point)."""
