"""hcqrt's user-facing package: `from frontend import Tensor, dtypes, Device, GlobalCounters`.

>>> from frontend import Tensor
>>> (Tensor([1, 2, 3]) * 2).tolist()
[2, 4, 6]
"""
from compiler.dtypes import dtypes, DType
from compiler.uop import Variable
from hcqrt.device import Device
from frontend.buffer import GlobalCounters
from frontend.tensor import Tensor
from frontend.jit import TinyJit
from frontend.context import Context
from frontend import nn, optim

__all__ = ["Context", "DType", "Device", "GlobalCounters", "Tensor", "TinyJit", "Variable", "dtypes", "nn", "optim"]
