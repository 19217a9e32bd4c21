"""How fast and in how little memory hostile YAML is refused (issue 25: a billion-laughs file
under 1 s and 100 MB).

    python -m benchmarks.hostile_inputs

For each input: the whole `shardsim run FILE --json` command (interpreter start and imports
included) in a fresh process, its wall time and peak resident memory (ru_maxrss of the
child), and the exit status, which must be 2.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAUGHS = "".join(
    f"{b}: &{b} [" + ",".join([f"*{a}"] * 9 if a else ['"lol"'] * 9) + "]\n"
    for a, b in zip(["", *"abcdefgh"], "abcdefghi"))


def inputs(folder: Path) -> dict[str, Path]:
    tiny = (ROOT / "scenarios" / "tiny-cpu.yaml").read_text()
    files = {
        "billion laughs (9 levels, 10 lines)": LAUGHS,
        "billion laughs inside a scenario": tiny + "extra:\n" + textwrap.indent(LAUGHS, "  "),
        "2 MB scenario": tiny + "extra:\n" + ("  - [" + ",".join(["1"] * 240) + "]\n") * 4200,
        "1 MB of 500k flow scalars": tiny + "extra:\n" + (
            "  - [" + ",".join(["1"] * 240) + "]\n") * 2050,
    }
    out = {}
    for i, (name, text) in enumerate(files.items()):
        out[name] = folder / f"hostile{i}.yaml"
        out[name].write_text(text)
    return out


def measure(path: Path) -> tuple[float, float, int]:
    """(wall s, peak MB, exit status) of `shardsim run path --json` in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
            "r = subprocess.run([sys.executable, '-m', 'simulator', 'run', sys.argv[1], "
            "'--json'], capture_output=True); print(time.perf_counter() - t, "
            "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, r.returncode)")
    out = subprocess.run([sys.executable, "-c", code, str(path)], env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), float(out[1]), int(out[2])


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in inputs(Path(tmp)).items():
            wall, peak, status = measure(path)
            size = path.stat().st_size
            print(f"{name} ({size:,} bytes): exit {status}, {wall:.2f} s, {peak:.0f} MB")
    print(f"(for scale: `import simulator.cli` alone; cores: {os.cpu_count()})")
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import simulator.cli"], check=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    print(f"interpreter start and imports: {time.perf_counter() - t:.2f} s, "
          f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
