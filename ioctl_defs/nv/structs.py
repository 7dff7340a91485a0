"""C declarations of the NVIDIA RM / UVM parameter structs a compute client uses (x86-64, LP64).

The declarations follow the natural C layout of NVIDIA's headers (open-gpu-kernel-modules), so cffi
lays them out exactly as gcc does; tests/abi/test_nv_abi.py checks every size and offset against
/work/shared/abi/nvidia_rm.json.

Layouts changed between driver branches. A field line may end in a marker `@570` or `@580`: the field
exists from that branch on (older branches lack it, which shifts what follows); `@570` also stands for a field
that came in 550 (550 is no branch we support, so 535 lacks it and 570 has it). Array bounds that
changed are written `{NAME}` and filled from LIMITS. The 535 facts come from the JSON's
layout_differences_other_driver_versions; the 570 facts are NOT in the JSON: they were taken from the
headers of open-gpu-kernel-modules tags 570.86.15 and 570.211.01 (identical for these structs) by
compiling them with gcc and printing sizeof/offsetof.

  >>> from ioctl_defs.nv.structs import cdef_for
  >>> 'NVOS21_PARAMETERS' in cdef_for("580")
  True
"""
from __future__ import annotations
import re

SERIES = ("535", "570", "580")   # oldest first; a marker @X means "present in X and newer"

# Array bounds per branch. 570 values: from the 570.x headers (NV0080_CTRL_GPU_CLASSLIST_MAX_SIZE 100,
# NV2080_CTRL_GPU_INFO_MAX_LIST_SIZE 0x41, NV2080_CTRL_FB_INFO_MAX_LIST_SIZE 0x39), not in the JSON.
LIMITS: dict[str, dict[str, int]] = {
  "535": {"CLASSLIST_MAX": 160, "GPU_INFO_MAX": 64, "FB_INFO_MAX": 54, "UVM_MAX_GPUS": 32},
  "570": {"CLASSLIST_MAX": 100, "GPU_INFO_MAX": 65, "FB_INFO_MAX": 57, "UVM_MAX_GPUS": 256},
  "580": {"CLASSLIST_MAX": 200, "GPU_INFO_MAX": 70, "FB_INFO_MAX": 128, "UVM_MAX_GPUS": 256},
}

TYPEDEFS = """
typedef uint8_t NvU8; typedef uint16_t NvU16; typedef uint32_t NvU32; typedef uint64_t NvU64;
typedef int32_t NvS32; typedef int64_t NvS64; typedef uint8_t NvBool;
typedef uint32_t NvV32; typedef uint32_t NvHandle; typedef uint32_t NV_STATUS;
typedef uint64_t NvP64;   /* a user pointer carried as a 64-bit integer (NV_DECLARE_ALIGNED(void*, 8)) */
/* the anonymous union of NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS, named here because members are split at ';'.
   Same layout in 535 and 580 (JSON); 570 lies between them and is assumed the same (595 drops `unicode`). */
typedef union { NvU8 ascii[64]; NvU16 unicode[64]; } NV2080_GPU_NAME_STRING;
"""

# (name, body) in dependency order. Each body line is one member.
STRUCTS: list[tuple[str, str]] = [
  # --- nv-ioctl.h wrappers (escapes 200+) ---
  ("nv_pci_info_t", """NvU32 domain; NvU8 bus; NvU8 slot; NvU8 function; NvU16 vendor_id; NvU16 device_id;"""),
  ("nv_ioctl_card_info_t", """NvBool valid; nv_pci_info_t pci_info; NvU32 gpu_id; NvU16 interrupt_line;
    NvU64 reg_address; NvU64 reg_size; NvU64 fb_address; NvU64 fb_size; NvU32 minor_number; NvU8 dev_name[10];"""),
  ("nv_ioctl_register_fd_t", "int ctl_fd;"),
  ("nv_ioctl_rm_api_version_t", "NvU32 cmd; NvU32 reply; char versionString[64];"),
  ("nv_ioctl_alloc_os_event_t", "NvHandle hClient; NvHandle hDevice; NvU32 fd; NvU32 Status;"),
  # --- nvos.h: the RM API parameter blocks ---
  ("NVOS00_PARAMETERS", "NvHandle hRoot; NvHandle hObjectParent; NvHandle hObjectOld; NvV32 status;"),
  ("NVOS02_PARAMETERS", """NvHandle hRoot; NvHandle hObjectParent; NvHandle hObjectNew; NvV32 hClass; NvV32 flags;
    NvP64 pMemory; NvU64 limit; NvV32 status;"""),
  ("NVOS21_PARAMETERS", """NvHandle hRoot; NvHandle hObjectParent; NvHandle hObjectNew; NvV32 hClass; NvP64 pAllocParms;
    NvU32 paramsSize; NvV32 status;"""),
  ("NVOS64_PARAMETERS", """NvHandle hRoot; NvHandle hObjectParent; NvHandle hObjectNew; NvV32 hClass; NvP64 pAllocParms;
    NvP64 pRightsRequested; NvU32 paramsSize; NvU32 flags; NvV32 status;"""),
  ("NVOS54_PARAMETERS", "NvHandle hClient; NvHandle hObject; NvV32 cmd; NvU32 flags; NvP64 params; NvU32 paramsSize; NvV32 status;"),
  ("NVOS33_PARAMETERS", """NvHandle hClient; NvHandle hDevice; NvHandle hMemory; NvU64 offset; NvU64 length; NvP64 pLinearAddress;
    NvU32 status; NvU32 flags;"""),
  ("NVOS34_PARAMETERS", "NvHandle hClient; NvHandle hDevice; NvHandle hMemory; NvP64 pLinearAddress; NvU32 status; NvU32 flags;"),
  ("NVOS46_PARAMETERS", """NvHandle hClient; NvHandle hDevice; NvHandle hDma; NvHandle hMemory; NvU64 offset; NvU64 length; NvV32 flags;
    NvV32 flags2; @580
    NvV32 kindOverride; @580
    NvU64 dmaOffset; NvV32 status;"""),
  ("NVOS47_PARAMETERS", """NvHandle hClient; NvHandle hDevice; NvHandle hDma; NvHandle hMemory; NvV32 flags; NvU64 dmaOffset;
    NvU64 size; @570
    NvV32 status;"""),
  ("nv_ioctl_nvos02_parameters_with_fd", "NVOS02_PARAMETERS params; int fd;"),
  ("nv_ioctl_nvos33_parameters_with_fd", "NVOS33_PARAMETERS params; int fd;"),
  # --- allocation parameters (class headers, nvos.h, alloc_channel.h) ---
  ("NV0000_ALLOC_PARAMETERS", """NvHandle hClient; NvU32 processID; char processName[100];
    NvP64 pOsPidInfo; @570"""),
  ("NV0080_ALLOC_PARAMETERS", """NvU32 deviceId; NvHandle hClientShare; NvHandle hTargetClient; NvHandle hTargetDevice; NvV32 flags;
    NvU64 vaSpaceSize; NvU64 vaStartInternal; NvU64 vaLimitInternal; NvV32 vaMode;"""),
  ("NV2080_ALLOC_PARAMETERS", "NvU32 subDeviceId;"),
  ("NV_MEMORY_ALLOCATION_PARAMS", """NvU32 owner; NvU32 type; NvU32 flags; NvU32 width; NvU32 height; NvS32 pitch; NvU32 attr; NvU32 attr2;
    NvU32 format; NvU32 comprCovg; NvU32 zcullCovg; NvU64 rangeLo; NvU64 rangeHi; NvU64 size; NvU64 alignment; NvU64 offset;
    NvU64 limit; NvP64 address; NvU32 ctagOffset; NvHandle hVASpace; NvU32 internalflags; NvU32 tag;
    NvS32 numaNode; @570"""),
  ("NV_OS_DESC_MEMORY_ALLOCATION_PARAMS", """NvU32 type; NvU32 flags; NvU32 attr; NvU32 attr2; NvP64 descriptor; NvU64 limit;
    NvU32 descriptorType; NvU32 tag;"""),
  ("NV_MEMORY_VIRTUAL_ALLOCATION_PARAMS", "NvU64 offset; NvU64 limit; NvHandle hVASpace;"),
  ("NV_VASPACE_ALLOCATION_PARAMETERS", """NvU32 index; NvV32 flags; NvU64 vaSize; NvU64 vaStartInternal; NvU64 vaLimitInternal;
    NvU32 bigPageSize; NvU64 vaBase;
    NvU32 pasid; @580"""),
  ("NV_CHANNEL_GROUP_ALLOCATION_PARAMETERS", """NvHandle hObjectError; NvHandle hObjectEccError; NvHandle hVASpace; NvU32 engineType;
    NvBool bIsCallingContextVgpuPlugin;"""),
  ("NV_CTXSHARE_ALLOCATION_PARAMETERS", "NvHandle hVASpace; NvU32 flags; NvU32 subctxId;"),
  ("NV_MEMORY_DESC_PARAMS", "NvU64 base; NvU64 size; NvU32 addressSpace; NvU32 cacheAttrib;"),
  ("NV_CHANNEL_ALLOC_PARAMS", """NvHandle hObjectError; NvHandle hObjectBuffer; NvU64 gpFifoOffset; NvU32 gpFifoEntries; NvU32 flags;
    NvHandle hContextShare; NvHandle hVASpace; NvHandle hUserdMemory[8]; NvU64 userdOffset[8]; NvU32 engineType; NvU32 cid;
    NvU32 subDeviceId; NvHandle hObjectEccError; NV_MEMORY_DESC_PARAMS instanceMem; NV_MEMORY_DESC_PARAMS userdMem;
    NV_MEMORY_DESC_PARAMS ramfcMem; NV_MEMORY_DESC_PARAMS mthdbufMem; NvHandle hPhysChannelGroup; NvU32 internalFlags;
    NV_MEMORY_DESC_PARAMS errorNotifierMem; NV_MEMORY_DESC_PARAMS eccErrorNotifierMem; NvU32 ProcessID; NvU32 SubProcessID;
    NvU32 encryptIv[3]; NvU32 decryptIv[3]; NvU32 hmacNonce[8];
    NvU32 tpcConfigID; @570"""),
  ("NV_GR_ALLOCATION_PARAMETERS", "NvU32 version; NvU32 flags; NvU32 size; NvU32 caps;"),
  ("NV_HOPPER_USERMODE_A_PARAMS", "NvBool bBar1Mapping; NvBool bPriv;"),
  ("NVB0B5_ALLOCATION_PARAMETERS", "NvU32 version; NvU32 engineType;"),
  # --- control parameters ---
  ("NV0000_CTRL_GPU_GET_ID_INFO_V2_PARAMS", """NvU32 gpuId; NvU32 gpuFlags; NvU32 deviceInstance; NvU32 subDeviceInstance; NvU32 sliStatus;
    NvU32 boardId; NvU32 gpuInstance; NvS32 numaId;"""),
  ("NV0000_CTRL_GPU_GET_ATTACHED_IDS_PARAMS", "NvU32 gpuIds[32];"),
  ("NV0000_CTRL_SYSTEM_GET_P2P_CAPS_V2_PARAMS", """NvU32 gpuIds[32]; NvU32 gpuCount; NvU32 p2pCaps; NvU32 p2pOptimalReadCEs;
    NvU32 p2pOptimalWriteCEs; NvU8 p2pCapsStatus[9]; NvU32 busPeerIds[1024];
    NvU32 busEgmPeerIds[1024]; @570"""),
  ("NV0000_CTRL_GPU_GET_PROBED_IDS_PARAMS", """NvU32 gpuIds[32]; NvU32 excludedGpuIds[32];
    NvU32 gpuFlags[32]; @580"""),
  ("NV0000_CTRL_GPU_GET_UUID_FROM_GPU_ID_PARAMS", "NvU32 gpuId; NvU32 flags; NvU8 gpuUuid[256]; NvU32 uuidStrLen;"),
  ("NV0000_CTRL_SYSTEM_GET_BUILD_VERSION_V2_PARAMS", """char driverVersionBuffer[256]; char versionBuffer[256];
    char driverBranch[256]; @570
    char titleBuffer[256]; NvU32 changelistNumber; NvU32 officialChangelistNumber;"""),
  ("NV0080_CTRL_GPU_GET_CLASSLIST_PARAMS", "NvU32 numClasses; NvP64 classList;"),
  ("NV0080_CTRL_GPU_GET_CLASSLIST_V2_PARAMS", "NvU32 numClasses; NvU32 classList[{CLASSLIST_MAX}];"),
  ("NV2080_CTRL_GR_INFO", "NvU32 index; NvU32 data;"),
  ("NV2080_CTRL_GR_ROUTE_INFO", "NvU32 flags; NvU64 route;"),
  ("NV2080_CTRL_GR_GET_INFO_PARAMS", "NvU32 grInfoListSize; NvP64 grInfoList; NV2080_CTRL_GR_ROUTE_INFO grRouteInfo;"),
  ("NV2080_CTRL_GR_SM_ID", "NvU32 gpcId; NvU32 tpcId;"),   # the header's anonymous smId element struct, named for cffi
  ("NV2080_CTRL_GR_GET_SM_TO_GPC_TPC_MAPPINGS_PARAMS", "NV2080_CTRL_GR_SM_ID smId[240]; NvU32 smCount; NV2080_CTRL_GR_ROUTE_INFO grRouteInfo;"),
  ("NV2080_CTRL_PERF_BOOST_PARAMS", "NvU32 flags; NvU32 duration;"),
  ("NV2080_CTRL_GPU_GET_GID_INFO_PARAMS", "NvU32 index; NvU32 flags; NvU32 length; NvU8 data[256];"),
  ("NV2080_CTRL_GPU_GET_NAME_STRING_PARAMS", "NvU32 gpuNameStringFlags; NV2080_GPU_NAME_STRING gpuNameString;"),
  ("NV2080_CTRL_GPU_INFO", "NvU32 index; NvU32 data;"),
  ("NV2080_CTRL_GPU_GET_INFO_V2_PARAMS", "NvU32 gpuInfoListSize; NV2080_CTRL_GPU_INFO gpuInfoList[{GPU_INFO_MAX}];"),
  ("NV2080_CTRL_FB_INFO", "NvU32 index; NvU32 data;"),
  ("NV2080_CTRL_FB_GET_INFO_V2_PARAMS", "NvU32 fbInfoListSize; NV2080_CTRL_FB_INFO fbInfoList[{FB_INFO_MAX}];"),
  ("NV2080_CTRL_FB_FLUSH_GPU_CACHE_PARAMS", """NvU64 addressArray[500]; NvU32 addressArraySize; NvU32 addressAlign;
    NvU64 memBlockSizeBytes; NvU32 flags;"""),
  ("NV2080_CTRL_MC_GET_ARCH_INFO_PARAMS", "NvU32 architecture; NvU32 implementation; NvU32 revision; NvU8 subRevision;"),
  ("NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS", """NvBool bEnable; NvBool bSkipSubmit;
    NvBool bSkipEnable; @580"""),
  ("NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS", """NvBool bEnable; NvBool bSkipSubmit;
    NvBool bSkipEnable; @580"""),
  ("NVA06F_CTRL_BIND_PARAMS", "NvU32 engineType;"),
  ("NVC36F_CTRL_CMD_GPFIFO_GET_WORK_SUBMIT_TOKEN_PARAMS", "NvU32 workSubmitToken;"),
  # --- UVM (uvm_ioctl.h, uvm_types.h) ---
  ("NvProcessorUuid", "NvU8 uuid[16];"),
  ("UvmGpuMappingAttributes", """NvProcessorUuid gpuUuid; NvU32 gpuMappingType; NvU32 gpuCachingType; NvU32 gpuFormatType;
    NvU32 gpuElementBits; NvU32 gpuCompressionType;"""),
  ("UVM_INITIALIZE_PARAMS", "NvU64 flags; NV_STATUS rmStatus;"),
  ("UVM_MM_INITIALIZE_PARAMS", "NvS32 uvmFd; NV_STATUS rmStatus;"),
  ("UVM_REGISTER_GPU_PARAMS", """NvProcessorUuid gpu_uuid; NvBool numaEnabled; NvS32 numaNodeId; NvS32 rmCtrlFd; NvHandle hClient;
    NvHandle hSmcPartRef; NV_STATUS rmStatus;"""),
  ("UVM_UNREGISTER_GPU_PARAMS", "NvProcessorUuid gpu_uuid; NV_STATUS rmStatus;"),
  ("UVM_REGISTER_GPU_VASPACE_PARAMS", "NvProcessorUuid gpuUuid; NvS32 rmCtrlFd; NvHandle hClient; NvHandle hVaSpace; NV_STATUS rmStatus;"),
  ("UVM_UNREGISTER_GPU_VASPACE_PARAMS", "NvProcessorUuid gpuUuid; NV_STATUS rmStatus;"),
  ("UVM_REGISTER_CHANNEL_PARAMS", """NvProcessorUuid gpuUuid; NvS32 rmCtrlFd; NvHandle hClient; NvHandle hChannel; NvU64 base; NvU64 length;
    NV_STATUS rmStatus;"""),
  ("UVM_UNREGISTER_CHANNEL_PARAMS", "NvProcessorUuid gpuUuid; NvHandle hClient; NvHandle hChannel; NV_STATUS rmStatus;"),
  ("UVM_CREATE_EXTERNAL_RANGE_PARAMS", "NvU64 base; NvU64 length; NV_STATUS rmStatus;"),
  ("UVM_MAP_EXTERNAL_ALLOCATION_PARAMS", """NvU64 base; NvU64 length; NvU64 offset; UvmGpuMappingAttributes perGpuAttributes[{UVM_MAX_GPUS}];
    NvU64 gpuAttributesCount; NvS32 rmCtrlFd; NvU32 hClient; NvU32 hMemory; NV_STATUS rmStatus;"""),
  ("UVM_UNMAP_EXTERNAL_PARAMS", "NvU64 base; NvU64 length; NvProcessorUuid gpuUuid; NV_STATUS rmStatus;"),
  ("UVM_FREE_PARAMS", "NvU64 base; NvU64 length; NV_STATUS rmStatus;"),
  ("UVM_ENABLE_PEER_ACCESS_PARAMS", "NvProcessorUuid gpuUuidA; NvProcessorUuid gpuUuidB; NV_STATUS rmStatus;"),
  ("UVM_DISABLE_PEER_ACCESS_PARAMS", "NvProcessorUuid gpuUuidA; NvProcessorUuid gpuUuidB; NV_STATUS rmStatus;"),
  # --- USERD: the channel's control page (clc56f.h AmpereAControlGPFifo; Hopper/Blackwell keep GPGet/GPPut here) ---
  ("Nvc56fControl", """NvU32 Ignored00[16]; NvU32 Put; NvU32 Get; NvU32 Reference; NvU32 PutHi; NvU32 Ignored01[2]; NvU32 TopLevelGet;
    NvU32 TopLevelGetHi; NvU32 GetHi; NvU32 Ignored02[7]; NvU32 Ignored03; NvU32 Ignored04[1]; NvU32 GPGet; NvU32 GPPut;
    NvU32 Ignored05[92];"""),
]

def _members(body: str, series: str) -> list[str]:
  """Split a body into member declarations, dropping those newer than `series`."""
  out, rank = [], SERIES.index(series)
  for line in body.splitlines():
    m = re.match(r"\s*(.*?)\s*@(\d+)\s*$", line)
    if m and SERIES.index(m.group(2)) > rank: continue
    out += [d.strip() + ";" for d in (m.group(1) if m else line).split(";") if d.strip()]
  return [x.format(**LIMITS[series]) for x in out]

def struct_members(name: str, series: str = "580") -> list[str]:
  """The member declarations of one struct for a driver branch.

  >>> struct_members("NVOS47_PARAMETERS", "535")[-1]
  'NvV32 status;'
  """
  return _members(dict(STRUCTS)[name], series)

def cdef_for(series: str) -> str:
  """The full cdef text (typedefs + every struct) for a driver branch ('535', '570' or '580')."""
  if series not in LIMITS: raise ValueError(f"no NVIDIA struct layouts for driver branch {series!r}; known: {', '.join(SERIES)}")
  return TYPEDEFS + "".join(f"typedef struct {{ {' '.join(_members(body, series))} }} {name};\n" for name, body in STRUCTS)
