"""eagle-hal backend for Huawei Ascend NPUs through torch_npu.

``eagle_hal_npu.plugin`` is the light entry-point module (descriptor and probe);
``eagle_hal_npu.backend`` is the implementation, imported only when selected.
"""

__version__ = "0.1.0"
