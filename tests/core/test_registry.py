"""Tests for eagle_hal.registry: discovery through real dist-infos, failures, selection."""

from __future__ import annotations

import sys

import pytest
from eagle_hal.backend import API_VERSION
from eagle_hal.errors import (
    BackendConflict,
    BackendUnavailable,
    IncompatibleAPIVersion,
    InvalidDeviceString,
    PluginLoadError,
)
from eagle_hal.registry import PluginStatus


def _by_name(infos):
    return {info.name: info for info in infos}


def test_discovers_backend_with_distribution_and_version(fake_dists):
    """A plugin in a dist-info is listed with the distribution name and version it declares."""
    fake_dists.add_backend("alpha", dist="acme-alpha", version="3.1.4", device_types=("cpu",))
    (info,) = fake_dists.registry().backends()
    assert (info.name, info.distribution, info.version) == ("alpha", "acme-alpha", "3.1.4")
    assert info.available and info.status is PluginStatus.AVAILABLE
    assert info.device_types == ("cpu",)
    assert info.to_json()["api_version"] == f"{API_VERSION[0]}.{API_VERSION[1]}"


def test_discovery_is_lazy_and_probes_are_cached(fake_dists):
    """Nothing is imported before first use; probes run when asked, once; impl on select."""
    module = fake_dists.add_backend("alpha")
    impl_module = fake_dists.module_name("alpha_impl")
    registry = fake_dists.registry()
    assert module not in sys.modules
    registry.entries()
    assert sys.modules[module].PROBE_CALLS == 0
    assert impl_module not in sys.modules
    registry.backends()
    registry.backends()
    registry.select("cpu")
    assert sys.modules[module].PROBE_CALLS == 1
    assert impl_module in sys.modules


def test_plugin_raising_on_import_is_listed_and_isolated(fake_dists):
    """An import error is listed with its message; others stay usable; selecting it chains."""
    fake_dists.add_backend("good", device_types=("cpu",))
    fake_dists.add_backend("broken", dist="acme-broken", import_error="libacme.so: no such file")
    registry = fake_dists.registry()
    infos = _by_name(registry.backends())
    assert infos["good"].available
    broken = infos["broken"]
    assert broken.status is PluginStatus.LOAD_ERROR and not broken.available
    assert "libacme.so: no such file" in broken.reason and "acme-broken" in broken.reason
    assert registry.select("cpu").name == "good"
    with pytest.raises(PluginLoadError) as excinfo:
        registry.select("cpu", backend="broken")
    assert isinstance(excinfo.value.__cause__, ImportError)


def test_plugin_raising_in_probe_is_listed_and_isolated(fake_dists):
    """A raising probe is reported as a probe error, never skipped; selecting it chains."""
    fake_dists.add_backend("good", device_types=("cpu",))
    fake_dists.add_backend("flaky", device_types=("cpu",), priority=5, probe_error="driver hung")
    registry = fake_dists.registry()
    infos = _by_name(registry.backends())
    assert infos["flaky"].status is PluginStatus.PROBE_ERROR
    assert "driver hung" in infos["flaky"].reason
    assert registry.select("cpu").name == "good"  # the higher-priority broken one is passed over
    with pytest.raises(PluginLoadError) as excinfo:
        registry.select("cpu", backend="flaky")
    assert isinstance(excinfo.value.__cause__, RuntimeError)
    assert "driver hung" in str(excinfo.value.__cause__)


@pytest.mark.parametrize(
    "api_version",
    [(API_VERSION[0] + 1, 0), (API_VERSION[0], API_VERSION[1] + 1), (API_VERSION[0] - 1, 9)],
)
def test_incompatible_api_version_is_refused_naming_both(fake_dists, api_version):
    """A newer minor or another major is refused, the message naming both versions."""
    fake_dists.add_backend("future", device_types=("cpu",), api_version=api_version)
    fake_dists.add_backend("good", device_types=("cpu",))
    registry = fake_dists.registry()
    infos = _by_name(registry.backends())
    future = infos["future"]
    assert future.status is PluginStatus.INCOMPATIBLE_API and not future.available
    plugin, core = "{}.{}".format(*api_version), "{}.{}".format(*API_VERSION)
    assert plugin in future.reason and core in future.reason
    assert registry.select("cpu").name == "good"
    with pytest.raises(IncompatibleAPIVersion, match=plugin):
        registry.select("cpu", backend="future")


def test_older_minor_api_version_is_accepted(fake_dists):
    """A plugin written against an older minor of the same major is accepted."""
    fake_dists.add_backend("old", device_types=("cpu",), api_version=(API_VERSION[0], 0))
    (info,) = fake_dists.registry().backends()
    assert info.available


def test_conflict_names_both_distributions_and_can_be_resolved(fake_dists):
    """Two distributions claiming one name: both reported, selection refused, block fixes it."""
    fake_dists.add_backend("twin", dist="dist-one", version="1.0")
    fake_dists.add_backend("twin", dist="dist-two", version="2.3")
    fake_dists.add_backend("bystander")
    registry = fake_dists.registry()
    infos = registry.backends()
    twins = [info for info in infos if info.name == "twin"]
    assert {info.distribution for info in twins} == {"dist-one", "dist-two"}
    for info in twins:
        assert info.status is PluginStatus.CONFLICT
        assert "dist-one 1.0" in info.reason and "dist-two 2.3" in info.reason
    assert _by_name(infos)["bystander"].available
    with pytest.raises(BackendConflict):
        registry.select("cpu", backend="twin")
    resolved = fake_dists.registry(disable="twin@dist-two")
    assert resolved.select("cpu", backend="twin").descriptor.name == "twin"
    (kept,) = [i for i in resolved.backends() if i.name == "twin" and i.available]
    assert kept.distribution == "dist-one"
    other_side = fake_dists.registry(disable="twin@dist-one")
    assert other_side.select("cpu", backend="twin").descriptor.name == "twin"
    (kept,) = [i for i in other_side.backends() if i.name == "twin" and i.available]
    assert kept.distribution == "dist-two"


def _two_for_one_device(fake_dists):
    # Like CUDA and ROCm: both serve torch's "cuda"; only "beta" answers to "rocm"/"hip".
    fake_dists.add_backend(
        "alpha", device_types=("cuda",), priority=100, available_env="FAKE_ALPHA"
    )
    fake_dists.add_backend(
        "beta", device_types=("rocm", "hip", "cuda"), priority=110, available_env="FAKE_BETA"
    )


@pytest.mark.parametrize(
    ("alpha", "beta", "device", "expected"),
    [
        ("1", "1", "cuda:0", "beta"),  # both available: priority decides
        ("1", "0", "cuda:0", "alpha"),  # the probe decides
        ("0", "1", "cuda", "beta"),
        ("1", "1", "rocm:1", "beta"),  # only beta serves the alias
        ("1", "1", "hip", "beta"),
    ],
)
def test_probe_and_priority_choose_among_backends_of_one_device(
    fake_dists, monkeypatch, alpha, beta, device, expected
):
    """Several backends serving one device type: the available one of highest priority wins."""
    _two_for_one_device(fake_dists)
    monkeypatch.setenv("FAKE_ALPHA", alpha)
    monkeypatch.setenv("FAKE_BETA", beta)
    backend = fake_dists.registry().select(device)
    assert backend.name == expected
    assert backend.device_spec.torch_type == "cuda"
    assert str(backend.torch_device) == device.replace("rocm", "cuda").replace("hip", "cuda")


def test_unavailable_explains_every_candidate(fake_dists, monkeypatch):
    """No available candidate: the error names each candidate and why."""
    _two_for_one_device(fake_dists)
    monkeypatch.setenv("FAKE_ALPHA", "0")
    monkeypatch.setenv("FAKE_BETA", "0")
    with pytest.raises(BackendUnavailable) as excinfo:
        fake_dists.registry().select("cuda:0")
    message = str(excinfo.value)
    assert "alpha" in message and "FAKE_ALPHA is not 1" in message
    assert "beta" in message and "FAKE_BETA is not 1" in message
    with pytest.raises(BackendUnavailable, match="FAKE_BETA is not 1"):
        fake_dists.registry().select("rocm")


def test_forcing_a_backend(fake_dists, monkeypatch):
    """backend= and EAGLE_HAL_BACKEND override priority, and refuse a device not served."""
    _two_for_one_device(fake_dists)
    monkeypatch.setenv("FAKE_ALPHA", "1")
    monkeypatch.setenv("FAKE_BETA", "1")
    assert fake_dists.registry().select("cuda", backend="alpha").name == "alpha"
    env_forced = fake_dists.registry(environ={"EAGLE_HAL_BACKEND": "alpha"})
    assert env_forced.select("cuda:0").name == "alpha"
    with pytest.raises(BackendUnavailable, match="does not serve device 'rocm'"):
        fake_dists.registry().select("rocm", backend="alpha")
    with pytest.raises(BackendUnavailable, match="no backend named 'gamma'"):
        fake_dists.registry().select("cuda", backend="gamma")
    monkeypatch.setenv("FAKE_BETA", "0")
    with pytest.raises(BackendUnavailable, match="FAKE_BETA is not 1"):
        fake_dists.registry().select("cuda", backend="beta")


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_allow_list_loads_only_named_plugins(fake_dists, monkeypatch, how):
    """EAGLE_HAL_PLUGINS: others are listed as not allowed and never imported."""
    _two_for_one_device(fake_dists)
    monkeypatch.setenv("FAKE_ALPHA", "1")
    monkeypatch.setenv("FAKE_BETA", "1")
    if how == "argument":
        registry = fake_dists.registry(allow="alpha")
    else:
        registry = fake_dists.registry(environ={"EAGLE_HAL_PLUGINS": " alpha , "})
    assert registry.select("cuda").name == "alpha"
    infos = _by_name(registry.backends())
    assert infos["beta"].status is PluginStatus.NOT_ALLOWED
    assert "EAGLE_HAL_PLUGINS" in infos["beta"].reason
    assert fake_dists.module_name("beta") not in sys.modules


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_block_list_never_imports_a_blocked_plugin(fake_dists, how):
    """EAGLE_HAL_DISABLE: a blocked plugin is listed as blocked, not imported, not chosen."""
    fake_dists.add_backend("good", device_types=("cpu",))
    fake_dists.add_backend("broken", device_types=("cpu",), priority=9, import_error="boom")
    if how == "argument":
        registry = fake_dists.registry(disable=["broken"])
    else:
        registry = fake_dists.registry(environ={"EAGLE_HAL_DISABLE": "broken"})
    infos = _by_name(registry.backends())
    assert infos["broken"].status is PluginStatus.BLOCKED
    assert "EAGLE_HAL_DISABLE" in infos["broken"].reason
    assert fake_dists.module_name("broken") not in sys.modules
    assert registry.select("cpu").name == "good"
    with pytest.raises(BackendUnavailable, match="blocked"):
        registry.select("cpu", backend="broken")


def test_auto_prefers_an_accelerator_then_the_host(fake_dists, monkeypatch):
    """'auto' picks an available accelerator over the CPU, and falls back to the CPU."""
    fake_dists.add_backend("host", device_types=("cpu",), priority=1000)
    fake_dists.add_backend("accel", device_types=("fakeaccel",), available_env="FAKE_ACCEL")
    monkeypatch.setenv("FAKE_ACCEL", "1")
    chosen = fake_dists.registry().select("auto")
    assert chosen.name == "accel" and str(chosen.device_spec) == "fakeaccel"
    monkeypatch.setenv("FAKE_ACCEL", "0")
    chosen = fake_dists.registry().select("auto")
    assert chosen.name == "host" and str(chosen.device_spec) == "cpu"


def test_plugin_device_kinds_extend_the_device_strings(fake_dists):
    """A device type a plugin declares is accepted; an unknown one lists the accepted forms."""
    fake_dists.add_backend("accel", device_types=("fakeaccel",))
    registry = fake_dists.registry()
    assert registry.select("fakeaccel:3").device_spec.index == 3
    with pytest.raises(InvalidDeviceString, match=r"fakeaccel\[:N\]"):
        registry.select("nosuchdevice:0")
    with pytest.raises(BackendUnavailable, match="no installed backend serves device 'npu'"):
        registry.select("npu")


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("X = 1\n", "eagle_hal_backends"),  # no hook implementation
        (
            "from eagle_hal.hookspecs import hookimpl\n"
            "@hookimpl\ndef eagle_hal_backends():\n    return ['not a descriptor']\n",
            "not BackendDescriptor",
        ),
        (
            "from eagle_hal.hookspecs import hookimpl\n"
            "@hookimpl\ndef eagle_hal_backends():\n    raise KeyError('half-built')\n",
            "half-built",
        ),
    ],
)
def test_malformed_plugins_are_load_errors(fake_dists, source, fragment):
    """A module without the hook, with a bad return or a raising hook is a listed load error."""
    module = fake_dists.write_module("odd", source)
    fake_dists.add_dist("fake-odd", "0.1", {"odd": module})
    fake_dists.add_backend("good")
    infos = _by_name(fake_dists.registry().backends())
    assert infos["odd"].status is PluginStatus.LOAD_ERROR
    assert fragment in infos["odd"].reason
    assert infos["good"].available


def test_implementation_failing_to_import_raises_chained(fake_dists):
    """An implementation that cannot be imported fails selection with a chained error."""
    fake_dists.add_backend("hollow", implementation="no_such_module_for_eagle_hal:Backend")
    registry = fake_dists.registry()
    assert _by_name(registry.backends())["hollow"].available  # only selection imports it
    with pytest.raises(PluginLoadError) as excinfo:
        registry.select("cpu")
    assert isinstance(excinfo.value.__cause__, ModuleNotFoundError)


def test_an_llm_takes_a_backend_already_selected_on_its_own_device() -> None:
    """``LLM(backend=<Backend>)`` uses the instance as is (``generate`` and ``bench`` select
    once); a device string naming another device is refused before anything loads."""
    from eagle_hal.api import LLM, _given_backend
    from eagle_hal.errors import InvalidArgument
    from eagle_hal.registry import select_backend

    cpu = select_backend("cpu")
    # compared parsed: every spelling parse_device accepts for the CPU names this backend
    for device in ("auto", "cpu", "CPU", " cpu", "cpu:0", " Cpu:0 ", "AUTO"):
        assert _given_backend(cpu, device) is cpu
    assert _given_backend("cpu", "cpu") is None and _given_backend(None, "auto") is None
    for other in ("cuda:0", "CUDA:0", "rocm:0", "hip:0", "npu"):
        with pytest.raises(InvalidArgument, match=rf"device={other!r} .*cpu on cpu"):
            LLM(draft=None, device=other, backend=cpu)
