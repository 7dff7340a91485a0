"""The platforms hcqrt runs on: Linux on x86-64. Elsewhere the parts that cannot work refuse by name, at the first use,
instead of failing later with an unrelated error (a missing mmap constant on Windows, an ELF parse error on a macOS
object, an unknown relocation on an AArch64 one).

  >>> require_linux("the doctest", system="linux"); require_x86_64_linux("the doctest", system="linux", machine="x86_64")
  >>> require_x86_64_linux("the CPU backend", system="darwin", machine="arm64")
  Traceback (most recent call last):
  ...
  hcqrt.host.UnsupportedPlatform: the CPU backend needs Linux on x86-64; this is darwin on arm64 (its kernels are x86-64 ELF objects loaded by hcqrt's own loader)
"""
from __future__ import annotations
import platform, sys

X86_64 = ("x86_64", "AMD64")

class UnsupportedPlatform(RuntimeError):
  """hcqrt (or this part of it) does not run on this operating system or CPU."""

def require_linux(what: str, system: str | None = None) -> None:
  """Raise UnsupportedPlatform unless the OS is Linux: `what` reaches drivers through Linux's ioctls and mmaps."""
  system = sys.platform if system is None else system
  if not system.startswith("linux"):
    raise UnsupportedPlatform(f"{what} needs Linux; this is {system} (it talks to the Linux GPU drivers through ioctl and mmap)")

def require_x86_64_linux(what: str, system: str | None = None, machine: str | None = None) -> None:
  """Raise UnsupportedPlatform unless this is Linux on x86-64: `what` loads x86-64 ELF objects."""
  system, machine = sys.platform if system is None else system, platform.machine() if machine is None else machine
  if not system.startswith("linux") or machine not in X86_64:
    raise UnsupportedPlatform(f"{what} needs Linux on x86-64; this is {system} on {machine} (its kernels are x86-64 ELF objects loaded by hcqrt's own loader)")
