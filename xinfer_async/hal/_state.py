"""Resource states of a buffer (the D3D12 names the source design uses)."""

import enum


class ResourceState(enum.Enum):
    """How the device will next touch a buffer; a transition barrier separates two states."""

    COMMON = "common"
    COPY_DEST = "copy_dest"
    COPY_SOURCE = "copy_source"
    SHADER_READ = "shader_read"
    UNORDERED_ACCESS = "unordered_access"

    @property
    def writes(self) -> bool:
        return self in (ResourceState.COPY_DEST, ResourceState.UNORDERED_ACCESS)


class Access(enum.Flag):
    """How a command touches a binding."""

    READ = 1
    WRITE = 2
    READ_WRITE = 3
