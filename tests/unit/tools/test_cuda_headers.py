"""tools/cuda_headers.py, which `make dev` runs where nvcc lacks the assignment's CUDA headers:
from an nvidia wheel it unpacks the include folders alone, never the libraries; the wheels it
downloads are pyproject's `cuda-headers` extra."""
from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("cuda_headers", ROOT / "tools" / "cuda_headers.py")
assert spec is not None and spec.loader is not None
cuda_headers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cuda_headers)


def test_only_the_headers_of_a_wheel_are_unpacked(tmp_path: Path) -> None:
    wheel = tmp_path / "nvidia_cublas-13.0-py3-none-manylinux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name in ("nvidia/cu13/include/cublas_v2.h", "nvidia/cu13/include/cublas_api.h",
                     "nvidia/cu13/lib/libcublas.so.13", "nvidia/cu13/include/", "nvidia_cublas-13.0.dist-info/RECORD",
                     "nvidia/cu13/include/../lib/sneaky.h"):
            archive.writestr(name, "" if name.endswith("/") else f"// {name}\n")
    site = tmp_path / "site-packages"
    assert cuda_headers.unpack_headers(wheel, site) == 2
    assert sorted(p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file()) == [
        "nvidia/cu13/include/cublas_api.h", "nvidia/cu13/include/cublas_v2.h"]


def test_the_wheels_are_the_cuda_headers_extra() -> None:
    names = [spec.split(">")[0] for spec in cuda_headers.wheel_specs()]
    assert names == ["nvidia-cublas", "nvidia-curand"]
