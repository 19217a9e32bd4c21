"""A folder made read-only for one command, for the tests of what the CLI says then."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def read_only_run(folder: Path, argv: list[str], env: dict[str, str]
                  ) -> subprocess.CompletedProcess:
    """`argv` with `folder` read-only: by its mode bits, or for root (whom mode bits do not
    stop) as a read-only bind mount in a private mount namespace (unshare)."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            return subprocess.run(argv, env=env, capture_output=True, text=True)
        finally:
            folder.chmod(0o755)
    if shutil.which("unshare") is None:
        pytest.skip("running as root without unshare: no way to make a folder read-only")
    script = (f'mount --bind "{folder}" "{folder}" && '
              f'mount -o remount,bind,ro "{folder}" && exec "$@"')
    return subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", *argv], env=env,
                          capture_output=True, text=True)
