"""eagle-hal backend for Moore Threads GPUs through torch_musa.

``eagle_hal_musa.plugin`` is the light entry-point module (descriptor and probe);
``eagle_hal_musa.backend`` is the implementation, imported only when selected.
"""

__version__ = "0.1.0"
