"""Shared pytest fixtures: repository paths, the shared fixtures folder, the guest image."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DIR = REPO_ROOT.parent / "shared"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository root (holds ``arenas/``, ``verify/``, ``seasons/``)."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """``../shared`` beside the repository (spec, notes, fixtures); skips if absent."""
    if not (SHARED_DIR / "fixtures").is_dir():
        pytest.skip(f"shared reference folder not found at {SHARED_DIR}")
    return SHARED_DIR


@pytest.fixture(scope="session")
def guest_image():
    """The Debian territory guest image, built once and cached (``aoe image build``).

    Returns an ``aoe_tui.runtime.image.GuestImage``. Building takes about two
    minutes the first time on a new machine; later runs reuse the cache.
    """
    from aoe_tui.runtime.image import ensure_image

    return ensure_image()
