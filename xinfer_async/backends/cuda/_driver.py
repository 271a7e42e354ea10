"""The CUDA driver API (``libcuda.so.1``) through cffi in ABI mode: a minimal cdef and one ``check``.

Every ``CUresult`` goes through :func:`check`, which turns a failure into a
:class:`~xinfer_async.hal.DeviceError` carrying the status name from ``cuGetErrorName``
(``CUDA_ERROR_OUT_OF_MEMORY`` becomes :class:`~xinfer_async.hal.DeviceOutOfMemoryError`). A sticky
error (the context is unusable: illegal address, launch failure, ...) marks the device lost, and from
then on every checked call raises, whatever the driver returns.
"""

from __future__ import annotations

import os
import threading

import cffi

from ...hal._errors import DeviceError, DeviceOutOfMemoryError

ffi = cffi.FFI()
ffi.cdef(
    """
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef void (*CUhostFn)(void *userData);

CUresult cuInit(unsigned int flags);
CUresult cuDriverGetVersion(int *version);
CUresult cuGetErrorName(CUresult error, const char **pStr);
CUresult cuGetErrorString(CUresult error, const char **pStr);
CUresult cuDeviceGetCount(int *count);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev);
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxSynchronize(void);

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemGetInfo_v2(size_t *free, size_t *total);
CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags);
CUresult cuMemFreeHost(void *p);
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags);
CUresult cuStreamWaitValue64_v2(CUstream stream, CUdeviceptr addr, unsigned long long value, unsigned int flags);
CUresult cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr addr, unsigned long long value, unsigned int flags);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream);

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags);
CUresult cuStreamDestroy_v2(CUstream hStream);
CUresult cuStreamSynchronize(CUstream hStream);
CUresult cuStreamQuery(CUstream hStream);
CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData);
CUresult cuStreamBeginCapture_v2(CUstream hStream, int mode);
CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags);
CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphExecDestroy(CUgraphExec hGraphExec);
CUresult cuGraphDestroy(CUgraph hGraph);

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags);
CUresult cuEventDestroy_v2(CUevent hEvent);
CUresult cuEventRecord(CUevent hEvent, CUstream hStream);
CUresult cuEventQuery(CUevent hEvent);
CUresult cuEventSynchronize(CUevent hEvent);
CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);

CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleUnload(CUmodule hmod);
CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name);
CUresult cuFuncSetAttribute(CUfunction hfunc, int attrib, int value);
typedef struct {
    int id;
    int pad;
    unsigned long long value[8];  /* CUlaunchAttributeValue, a 64-byte union */
} CUlaunchAttribute;
typedef struct {
    unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra);
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);
"""
)

CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NOT_FOUND = 500
CUDA_ERROR_NOT_READY = 600
CU_STREAM_NON_BLOCKING = 1
CU_EVENT_DISABLE_TIMING = 2
CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_MEMHOSTALLOC_PORTABLE = 1
CU_MEMHOSTALLOC_DEVICEMAP = 2
CU_STREAM_WAIT_VALUE_GEQ = 0
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM = 91
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS = 122
CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR = 123

#: Errors after which the context is unusable: the device is lost for this process.
STICKY = {
    4: "CUDA_ERROR_DEINITIALIZED",
    46: "CUDA_ERROR_DEVICES_UNAVAILABLE",
    214: "CUDA_ERROR_ECC_UNCORRECTABLE",
    700: "CUDA_ERROR_ILLEGAL_ADDRESS",
    702: "CUDA_ERROR_LAUNCH_TIMEOUT",
    710: "CUDA_ERROR_ASSERT",
    714: "CUDA_ERROR_HARDWARE_STACK_ERROR",
    715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    716: "CUDA_ERROR_MISALIGNED_ADDRESS",
    717: "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    718: "CUDA_ERROR_INVALID_PC",
    719: "CUDA_ERROR_LAUNCH_FAILED",
    999: "CUDA_ERROR_UNKNOWN",
}

_lib = None
_lock = threading.Lock()
#: the DeviceError that lost the device (sticky), or None
lost: DeviceError | None = None


def load():
    """Open ``libcuda.so.1`` once; returns the library.

    Raises:
        OSError: the driver library is not installed.
    """
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                # Streams share the device's hardware work queues (8 by default): a stream stalled
                # in a wait (a queue's wait_for of a value not yet submitted, a signal stream
                # waiting for its list) holds back every stream behind it on the same hardware
                # queue. Each queue takes two streams, so ask for the most there are (read at
                # cuInit; a value the user set, or a driver another library started, stands).
                os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")
                _lib = ffi.dlopen("libcuda.so.1")
    return _lib


def error_name(status: int) -> str:
    """``cuGetErrorName`` of ``status`` (e.g. ``"CUDA_ERROR_INVALID_VALUE"``)."""
    s = ffi.new("const char **")
    if _lib is not None and _lib.cuGetErrorName(status, s) == 0 and s[0] != ffi.NULL:
        return ffi.string(s[0]).decode()
    return STICKY.get(status, f"CUresult({status})")


def _error_string(status: int) -> str:
    s = ffi.new("const char **")
    if _lib is not None and _lib.cuGetErrorString(status, s) == 0 and s[0] != ffi.NULL:
        return ffi.string(s[0]).decode()
    return ""


def check(status: int, what: str) -> None:
    """Raise if ``status`` (a ``CUresult``) is not ``CUDA_SUCCESS`` or the device is lost.

    Raises:
        DeviceOutOfMemoryError: ``CUDA_ERROR_OUT_OF_MEMORY``.
        DeviceError: any other failure (``.status`` the name), or any call once the device is lost.
    """
    if status == 0 and lost is None:
        return
    raise_for(status, what)


def raise_for(status: int, what: str):
    global lost
    if lost is not None:
        raise DeviceError(f"{what}: device lost earlier ({lost.status}): {lost}", lost.status)
    name = error_name(status)
    message = f"{what} failed: {name} ({_error_string(status)})"
    if status == CUDA_ERROR_OUT_OF_MEMORY:
        raise DeviceOutOfMemoryError(message, name)
    err = DeviceError(message, name)
    if status in STICKY:
        lost = err
    raise err


def call(what: str, fn, *args) -> None:
    """``check(fn(*args), what)``: for calls off the hot path."""
    check(fn(*args), what)


#: the oldest driver (cuDriverGetVersion) the backend opens a device with
MIN_DRIVER = 12000


def availability() -> tuple[bool, str]:
    """``(True, description)`` when a CUDA device can be opened, else ``(False, reason)``."""
    try:
        lib = load()
    except OSError as e:
        why = str(e).split("  Additionally")[0].rsplit("libcuda.so.1: ", 1)[-1].rstrip(". ")
        return False, f"the NVIDIA driver library libcuda.so.1 cannot be loaded ({why})"
    status = lib.cuInit(0)
    if status:
        return False, f"cuInit failed: {error_name(status)}"
    ver, count = ffi.new("int *"), ffi.new("int *")
    if lib.cuDriverGetVersion(ver) or ver[0] < MIN_DRIVER:
        return False, f"CUDA driver too old: version {ver[0]}, need {MIN_DRIVER}"
    if lib.cuDeviceGetCount(count) or count[0] == 0:
        return False, "no CUDA device"
    return True, f"{count[0]} CUDA device(s), driver {ver[0]}"
