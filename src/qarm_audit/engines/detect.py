"""The machine qarm runs on: the engine release installed there and the GPU it shows.

Neither is a dependency. The engine's version is its distribution's metadata
(:mod:`importlib.metadata`; the engine is never imported); the GPU's compute capability comes
from NVML (``libnvidia-ml`` through :mod:`ctypes`), else ``nvidia-smi --query-gpu=compute_cap``.

Overrides, for CI and tests: ``QARM_GPU=none`` (no GPU detection), ``QARM_GPU=nvml`` or
``QARM_GPU=nvidia-smi`` (only that way), ``QARM_GPU=<gpu>`` (any ``--gpu`` value, taken as the
detected GPU); ``QARM_DETECT_ENGINE=0`` (no engine detection).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from dataclasses import dataclass
from importlib import metadata

from ..findings import Finding, finding
from .arms import parse_gpu
from .profile import BUILTIN, Profile, load_profile, modelled_releases, split_spec

GPU_ENV = "QARM_GPU"
ENGINE_ENV = "QARM_DETECT_ENGINE"
DISTRIBUTIONS = {"vllm": "vllm", "sglang": "sglang"}
"""Profile name -> the distribution whose version tells the installed release."""


@dataclass(frozen=True)
class EngineChoice:
    """Which release a profile is for, and why."""

    installed: str | None = None
    """The engine's version installed here (None: not installed, or not a built-in engine)."""
    release_from: str = "file"
    """``asked`` (``vllm==0.32.0``), ``installed``, ``newest`` (nothing installed, or an
    unmodelled release installed) or ``file`` (a user's profile)."""
    modelled: bool | None = None
    """Whether the installed release is modelled (None when none is installed)."""


def installed_version(name: str) -> str | None:
    """The installed version of the engine a built-in profile models, or None."""
    dist = DISTRIBUTIONS.get(name)
    if dist is None or os.environ.get(ENGINE_ENV, "1") == "0":
        return None
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def select_engine(spec: str) -> tuple[Profile, EngineChoice]:
    """The profile for ``spec`` (``vllm``, ``vllm==0.32.0`` or a file), with the installed
    release taking a bare name's place when it is modelled."""
    name, asked = split_spec(spec)
    if name not in BUILTIN:
        return load_profile(spec), EngineChoice()
    installed = installed_version(name)
    release = installed.split("+", 1)[0] if installed else None  # a local build: 0.33.0+cu129
    modelled = None if release is None else release in modelled_releases(name)
    if asked is not None:
        return load_profile(spec), EngineChoice(installed, "asked", modelled)
    if installed is not None and modelled:
        return load_profile(name, release), EngineChoice(installed, "installed", True)
    return load_profile(name), EngineChoice(installed, "newest", modelled)


def engine_notes(profile: Profile, choice: EngineChoice) -> list[Finding]:
    """What the report says about the installed engine."""
    if choice.installed is None:
        return []
    here = f"{profile.engine} {choice.installed} is installed here"
    release = choice.installed.split("+", 1)[0]
    if choice.release_from == "installed" or profile.version == f"v{release}":
        return [finding("engine-installed", f"{here}: the arm line is for its release")]
    listed = ", ".join(modelled_releases(profile.name))
    if not choice.modelled:
        why = f"and is not modelled (modelled: {listed})"
    else:
        why = "and another release was asked for"
    return [
        finding(
            "engine-release-not-modelled",
            f"{here} {why}: the arm line is for {profile.label}, not for the installed engine",
        )
    ]


def _nvml() -> int | None:
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    try:
        if lib.nvmlInit_v2() != 0:
            return None
        handle = ctypes.c_void_p()
        major, minor = ctypes.c_int(), ctypes.c_int()
        try:
            if lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) != 0:
                return None
            if lib.nvmlDeviceGetCudaComputeCapability(
                handle, ctypes.byref(major), ctypes.byref(minor)
            ):
                return None
            return major.value * 10 + minor.value
        finally:
            lib.nvmlShutdown()
    except AttributeError:
        return None


def _nvidia_smi() -> int | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run(
            [exe, "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    first = (done.stdout.strip().splitlines() or [""])[0].strip()
    if done.returncode != 0 or not first:
        return None
    try:
        return parse_gpu(first)
    except ValueError:
        return None


def detect_gpu() -> tuple[str | None, str]:
    """The GPU this machine shows, as a ``--gpu`` value (``sm90``), and how it was found."""
    how = os.environ.get(GPU_ENV, "").strip()
    if how.lower() == "none":
        return None, ""
    if how and how.lower() not in ("nvml", "nvidia-smi"):
        return how, GPU_ENV
    if how.lower() != "nvidia-smi":
        cap = _nvml()
        if cap is not None:
            return f"sm{cap}", "NVML"
    if how.lower() != "nvml":
        cap = _nvidia_smi()
        if cap is not None:
            return f"sm{cap}", "nvidia-smi"
    return None, ""
