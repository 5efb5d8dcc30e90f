"""eagle-hal backend for NVIDIA GPUs through PyTorch's CUDA build.

``eagle_hal_cuda.plugin`` is the light entry-point module (descriptor and probe);
``eagle_hal_cuda.backend`` is the implementation, imported only when selected.
"""

__version__ = "0.1.0"
