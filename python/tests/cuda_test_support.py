"""What the CUDA test modules share: torch (None without it), the markers
of tests that need a GPU or the compiler, and host arrays on the device in
the GPU programs' element types."""

import numpy as np
import pytest

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

HAVE_CUDA = torch is not None and torch.cuda.is_available()
cuda = pytest.mark.cuda
needs_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="torch.cuda.is_available() is False")


def needs_compiler(spin):
    """Skips a test where spin was built without the compiler."""
    return pytest.mark.skipif(not spin.has_compiler,
                              reason="spin built without the compiler")


def to_device(array, fmt=None):
    """``array`` on the GPU: bf16 and fp8 bit patterns (uint16 / uint8) as
    torch.bfloat16 / torch.float8_e4m3fn, anything else as it is."""
    a = np.ascontiguousarray(array)
    if fmt == "bf16":
        t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    elif fmt == "fp8" and hasattr(torch, "float8_e4m3fn"):
        t = torch.from_numpy(a.view(np.uint8)).view(torch.float8_e4m3fn)
    else:
        t = torch.from_numpy(a)
    return t.cuda()
