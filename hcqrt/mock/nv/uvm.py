"""The UVM side of the NV mock: /dev/nvidia-uvm.

UVM commands are plain integers; the kernel copies sizeof(params) in and out, returns 0 and puts the
status in params.rmStatus. Behaviour mirrored from nvidia-uvm (uvm.c, uvm_api.h): UVM_INITIALIZE must
come first on an fd (else NV_ERR_ILLEGAL_ACTION), MM_INITIALIZE is issued on a second fd naming the
first, GPUs and their RM vaspaces are registered by UUID, external ranges must be page aligned and
must not overlap (NV_ERR_UVM_ADDRESS_IN_USE), and MAP_EXTERNAL_ALLOCATION maps an RM memory object into
the registered vaspace at the range's address (the GPU VA equals the CPU VA the client chose).

Stricter rules, each with the real driver's status: MM_INITIALIZE answers NV_WARN_NOTHING_TO_DO (what
UVM does when its VA space needs no mm, e.g. without HMM/ATS -- a client must accept it);
REGISTER_GPU_VASPACE refuses a VA space that is not externally owned (nv_gpu_ops.c
nvGpuOpsDupAddressSpace: NV_ERR_INVALID_FLAGS); REGISTER_CHANNEL (uvm_user_channel.c) needs a registered
VA space (NV_ERR_INVALID_DEVICE), refuses a channel registered twice (NV_ERR_INVALID_CHANNEL) and carves the
channel's context buffers out of [base, base+length), which must be a free, page-aligned range
(NV_ERR_INVALID_ADDRESS); it binds the context only if the engine object exists (else the channel stays
unschedulable). External mappings must be aligned to the allocation's page size (NV_ERR_INVALID_ADDRESS),
and GPU-cacheable system memory is mapped GPU-cached (vmem.py) unless the mapping forces uncached.

Peers (MockNV.links, MOCKGPU_P2P): memory maps on a GPU only where its owning GPU is registered in the VA space
(system memory too); another GPU's video memory only where the pair is a peer in this VA space: an NVLink pair as soon as
both are registered, so is a BAR1 PCIe pair ("bar1"), a PCIe pair after UVM_ENABLE_PEER_ACCESS, which refuses an NVLink or
BAR1 pair (NV_ERR_INVALID_DEVICE) and a pair without a link (NV_ERR_NOT_SUPPORTED); see peer_enabled / enable_peer_access for the sources.
"""
from __future__ import annotations
import errno
from dataclasses import dataclass, field
from typing import Any
from ioctl_defs.nv.ioctl import UVM_IOCTLS, UVM_BY_CMD
from ioctl_defs.nv.status import NV_STATUS
from hcqrt.mock.nv.vmem import PAGE
from hcqrt.mock.nv.rm import RMError

S = NV_STATUS
UVM_INIT_FLAGS_MASK = 0x3   # UVM_INIT_FLAGS_DISABLE_HMM (1) | UVM_INIT_FLAGS_MULTI_PROCESS_SHARING_MODE (2); from uvm_ioctl.h, not in the JSON
# UvmGpuMappingType (Default, ReadWriteAtomic, ReadWrite, ReadOnly) and UvmGpuCachingType (Default, ForceUncached,
# ForceCached) counts and values, from uvm_types.h
MAPPING_TYPE_COUNT, CACHING_DEFAULT, CACHING_FORCE_UNCACHED, CACHING_FORCE_CACHED, CACHING_TYPE_COUNT = 4, 0, 1, 2, 3
CHANNEL_CTX_BYTES = 4 << 20     # what the mock's GR context buffers take in a registered channel's VA range
CHANNEL_CTX_ALIGN = 2 << 20

@dataclass
class UVMFile:
  initialized: bool = False
  flags: int = 0
  mm_of: int | None = None                          # MM_INITIALIZE: the uvm fd this one serves
  gpus: dict[bytes, dict] = field(default_factory=dict)       # uuid -> {'vaspace': RMObject | None}
  ranges: dict[int, int] = field(default_factory=dict)        # external range base -> length
  # (base, mapping GPU's uuid) -> (GPUVASpace, length, memory RMObject): an external range is mapped per GPU, and a
  # mapping on one GPU leaves the others' alone (uvm_map_external.c:867 unmaps overlaps on the mapping GPU only)
  maps: dict[tuple[int, bytes], tuple[Any, int, Any]] = field(default_factory=dict)
  channels: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
  channel_ranges: dict[int, tuple[int, Any]] = field(default_factory=dict)   # ctx-buffer VA -> (length, channel group)
  pcie_peers: set[frozenset[bytes]] = field(default_factory=set)  # GPU pairs UVM_ENABLE_PEER_ACCESS enabled in this VA space

class UVMError(Exception):
  def __init__(self, status: str, why: str = ""): super().__init__(f"{status}: {why}"); self.status = S[status]

class UVM:
  def __init__(self, rm: Any): self.rm = rm

  def uuid(self, u: Any) -> bytes: return bytes(self.rm.ffi.buffer(u.uuid, 16))

  def ioctl(self, fd: int, st: Any, request: int, argp: int) -> int:
    if st.uvm is None: st.uvm = UVMFile()
    if request not in UVM_BY_CMD: raise OSError(errno.EINVAL, f"unknown UVM command {request:#x}")
    name = UVM_BY_CMD[request]
    struct = UVM_IOCTLS[name][1]
    if struct is None:
      if name == "UVM_DEINITIALIZE": st.uvm.initialized = False
      return 0
    if not argp: raise OSError(errno.EFAULT, f"{name}: NULL params")
    p = self.rm.ffi.cast(f"{struct} *", argp)
    f: UVMFile = st.uvm
    try:
      if name == "UVM_INITIALIZE": self.initialize(f, p)
      elif name == "UVM_MM_INITIALIZE": self.mm_initialize(fd, f, p)
      elif not f.initialized: raise UVMError("NV_ERR_ILLEGAL_ACTION", "UVM_INITIALIZE must be the first ioctl on this fd")
      else: getattr(self, name[4:].lower())(f, p)
      p.rmStatus = S["NV_OK"]
    except UVMError as e: p.rmStatus = e.status
    except RMError as e: p.rmStatus = e.status
    return 0

  def mmap(self, fd, st, length, prot, flags, offset, addr) -> int:
    raise OSError(errno.EINVAL, "mmap of /dev/nvidia-uvm is not supported by the mock (use external ranges)")

  def close(self, fd: int, st: Any) -> None:
    f: UVMFile | None = st.uvm
    if f is None: return
    for key in list(f.maps): self._unmap(f, key)

  def forget_memory(self, mem: Any) -> None:
    """An RM memory object is being freed: drop UVM mappings of it (RM revokes them)."""
    for st in self.rm.files.values():
      if st.uvm is None: continue
      for key, (_vs, _ln, m) in list(st.uvm.maps.items()):
        if m is mem: self._unmap(st.uvm, key)

  # ---- commands ----
  def initialize(self, f: UVMFile, p: Any) -> None:
    if p.flags & ~UVM_INIT_FLAGS_MASK: raise UVMError("NV_ERR_INVALID_ARGUMENT", f"flags {p.flags:#x}")
    if f.initialized and p.flags != f.flags: raise UVMError("NV_ERR_INVALID_ARGUMENT", "re-initialized with different flags")
    if f.mm_of is not None: raise UVMError("NV_ERR_INVALID_STATE", "fd was used for MM_INITIALIZE")
    f.initialized, f.flags = True, p.flags

  def mm_initialize(self, fd: int, f: UVMFile, p: Any) -> None:
    other = self.rm.files.get(p.uvmFd)
    if other is None or other.kind != "uvm" or other.uvm is None or not other.uvm.initialized or p.uvmFd == fd:
      raise UVMError("NV_ERR_INVALID_ARGUMENT", f"uvmFd {p.uvmFd} is not an initialized /dev/nvidia-uvm fd")
    if f.initialized or f.mm_of is not None: raise UVMError("NV_ERR_INVALID_STATE", "fd already initialized")
    if not self.rm.uvm_mm_enabled: raise UVMError("NV_WARN_NOTHING_TO_DO", "this VA space does not need an mm (no HMM/ATS)")
    f.mm_of = p.uvmFd

  def register_gpu(self, f: UVMFile, p: Any) -> None:
    u = self.uuid(p.gpu_uuid)
    if all(u != g.uuid for g in self.rm.gpus): raise UVMError("NV_ERR_GPU_UUID_NOT_FOUND", u.hex())
    # registered twice in one VA space -> NV_ERR_INVALID_DEVICE (OGKM@595.45.04 kernel-open/nvidia-uvm/uvm_va_space.c:769-771)
    if u in f.gpus: raise UVMError("NV_ERR_INVALID_DEVICE", "GPU already registered in this VA space")
    if p.rmCtrlFd != -1: self.rm.client(p.hClient)   # with an RM fd, the client must exist
    f.gpus[u] = {"vaspace": None}
    p.numaEnabled, p.numaNodeId = 0, -1

  def unregister_gpu(self, f: UVMFile, p: Any) -> None:
    u = self.uuid(p.gpu_uuid)
    if u not in f.gpus: raise UVMError("NV_ERR_INVALID_DEVICE", "GPU not registered")
    # its own mappings go, and so do other GPUs' mappings of memory it owns (uvm_va_range.c:1098-1121
    # va_range_unregister_gpu_external: ext_map->owning_gpu == gpu), then its enabled peer pairs (uvm_va_space.c:351-358)
    ix = self._index(u)
    for key, (_vs, _ln, mem) in list(f.maps.items()):
      if key[1] == u or mem.data.get("gpu") == ix: self._unmap(f, key)
    f.pcie_peers = {pr for pr in f.pcie_peers if u not in pr}
    del f.gpus[u]

  def _gpu(self, f: UVMFile, u: Any) -> dict:
    key = self.uuid(u)
    if key not in f.gpus: raise UVMError("NV_ERR_INVALID_DEVICE", f"GPU {key.hex()} is not registered with UVM")
    return f.gpus[key]

  def register_gpu_vaspace(self, f: UVMFile, p: Any) -> None:
    g = self._gpu(f, p.gpuUuid)
    if g["vaspace"] is not None: raise UVMError("NV_ERR_INVALID_DEVICE", "GPU already has a registered vaspace")
    ctl = self.rm.files.get(p.rmCtrlFd)
    if ctl is None or ctl.kind != "ctl": raise UVMError("NV_ERR_INVALID_ARGUMENT", f"rmCtrlFd {p.rmCtrlFd} is not /dev/nvidiactl")
    vso = self.rm.obj(p.hClient, p.hVaSpace, ("vaspace",), missing="NV_ERR_OBJECT_NOT_FOUND")
    if not vso.data.get("external"): raise UVMError("NV_ERR_INVALID_FLAGS", "the VA space was not allocated IS_EXTERNALLY_OWNED")
    g["vaspace"] = vso

  def unregister_gpu_vaspace(self, f: UVMFile, p: Any) -> None:
    g = self._gpu(f, p.gpuUuid)
    if g["vaspace"] is None: raise UVMError("NV_ERR_INVALID_DEVICE", "no vaspace registered")
    g["vaspace"] = None

  def _in_use(self, f: UVMFile, base: int, ln: int) -> tuple[int, int] | None:
    for b, l in [*f.ranges.items(), *((b, l) for b, (l, _) in f.channel_ranges.items())]:
      if b < base + ln and base < b + l: return b, l
    return None

  def register_channel(self, f: UVMFile, p: Any) -> None:
    g = self._gpu(f, p.gpuUuid)
    if g["vaspace"] is None: raise UVMError("NV_ERR_INVALID_DEVICE", "GPU has no registered VA space")
    ch = self.rm.obj(p.hClient, p.hChannel, ("channel",), missing="NV_ERR_OBJECT_NOT_FOUND")
    if ch.data["vaspace"] is not g["vaspace"]: raise UVMError("NV_ERR_INVALID_CHANNEL", "the channel uses another VA space")
    if (p.hClient, p.hChannel) in f.channels: raise UVMError("NV_ERR_INVALID_CHANNEL", "channel already registered")
    engine_obj = any(c.kind in ("compute", "copy") for c in ch.children)
    gr = ch.data["engine"] == 1   # only GR channels have context buffers to map (CE channels: none, base/length ignored)
    if gr:
      if p.base % PAGE or p.length % PAGE or p.length == 0 or p.base + p.length < p.base: raise UVMError("NV_ERR_INVALID_ADDRESS", f"channel range {p.base:#x}+{p.length:#x}")
      grp = ch.parent if ch.parent.kind == "group" else ch
      if not any(owner is grp for _, owner in f.channel_ranges.values()):   # context buffers are shared within a TSG
        va = (p.base + CHANNEL_CTX_ALIGN - 1) // CHANNEL_CTX_ALIGN * CHANNEL_CTX_ALIGN
        while va + CHANNEL_CTX_BYTES <= p.base + p.length and (hit := self._in_use(f, va, CHANNEL_CTX_BYTES)) is not None:
          va = (hit[0] + hit[1] + CHANNEL_CTX_ALIGN - 1) // CHANNEL_CTX_ALIGN * CHANNEL_CTX_ALIGN
        if va + CHANNEL_CTX_BYTES > p.base + p.length:
          raise UVMError("NV_ERR_INVALID_ADDRESS", f"no free {CHANNEL_CTX_BYTES:#x} bytes for the context buffers in {p.base:#x}+{p.length:#x}")
        f.channel_ranges[va] = (CHANNEL_CTX_BYTES, grp)
    f.channels[(p.hClient, p.hChannel)] = (p.base, p.length)
    ch.data["uvm_bound"] = engine_obj or not gr

  def unregister_channel(self, f: UVMFile, p: Any) -> None:
    if f.channels.pop((p.hClient, p.hChannel), None) is None: raise UVMError("NV_ERR_INVALID_CHANNEL", "channel not registered")
    ch = self.rm.clients.get(p.hClient, {}).get(p.hChannel)
    if ch is not None: ch.data["uvm_bound"] = False

  def create_external_range(self, f: UVMFile, p: Any) -> None:
    base, ln = p.base, p.length
    if base % PAGE or ln % PAGE or ln == 0 or base + ln > 1 << 57: raise UVMError("NV_ERR_INVALID_ADDRESS", f"{base:#x}+{ln:#x}")
    if (hit := self._in_use(f, base, ln)) is not None:
      raise UVMError("NV_ERR_UVM_ADDRESS_IN_USE", f"{base:#x}+{ln:#x} overlaps {hit[0]:#x}+{hit[1]:#x}")
    f.ranges[base] = ln

  def _range_of(self, f: UVMFile, base: int, ln: int) -> int:
    for b, l in f.ranges.items():
      if b <= base and base + ln <= b + l: return b
    raise UVMError("NV_ERR_INVALID_ADDRESS", f"{base:#x}+{ln:#x} is not inside an external range")

  def map_external_allocation(self, f: UVMFile, p: Any) -> None:
    base, ln, off = p.base, p.length, p.offset
    if base % PAGE or ln % PAGE or off % PAGE or ln == 0: raise UVMError("NV_ERR_INVALID_ADDRESS", f"{base:#x}+{ln:#x} offset {off:#x}")
    self._range_of(f, base, ln)
    n = p.gpuAttributesCount
    if n == 0 or n > len(p.perGpuAttributes): raise UVMError("NV_ERR_INVALID_ARGUMENT", f"gpuAttributesCount {n}")
    ctl = self.rm.files.get(p.rmCtrlFd)
    if ctl is None or ctl.kind != "ctl": raise UVMError("NV_ERR_INVALID_ARGUMENT", f"rmCtrlFd {p.rmCtrlFd} is not /dev/nvidiactl")
    mem = self.rm.obj(p.hClient, p.hMemory, ("sysmem", "vidmem", "osdesc"), missing="NV_ERR_OBJECT_NOT_FOUND")
    if off + ln > mem.data["size"]: raise UVMError("NV_ERR_INVALID_LIMIT", f"offset {off:#x}+{ln:#x} beyond the {mem.data['size']:#x}-byte allocation")
    page = mem.data.get("page", PAGE)
    if (base | ln | off) % page:
      raise UVMError("NV_ERR_INVALID_ADDRESS", f"{base:#x}+{ln:#x} offset {off:#x} is not aligned to the allocation's {page:#x}-byte pages")
    for i in range(n):
      a = p.perGpuAttributes[i]
      if a.gpuMappingType >= MAPPING_TYPE_COUNT or a.gpuCachingType >= CACHING_TYPE_COUNT:
        raise UVMError("NV_ERR_INVALID_ARGUMENT", f"gpuMappingType {a.gpuMappingType} / gpuCachingType {a.gpuCachingType}")
      cached = mem.kind == "sysmem" and (a.gpuCachingType == CACHING_FORCE_CACHED or
                                         (a.gpuCachingType == CACHING_DEFAULT and mem.data.get("gpu_cacheable", False)))
      g = self._gpu(f, p.perGpuAttributes[i].gpuUuid)
      if g["vaspace"] is None: raise UVMError("NV_ERR_INVALID_DEVICE", "GPU has no registered vaspace")
      # the GPU that owns the allocation (system memory too: it was allocated under a GPU's device) must be registered
      # in this VA space, else NV_ERR_INVALID_DEVICE (OGKM@595.45.04 kernel-open/nvidia-uvm/uvm_map_external.c:648-652,
      # set_ext_gpu_map_location); another GPU's video memory maps only where peer access is enabled in this VA space
      # (:661-667: owning_gpu != mapping_gpu and not sysmem -> uvm_va_space_peer_enabled; see peer_enabled).
      owner, mapper = mem.data.get("gpu"), self.rm.gpu_of(g["vaspace"]).index
      if owner is not None and self.rm.gpus[owner].uuid not in f.gpus:
        raise UVMError("NV_ERR_INVALID_DEVICE", f"the allocation's GPU {owner} is not registered in this UVM VA space")
      if mem.kind == "vidmem" and owner != mapper and not self.peer_enabled(f, owner, mapper):
        raise UVMError("NV_ERR_INVALID_DEVICE", f"video memory of GPU {owner} mapped on GPU {mapper} without peer access")
      if owner is not None and owner != mapper: self.rm.log.append(("peer_map", {"owner": owner, "gpu": mapper, "va": base, "kind": mem.kind}))
      vs = g["vaspace"].data["va"]
      key = (base, self.uuid(p.perGpuAttributes[i].gpuUuid))
      if key in f.maps: self._unmap(f, key)   # remapping on the same GPU replaces its old mapping
      try: vs.map(base, ln, mem.data["host"] + off, gpu_cached=cached)
      except ValueError as e: raise UVMError("NV_ERR_UVM_ADDRESS_IN_USE", str(e)) from None
      f.maps[key] = (vs, ln, mem)

  def _unmap(self, f: UVMFile, key: tuple[int, bytes]) -> None:
    vs, _ln, _mem = f.maps.pop(key)
    try: vs.unmap(key[0])
    except KeyError: pass

  def unmap_external(self, f: UVMFile, p: Any) -> None:
    self._gpu(f, p.gpuUuid)
    if (key := (p.base, self.uuid(p.gpuUuid))) not in f.maps: raise UVMError("NV_ERR_INVALID_ADDRESS", f"nothing mapped at {p.base:#x} on that GPU")
    self._unmap(f, key)

  def free(self, f: UVMFile, p: Any) -> None:
    if p.base not in f.ranges: raise UVMError("NV_ERR_INVALID_ADDRESS", f"no range at {p.base:#x}")
    ln = f.ranges.pop(p.base)
    for key in [k for k in f.maps if p.base <= k[0] < p.base + ln]: self._unmap(f, key)

  # ---- peers (OGKM@595.45.04 kernel-open/nvidia-uvm) ----
  def _index(self, u: bytes) -> int: return next(g.index for g in self.rm.gpus if g.uuid == u)

  def uvm_link(self, a: int, b: int) -> str:
    """The pair's link as UVM sees it. UVM before 590 has no BAR1 peer type: nvGpuOpsGetP2PCaps reports a BAR1 pair as
    UVM_LINK_TYPE_PCIE (OGKM@580.142 src/nvidia/src/kernel/rmapi/nv_gpu_ops.c:3259, 535/570 alike), so it is a plain
    PCIe peer that needs ENABLE (580.142 uvm_gpu.c:2606). UVM_LINK_TYPE_PCIE_BAR1 first appears in 590.44.01
    (nv_gpu_ops.c:3281), together with the registration-time enable (uvm_va_space.c bar1_peers)."""
    link = self.rm.link(a, b)
    # UVM gives a pair peer access only when RM reports both READS and WRITES (OGKM@595.45.04 nv_gpu_ops.c:3026-3034
    # getSystemP2PCaps accessSupported, "Bug 1768805: Check both reads and writes"; :3196/:3203 p2pLink stays
    # UVM_LINK_TYPE_NONE without it; the same code in OGKM@580.142 at :3022-3030 and :3180/:3187), so a writes-only pair
    # is no peer pair at all for UVM
    if link == "writes": return "none"
    return "pcie" if link == "bar1" and int(self.rm.version.split(".")[0]) < 590 else link

  def peer_enabled(self, f: UVMFile, a: int, b: int) -> bool:
    """uvm_va_space_peer_enabled for GPUs a and b, both registered in this VA space: an NVLink pair is enabled as soon as
    its second GPU registers (uvm_va_space.c:98-118 register_gpu_peers: "Enable NVLINK, BAR1 and SMC peers"), on 590+ a
    BAR1 pair too (:108-111 uvm_parent_gpus_are_bar1_peers; before 590 it is a PCIe pair: uvm_link), a PCIe pair only through UVM_ENABLE_PEER_ACCESS (uvm_gpu.c:2686-2688
    "PCIe peers need to be explicitly enabled": only PCIe and NONE are skipped at registration)."""
    ua, ub = self.rm.gpus[a].uuid, self.rm.gpus[b].uuid
    if ua not in f.gpus or ub not in f.gpus: return False
    return self.uvm_link(a, b) in ("nvlink", "bar1") or frozenset((ua, ub)) in f.pcie_peers

  def enable_peer_access(self, f: UVMFile, p: Any) -> None:
    ua, ub = self.uuid(p.gpuUuidA), self.uuid(p.gpuUuidB)
    self.rm.log.append(("UVM_ENABLE_PEER_ACCESS", {"a": ua, "b": ub}))
    # both registered in this VA space and two different GPUs, else NV_ERR_INVALID_DEVICE (uvm_va_space.c:1241-1248
    # retain_pcie_peers_from_uuids)
    if ua not in f.gpus or ub not in f.gpus or ua == ub:
      raise UVMError("NV_ERR_INVALID_DEVICE", "peer access needs two different GPUs registered in this VA space")
    link = self.uvm_link(self._index(ua), self._index(ub))
    # no link: peers_retain -> create_parent_p2p_object (uvm_gpu.c:2332) -> nvGpuOpsP2pObjectCreate refuses a pair RM
    # gives no P2P access with NV_ERR_NOT_SUPPORTED (src/nvidia/src/kernel/rmapi/nv_gpu_ops.c:11241-11242); an NVLink or
    # (590+) BAR1 pair is no UVM_GPU_LINK_PCIE pair -> NV_ERR_INVALID_DEVICE (uvm_gpu.c:3143-3146
    # uvm_gpu_retain_pcie_peer_access); a pair already enabled -> NV_ERR_INVALID_DEVICE (uvm_va_space.c:2010-2013)
    if link == "none": raise UVMError("NV_ERR_NOT_SUPPORTED", "the GPUs have no peer link")
    if link in ("nvlink", "bar1"): raise UVMError("NV_ERR_INVALID_DEVICE", f"a {link} pair is enabled at registration, not by ENABLE_PEER_ACCESS")
    if frozenset((ua, ub)) in f.pcie_peers: raise UVMError("NV_ERR_INVALID_DEVICE", "peer access is already enabled")
    f.pcie_peers.add(frozenset((ua, ub)))

  def disable_peer_access(self, f: UVMFile, p: Any) -> None:
    # unregistered, the same GPU, or not a PCIe pair enabled here -> NV_ERR_INVALID_DEVICE (uvm_va_space.c:2036-2051);
    # disable_peers unmaps what either GPU mapped of the other's memory
    ua, ub = self.uuid(p.gpuUuidA), self.uuid(p.gpuUuidB)
    if ua not in f.gpus or ub not in f.gpus or ua == ub or frozenset((ua, ub)) not in f.pcie_peers:
      raise UVMError("NV_ERR_INVALID_DEVICE", "no PCIe peer access enabled between these GPUs in this VA space")
    f.pcie_peers.discard(frozenset((ua, ub)))
    pair = {self._index(ua), self._index(ub)}
    for key, (_vs, _ln, mem) in list(f.maps.items()):
      if mem.kind == "vidmem" and {mem.data.get("gpu"), self._index(key[1])} == pair: self._unmap(f, key)
