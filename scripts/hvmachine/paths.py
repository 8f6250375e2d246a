"""Where the project and its cache are, and its one default guest kernel."""

from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_KERNEL_FILE = os.path.join(ROOT, "scripts", "default-kernel")


def cache_dir() -> str:
    """Everything downloaded or built: $HVSTOR_CACHE, else .cache in the project."""
    return os.environ.get("HVSTOR_CACHE") or os.path.join(ROOT, ".cache")


def default_kernel() -> str:
    """The guest kernel every command boots unless told otherwise: the one line of
    scripts/default-kernel, which the shell scripts read too. ValueError when it cannot."""
    try:
        with open(DEFAULT_KERNEL_FILE, encoding="utf-8") as f:
            name = f.read().strip()
    except OSError as e:
        raise ValueError(f"{DEFAULT_KERNEL_FILE}: cannot read the default kernel: {e.strerror}") from None
    if len(name.split()) != 1:
        raise ValueError(f"{DEFAULT_KERNEL_FILE}: wants one kernel name (as debian-6.12), holds '{name}'")
    return name
