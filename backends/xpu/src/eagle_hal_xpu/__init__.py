"""eagle-hal backend for Intel GPUs through PyTorch's XPU build.

``eagle_hal_xpu.plugin`` is the light entry-point module (descriptor and probe);
``eagle_hal_xpu.backend`` is the implementation, imported only when selected.
"""

__version__ = "0.1.0"
