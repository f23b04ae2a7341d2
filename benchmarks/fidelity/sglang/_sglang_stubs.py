"""The few stand-ins SGLang 0.5.23's sizing code needs to run on a CPU-only machine.

None of them touches a sizing figure; each replaces a query of hardware this machine does
not have, or a package the sizing code only imports:

* **triton**: SGLang's own stand-in (``sglang/_platform_stubs.py``
  ``install_platform_stubs``, which it installs on Apple Silicon), loaded by file path
  and run with the Apple Silicon checks answered yes, before ``sglang`` is imported.
* **torchvision**: imported (never used) by ``sglang/srt/configs/nano_nemotron_vl.py``
  through ``multimodal/internvl_utils.py``; a module whose every attribute is a stand-in
  (the same ``_MockModule``), installed after transformers has decided torchvision is
  absent (``is_torchvision_available``, lru-cached), so transformers keeps its own path.
* **the platform of an H200** (CUDA, SM 9.0, Hopper with CUDA >= 12.3, flashinfer):
  through SGLang's ``runtime_context.override_platform``, and ``current_platform``
  resolved to SGLang's ``CudaSRTPlatform`` (``platforms/__init__.py``
  ``_resolve_platform``) with ``torch.cuda.is_available`` answering yes only while it
  resolves; ``torch.cuda.get_device_name`` / ``get_device_capability`` answer "NVIDIA
  H200" / (9, 0) (the DSA hook asks torch directly), and so does SGLang's own
  ``get_device_capability`` (which asks ``torch.cuda.is_available()`` first).
* **memory_pool's CUDA flag** (``_is_cuda``, read once at import), yes as on the H200.
* **the meta device module**: SGLang's pools ask ``torch.get_device_module(device)`` for
  streams; pools are built on ``meta`` (shapes, no memory), whose module is no-op streams.
* the free-GPU-memory query, the WORLD group: per case in ``sglang_fidelity.py``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import platform
import sys
import sysconfig
import types
from typing import Any

import torch

H200_FACTS: dict[str, Any] = {
    "is_cuda": True,
    "is_hip": False,
    "is_npu": False,
    "is_xpu": False,
    "is_musa": False,
    "is_mps": False,
    "is_sm90": True,
    "is_sm100": False,
    "is_sm100_or_sm110": False,
    "is_sm110": False,
    "is_sm120": False,
    "is_blackwell": False,
    "is_hopper_with_cuda_12_3": True,
    "has_amx": False,
    "has_flashinfer": True,
    "device_sm": 90,
    "device_capability": (9, 0),
}


def _sglang_stub_module() -> types.ModuleType:
    """``sglang/_platform_stubs.py``, loaded without importing the ``sglang`` package."""
    name = "_sglang_platform_stubs"
    if name in sys.modules:
        return sys.modules[name]
    path = os.path.join(sysconfig.get_paths()["purelib"], "sglang", "_platform_stubs.py")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _stub_triton(stubs: types.ModuleType) -> None:
    saved = (sys.platform, platform.machine, torch.backends.mps.is_available)
    sys.platform, platform.machine = "darwin", (lambda: "arm64")  # type: ignore[assignment]
    torch.backends.mps.is_available = lambda: True
    try:
        stubs.install_platform_stubs()
    finally:
        sys.platform, platform.machine, torch.backends.mps.is_available = saved  # type: ignore[assignment]


def _stub_torchvision(stubs: types.ModuleType) -> None:
    import transformers.utils.import_utils as hf_imports

    assert not hf_imports.is_torchvision_available(), "a real torchvision is installed"

    class _Finder:
        def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
            if fullname != "torchvision" and not fullname.startswith("torchvision."):
                return None
            if fullname in sys.modules:
                return sys.modules[fullname].__spec__
            module = stubs._make_mock(fullname)
            parent, _, child = fullname.rpartition(".")
            if parent in sys.modules:
                setattr(sys.modules[parent], child, module)
            return module.__spec__

    sys.meta_path.insert(0, _Finder())


def _meta_device_module() -> None:
    module = types.ModuleType("torch.meta")

    class Stream:
        def wait_stream(self, other: Any) -> None:
            del other

        def synchronize(self) -> None:
            pass

    module.Stream = Stream  # type: ignore[attr-defined]
    module.current_stream = lambda *a, **k: Stream()  # type: ignore[attr-defined]
    module.stream = lambda s=None: contextlib.nullcontext()  # type: ignore[attr-defined]
    module.synchronize = lambda *a, **k: None  # type: ignore[attr-defined]
    module.empty_cache = lambda: None  # type: ignore[attr-defined]
    torch._register_device_module("meta", module)


def _cuda_platform() -> Any:
    torch.cuda.get_device_name = lambda *a, **k: "NVIDIA H200"  # type: ignore[assignment]
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)  # type: ignore[assignment]
    saved = torch.cuda.is_available
    torch.cuda.is_available = lambda: True  # type: ignore[assignment]
    try:
        from sglang.srt.runtime_context import override_platform

        override_platform(**H200_FACTS).install()
        import sglang.srt.platforms as platforms
        from sglang.srt.utils.common import get_device

        plat = platforms.current_platform
        assert get_device() == "cuda"  # lru-cached: every later caller gets "cuda"
    finally:
        torch.cuda.is_available = saved  # type: ignore[assignment]
    return plat


def install() -> Any:
    """Install every stand-in (idempotent); returns SGLang's resolved platform."""
    stubs = _sglang_stub_module()
    if "triton" not in sys.modules:
        _stub_triton(stubs)
    if "torchvision" not in sys.modules:
        _stub_torchvision(stubs)
    with contextlib.suppress(RuntimeError):  # already registered
        _meta_device_module()
    plat = _cuda_platform()
    register_mxfp4()
    skip_warmups()
    h200_device_capability()
    cuda_memory_pool()
    return plat


def cuda_memory_pool() -> None:
    """``mem_cache/memory_pool.py`` reads ``_is_cuda = is_cuda()`` (``torch.cuda.is_available()``)
    once at import, before any case: it answers yes, as on the H200 above. Sizing reads it
    in ``get_minimax_sparse_index_dtype`` (an fp8_e4m3 KV cache keeps MiniMax-M3's index
    keys in fp8 on CUDA SM90); elsewhere it picks CUDA store kernels, which no case runs
    (the pools are built, never written)."""
    from sglang.srt.mem_cache import memory_pool

    memory_pool._is_cuda = True  # type: ignore[attr-defined]


def register_mxfp4() -> None:
    """gpt-oss's ``mxfp4``: ``layers/quantization/__init__.py`` registers ``Mxfp4Config``
    at import only when ``is_cpu() or is_cuda() or ...`` held then (before the platform
    above answered for an H200)."""
    from sglang.srt.layers import quantization as q
    from sglang.srt.layers.quantization.mxfp4 import Mxfp4Config

    q.BASE_QUANTIZATION_METHODS.setdefault("mxfp4", Mxfp4Config)
    q.QUANTIZATION_METHODS.setdefault("mxfp4", Mxfp4Config)


def skip_warmups() -> None:
    """The Triton copy-kernel warm-ups the pools run once built (they read the buffers'
    strides back with ``.item()``, which a meta tensor has not): no-ops. They size
    nothing (``memory_pool.py`` ``MHATokenToKVPool._init_kv_copy_and_warmup``,
    ``MambaPool._warmup_fused_copy_slot_kernel``)."""
    from sglang.srt.mem_cache import memory_pool

    for klass in vars(memory_pool).values():
        if isinstance(klass, type):
            for name in ("_init_kv_copy_and_warmup", "_warmup_fused_copy_slot_kernel"):
                if name in vars(klass):
                    setattr(klass, name, lambda self: None)


def h200_device_capability() -> None:
    """``utils/common.py`` ``get_device_capability`` asks ``torch.cuda.is_available()``
    itself (not the platform facts), e.g. for GPTQ's Marlin conversion
    (``layers/quantization/marlin_utils.py``): it answers (9, 0) in every module that
    imported it."""
    # load the modules that import get_device_capability before rebinding it
    import sglang.srt.configs.model_config
    import sglang.srt.layers.quantization  # noqa: F401
    from sglang.srt.utils import common

    original = common.get_device_capability

    def capability(device_id: int = 0) -> tuple[int, int]:
        del device_id
        return (9, 0)

    for module in list(sys.modules.values()):
        if getattr(module, "get_device_capability", None) is original:
            module.get_device_capability = capability  # type: ignore[attr-defined]


def record_host_pools() -> list[tuple[str, int, int]]:
    """HiCache's host pools book their buffers instead of pinning host memory of their
    whole size: ``pool_host/base.py`` ``HostKVCache._allocate_host_buffer`` appends
    ``(pool_label, tokens, bytes per token)`` to the list returned and builds the buffers
    (``init_kv_buffer``) on the meta device (``pool_host/common.py`` ``ALLOC_MEMORY_FUNCS``);
    every size computation before it (``HostKVCache.__init__``) runs as SGLang wrote it.
    The check of this machine's free host memory is skipped (the deployment's host is
    not this one)."""
    from sglang.srt.mem_cache.pool_host import common as host_common
    from sglang.srt.mem_cache.pool_host.base import HostKVCache

    def meta_alloc(dims: Any, dtype: Any, **kwargs: Any) -> Any:
        del kwargs
        return torch.empty(dims, dtype=dtype, device="meta")

    from sglang.srt.mem_cache.pool_host import mamba as host_mamba

    # MambaPoolHost.__init__ checks this machine's free host memory itself
    host_mamba.host_memory_budget_bytes = lambda requested: requested
    from sglang.srt.mem_cache.pool_host import dsa as host_dsa

    host_dsa.host_memory_budget_bytes = lambda requested: requested  # DSAIndexerPoolHost
    from sglang.srt.mem_cache.pool_host import mha as host_mha

    # MHATokenToKOnlyPoolHost (MiniMax-M3's index-K host pool) checks it too
    host_mha.host_memory_budget_bytes = lambda requested: requested
    host_common.ALLOC_MEMORY_FUNCS.clear()
    host_common.ALLOC_MEMORY_FUNCS.default_factory = lambda: meta_alloc
    booked: list[tuple[str, int, int]] = []

    def book(self: Any) -> None:
        booked.append((self.pool_label, self.size, self.size_per_token))
        self.kv_buffer = self.init_kv_buffer()
        self.fd = None

    HostKVCache._allocate_host_buffer = book
    return booked
