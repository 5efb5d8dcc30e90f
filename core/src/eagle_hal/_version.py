"""The version of this eagle-hal release, in a module of its own so that the modules the
package's lazy exports load can name it without importing the package back."""

from __future__ import annotations

__version__ = "0.1.0"
