"""NVIDIA driver ABI (RM escapes, UVM ioctls, classes, controls, methods, QMD) as cffi declarations and tables.

  >>> from ioctl_defs.nv import abi_for_version, status_name
  >>> abi_for_version("580.142").sizeof("NV_CHANNEL_ALLOC_PARAMS"), status_name(0x22)
  (368, 'NV_ERR_INVALID_CLASS')
"""
from ioctl_defs.nv.abi import NVABI, abi_for_version, parse_version, UnsupportedDriverVersion
from ioctl_defs.nv.status import NV_STATUS, status_name
from ioctl_defs.nv.classes import CLASSES, ARCHS, Arch, class_name, arch_from_classlist
from ioctl_defs.nv.ctrl import CTRL
from ioctl_defs.nv.ioctl import ESCAPES, UVM_IOCTLS
from ioctl_defs.nv.qmd import QMD, QMD_FIELDS, QMD_SIZE
from ioctl_defs.nv.methods import methods_for, method_header, gpfifo_entry
