"""Every environment variable eagle-hal reads, declared once, and the one accessor for them.

Each variable is a ``Setting`` in one table: its name, type, default, meaning and owner
(``core``, the vendor package that reads it, or ``third-party`` for a variable another
tool defines and eagle-hal only consults). Code reads a variable only through ``get``,
which parses the value by the declared type at call time, so a test's ``monkeypatch`` or
an injected ``environ`` mapping always takes effect::

    from eagle_hal import settings

    settings.get("EAGLE_HAL_PLUGINS")                 # ('cuda', 'cpu') or ()
    settings.get("EAGLE_HAL_BACKEND", {"EAGLE_HAL_BACKEND": "cpu"})
    settings.triton_interpreted()                     # TRITON_INTERPRET, read in one place

Types:

``bool``        ``1``, ``true``, ``on``, ``yes`` or ``0``, ``false``, ``off``, ``no``, in any
                case, surrounding blanks ignored.
``int``         a decimal integer, optionally limited to a few ``choices``.
``str``         the value as set (an empty value stays empty: ``CUDA_VISIBLE_DEVICES=""``
                hides every GPU), unless the setting has ``choices``.
``comma-list``  names separated by commas, blanks around them ignored, empty ones dropped.

An unset variable gives the default; for every type but a plain ``str`` so does a blank
value. A value the type does not allow raises ``InvalidSetting`` (a ``ValueError``)
naming the variable, the value and what is allowed. Reading a name the table does not
declare raises ``UnknownSetting`` (a ``KeyError``): a programming error, caught by the
tests. Out-of-tree plugins add their own variables with ``declare``.

The table is documented in the README (``markdown_table``, ``python -m eagle_hal.settings``).
Choices that exist only to compare kernels or graph modes are not variables: they are
parameters of the objects that use them (``LaunchPolicy``, ``GraphRunner``, the fields of
``ModelKernels``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import threading
from collections.abc import Mapping
from typing import Any

from eagle_hal.errors import InvalidSetting

__all__ = [
    "BOOL",
    "COMMA_LIST",
    "INT",
    "SETTINGS",
    "STR",
    "Setting",
    "UnknownSetting",
    "declare",
    "declared",
    "get",
    "markdown_table",
    "setting",
    "triton_interpreted",
    "visible_devices",
]

BOOL, INT, STR, COMMA_LIST = "bool", "int", "str", "comma-list"
TYPES = (BOOL, INT, STR, COMMA_LIST)
CORE, THIRD_PARTY = "core", "third-party"

_TRUE = frozenset({"1", "true", "on", "yes"})
_FALSE = frozenset({"0", "false", "off", "no"})
_BOOL_ALLOWED = "1, true, on or yes (on) or 0, false, off or no (off)"
_INTEGER = re.compile(r"[+-]?\d+")
_NAME = re.compile(r"[A-Z][A-Z0-9_]*")


class UnknownSetting(KeyError):
    """A variable read through ``get`` that the table does not declare (a bug in the
    caller: declare it in ``SETTINGS`` or with ``declare``)."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


def _spelled(values: tuple[Any, ...]) -> str:
    """``"a"``, ``"a or b"``, ``"a, b or c"``."""
    words = [str(v) for v in values]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


@dataclasses.dataclass(frozen=True, slots=True)
class Setting:
    """One environment variable: ``type`` one of ``TYPES``; ``default`` what an unset
    variable gives (``None``: unset has a meaning of its own); ``meaning`` one line for
    the README; ``owner`` ``core``, the distribution that reads it (``eagle-hal-rocm``)
    or ``third-party``; ``choices`` the values an ``int`` or ``str`` may take (empty:
    any)."""

    name: str
    type: str
    default: Any
    meaning: str
    owner: str
    choices: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"setting name {self.name!r} is not an environment variable name")
        if self.type not in TYPES:
            raise ValueError(f"{self.name}: unknown type {self.type!r}; known: {TYPES}")
        if self.choices and self.type not in (INT, STR):
            raise ValueError(f"{self.name}: only int and str settings take choices")
        if any(c in self.meaning + self.owner for c in "|\n") or not self.meaning:
            raise ValueError(f"{self.name}: meaning and owner are one table cell each")

    @property
    def type_label(self) -> str:
        """The type as the README's table gives it: ``int: 32 or 64`` where limited."""
        return f"{self.type}: {_spelled(self.choices)}" if self.choices else self.type

    def parse(self, value: str | None) -> Any:
        """``value`` (``None``: unset) as this setting's type; ``InvalidSetting`` when the
        type does not allow it."""
        if value is None:
            return self.default
        if self.type == STR and not self.choices:
            return value
        text = value.strip()
        if not text:
            return self.default
        if self.type == BOOL:
            lowered = text.lower()
            if lowered in _TRUE:
                return True
            if lowered in _FALSE:
                return False
            raise InvalidSetting(self.name, value, _BOOL_ALLOWED)
        if self.type == COMMA_LIST:
            return tuple(item.strip() for item in text.split(",") if item.strip())
        parsed: Any = text
        if self.type == INT:
            if not _INTEGER.fullmatch(text):
                allowed = _spelled(self.choices) if self.choices else "an integer"
                raise InvalidSetting(self.name, value, allowed)
            parsed = int(text)
        if self.choices and parsed not in self.choices:
            raise InvalidSetting(self.name, value, _spelled(self.choices))
        return parsed

    @property
    def default_label(self) -> str:
        """The default as the README's table gives it."""
        if self.default is None:
            return "unset"
        if self.default in ("", ()):
            return "empty"
        if isinstance(self.default, bool):
            return "`1`" if self.default else "`0`"
        if isinstance(self.default, tuple):
            return f"`{','.join(self.default)}`"
        return f"`{self.default}`"


def _visible(name: str, devices: str, probes: str) -> Setting:
    return Setting(name, STR, None, f"which {devices} the vendor runtime shows; {probes} its "
                   "value when no device is visible", THIRD_PARTY)


SETTINGS: tuple[Setting, ...] = (
    # eagle-hal's own
    Setting("EAGLE_HAL_BACKEND", STR, "", "the backend every selection uses, by name (as "
            "`backend=` or `--backend`)", CORE),
    Setting("EAGLE_HAL_PLUGINS", COMMA_LIST, (), "only these backend plugins are loaded; "
            "the others are listed as not allowed", CORE),
    Setting("EAGLE_HAL_DISABLE", COMMA_LIST, (), "backend plugins not to load; "
            "`name@distribution` blocks one distribution's (resolves a name clash)", CORE),
    Setting("EAGLE_HAL_DEBUG", BOOL, False, "show a traceback for errors instead of one line",
            CORE),
    Setting("EAGLE_HAL_API_KEY", STR, None, "the key `eagle-hal serve` requires as "
            "`Authorization: Bearer KEY` (`--api-key-file` instead reads it from a file)", CORE),
    Setting("EAGLE_HAL_INTERPRETED_CONFORMANCE", BOOL, False, "the test suite also runs the "
            "ROCm and XPU backends' conformance through the interpreted Triton kernels "
            "(slow; needs `TRITON_INTERPRET=1`)", CORE),
    Setting("EAGLE_HAL_ROCM_AITER", INT, 0, "1: decode through aiter's `paged_attention_v1` "
            "where the GPU and the model's geometry allow", "eagle-hal-rocm", choices=(0, 1)),
    Setting("EAGLE_HAL_ROCM_WAVEFRONT_SIZE", INT, None, "the AMD GPU's wavefront size for "
            "the Triton launches, instead of what the device reports", "eagle-hal-rocm",
            choices=(32, 64)),
    Setting("EAGLE_HAL_MUSA_MATE", INT, 0, "1: causal attention through mate's "
            "`flash_attn_with_kvcache` where the GPU and the model's geometry allow",
            "eagle-hal-musa", choices=(0, 1)),
    # consulted, defined by other tools
    Setting("TRITON_INTERPRET", BOOL, False, "Triton runs kernels in its interpreter on CPU "
            "tensors; backends bound to the CPU then take their Triton paths", THIRD_PARTY),
    Setting("TORCH_DEVICE_BACKEND_AUTOLOAD", STR, "1", "torch imports the installed device "
            "extensions on `import torch` only when this is 1; a failed import names it",
            THIRD_PARTY),
    Setting("PYTEST_DISABLE_PLUGIN_AUTOLOAD", STR, "", "any value: pytest loads no plugin by "
            "entry point, so the conformance suite names its own with `-p`", THIRD_PARTY),
    Setting("HF_HUB_OFFLINE", BOOL, False, "model ids (`org/name[@revision]`) resolve from the "
            "Hugging Face cache only; one not cached is an error naming it", THIRD_PARTY),
    Setting("HF_HUB_CACHE", STR, None, "the Hugging Face cache model ids are fetched into "
            "(default: `$HF_HOME/hub`)", THIRD_PARTY),
    Setting("HF_HOME", STR, None, "the Hugging Face home; its `hub` folder is the cache "
            "(default: `$XDG_CACHE_HOME/huggingface`)", THIRD_PARTY),
    Setting("XDG_CACHE_HOME", STR, None, "where the Hugging Face home lies when `HF_HOME` is "
            "unset (default: `~/.cache`)", THIRD_PARTY),
    _visible("CUDA_VISIBLE_DEVICES", "NVIDIA GPUs (and AMD GPUs under ROCm)",
             "the cuda and rocm probes name"),
    _visible("HIP_VISIBLE_DEVICES", "AMD GPUs", "the rocm probe names"),
    _visible("ROCR_VISIBLE_DEVICES", "AMD GPUs", "the rocm probe names"),
    _visible("ZE_AFFINITY_MASK", "Intel GPUs", "the xpu probe names"),
    _visible("ASCEND_RT_VISIBLE_DEVICES", "Ascend NPUs", "the npu probe names"),
    _visible("MUSA_VISIBLE_DEVICES", "Moore Threads GPUs", "the musa probe names"),
)

_declared: dict[str, Setting] = {s.name: s for s in SETTINGS}
_lock = threading.Lock()


def declare(setting: Setting) -> Setting:
    """Add an out-of-tree plugin's variable (a visible-devices variable its probe names, a
    switch of its own) to the table. Declaring an equal setting again does nothing; another
    setting under a declared name is a ``ValueError``."""
    with _lock:
        known = _declared.get(setting.name)
        if known is not None and known != setting:
            raise ValueError(f"{setting.name} is already declared (by {known.owner})")
        _declared[setting.name] = setting
    return setting


def declared() -> tuple[Setting, ...]:
    """Every declared setting: the table, then what plugins declared, in order."""
    with _lock:
        return tuple(_declared.values())


def setting(name: str) -> Setting:
    """The declaration of ``name``; ``UnknownSetting`` when there is none."""
    try:
        return _declared[name]
    except KeyError:
        raise UnknownSetting(
            f"{name} is not a declared setting; declare it in eagle_hal.settings.SETTINGS "
            "(or with settings.declare) before reading it"
        ) from None


def get(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The value of the variable ``name`` in ``environ`` (default: ``os.environ``, read
    now), parsed by its declared type; its default when unset. ``InvalidSetting`` for a
    value the type does not allow, ``UnknownSetting`` for an undeclared ``name``."""
    declaration = setting(name)
    return declaration.parse((os.environ if environ is None else environ).get(name))


def visible_devices(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of a backend's visible-devices variable (``Capabilities.visible_devices_env``),
    ``None`` when unset. A plugin names that variable in its capabilities, which declares
    it: one the table does not list yet is declared here as a ``third-party`` ``str``, so
    that a probe reading it never raises."""
    if name not in _declared:
        with _lock:
            _declared.setdefault(name, _visible(name, "devices", "the backend's probe names"))
    return get(name, environ)


def triton_interpreted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether Triton runs its kernels in the interpreter (``TRITON_INTERPRET``): they
    then take CPU tensors, and bfloat16 ``tl.dot`` operands must be widened to float32 (the
    interpreter multiplies bfloat16 as raw 16-bit integers)."""
    return bool(get("TRITON_INTERPRET", environ))


def markdown_table(table: tuple[Setting, ...] = SETTINGS) -> str:
    """The README's table: variable, type, default, meaning, owner, one row per setting of
    ``table`` (default: the in-tree ``SETTINGS``; ``declared()`` adds what plugins
    declared)."""
    rows = ["| variable | type | default | meaning | owner |", "|---|---|---|---|---|"]
    rows += [f"| `{s.name}` | {s.type_label} | {s.default_label} | {s.meaning} | {s.owner} |"
             for s in table]
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table(declared()))
