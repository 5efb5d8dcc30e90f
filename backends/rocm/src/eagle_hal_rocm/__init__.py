"""eagle-hal backend for AMD GPUs through PyTorch's ROCm build.

``eagle_hal_rocm.plugin`` is the light entry-point module (descriptor and probe);
``eagle_hal_rocm.backend`` is the implementation, imported only when selected.
"""

__version__ = "0.1.0"
