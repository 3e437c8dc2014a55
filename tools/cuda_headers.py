"""The CUDA headers the assignments include beyond the runtime (cublas_v2.h, curand_kernel.h),
for `make dev` and `make test`: nothing to do where nvcc finds them by itself (the system's
toolkit); otherwise the headers alone of the nvidia-cublas and nvidia-curand wheels (pyproject's
`cuda-headers` extra), unpacked into this interpreter's site-packages, where
worker.build.cuda_include_dirs finds them: about 3 MB instead of the wheels' 826 MiB of
libraries, which a build never links.

    python tools/cuda_headers.py [--nvcc NVCC]

Prints one line saying where the headers come from; exits 1 with pip's words if the download fails.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from worker.build import CUDA_HEADERS, toolkit_has_cuda_headers, wheel_include_dirs  # noqa: E402

# nvidia/cu13/include/cublas_v2.h (or one level deeper); no part starting with a dot: no `..`
HEADER_MEMBER = re.compile(r"^nvidia/[^/]+/(?:[^/]+/)?include/(?:[^/.][^/]*/)*[^/.][^/]*$")


def wheel_specs() -> list[str]:
    """The wheels of pyproject's `cuda-headers` extra (one place for their versions)."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["cuda-headers"]


def unpack_headers(wheel: Path, site_packages: Path) -> int:
    """Unpack the include folders of one nvidia wheel into site_packages: how many files."""
    with zipfile.ZipFile(wheel) as archive:
        members = [name for name in archive.namelist() if HEADER_MEMBER.match(name)]
        archive.extractall(site_packages, members)
    return len(members)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nvcc", default="nvcc")
    nvcc = parser.parse_args().nvcc
    if toolkit_has_cuda_headers(nvcc):
        print(f"CUDA headers: {nvcc}'s own")
        return
    if all(any((Path(d) / h).exists() for d in wheel_include_dirs()) for h in CUDA_HEADERS):
        print("CUDA headers: the nvidia wheels' (already here)")
        return
    site_packages = Path(sysconfig.get_paths()["purelib"])
    with tempfile.TemporaryDirectory(prefix="kg-cuda-wheels-") as folder:
        pip = subprocess.run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
                              "--only-binary=:all:", "-d", folder, *wheel_specs()], capture_output=True, text=True)
        if pip.returncode != 0:
            sys.exit(f"{pip.stdout[-3000:]}{pip.stderr[-3000:]}\ncould not download the CUDA header wheels (above)")
        files = sum(unpack_headers(wheel, site_packages) for wheel in sorted(Path(folder).glob("*.whl")))
    print(f"CUDA headers: {nvcc} lacks {' and '.join(CUDA_HEADERS)}; "
          f"unpacked the {files} headers of {' and '.join(s.split('>')[0] for s in wheel_specs())} (not their libraries)")


if __name__ == "__main__":
    main()
