"""The error hierarchy. Every message names what is wrong and what would be valid."""


class GpucommError(Exception):
    """Base of every error gpucomm raises on purpose."""


class ConfigError(GpucommError, ValueError):
    """Bad user input: an unknown name, a size out of range, an unsupported dtype/op."""


class ScheduleError(GpucommError):
    """A schedule that does not implement its collective, or cannot be built."""


class TopologyError(GpucommError):
    """A topology that is malformed or has no route between two ranks."""


class TransportError(GpucommError):
    """A runtime transport failed: a dead peer, a mismatched collective, a broken link."""

    step: int  # the schedule step it happened in, set where a runtime knows it


class CommTimeout(TransportError, TimeoutError):
    """A wait in the runtime ran past its timeout."""
