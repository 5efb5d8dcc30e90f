"""The entry-point module: light, importing no device library; it only describes the backend.

eagle-hal imports this module when it lists or selects backends, calls the hook below,
and imports ``eagle_hal_example.backend`` only when the ``example`` backend is selected.
"""

from __future__ import annotations

from eagle_hal.plugin_api import (
    Availability,
    BackendDescriptor,
    Capabilities,
    TreeMaskMode,
    hookimpl,
    import_torch,
)

CAPABILITIES = Capabilities(
    graph_capture=False,
    dtypes=("float32",),
    tree_mask_modes=(TreeMaskMode.TREE_BLOCK,),
    triton=False,
    distributed_backend="gloo",
    visible_devices_env=None,
    notes="example plugin: eagle-hal's pure-torch attention on the host",
)


def probe() -> Availability:
    """Never raises; says why not when torch cannot be imported."""
    result = import_torch()
    if result.torch is None:
        return Availability.unavailable(result.reason)
    return Availability.available("runs wherever torch runs on the CPU")


@hookimpl
def eagle_hal_backends() -> list[BackendDescriptor]:
    return [
        BackendDescriptor(
            name="example",
            device_types=("cpu",),
            implementation="eagle_hal_example.backend:ExampleBackend",
            probe=probe,
            api_version=(1, 0),  # the HAL API this plugin was written and tested against
            priority=-10,  # below eagle-hal's own cpu backend: chosen only when asked for
            description="an example third-party backend",
            capabilities=CAPABILITIES,
        )
    ]
