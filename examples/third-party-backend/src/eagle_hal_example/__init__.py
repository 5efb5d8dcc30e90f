"""An example eagle-hal backend plugin (backend name ``example``, device type ``cpu``)."""

__version__ = "0.1.0"
