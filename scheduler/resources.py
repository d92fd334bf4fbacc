"""Exact resource amounts: whole GPUs, CPU millicores and memory MiB."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

DIMENSIONS = ("gpu", "cpu_m", "mem_mib")


@dataclass(frozen=True, slots=True)
class Resources:
    gpu: int = 0
    cpu_m: int = 0
    mem_mib: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.gpu + other.gpu, self.cpu_m + other.cpu_m,
                         self.mem_mib + other.mem_mib)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.gpu - other.gpu, self.cpu_m - other.cpu_m,
                         self.mem_mib - other.mem_mib)

    def fits(self, available: Resources) -> bool:
        """True when this request fits in `available` in every dimension."""
        return (self.gpu <= available.gpu and self.cpu_m <= available.cpu_m
                and self.mem_mib <= available.mem_mib)

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.gpu, self.cpu_m, self.mem_mib)

    def is_zero(self) -> bool:
        return self.gpu == 0 and self.cpu_m == 0 and self.mem_mib == 0

    def first_short(self, available: Resources) -> str | None:
        """The first dimension (gpu, cpu_m, mem_mib) in which this request exceeds `available`."""
        for dim in DIMENSIONS:
            if getattr(self, dim) > getattr(available, dim):
                return dim
        return None

    def describe(self) -> str:
        return f"{self.gpu} GPU, {fmt_dim('cpu_m', self.cpu_m)}, {fmt_dim('mem_mib', self.mem_mib)}"


ZERO = Resources()


def total(items: Iterable[Resources]) -> Resources:
    gpu = cpu = mem = 0
    for r in items:
        gpu += r.gpu
        cpu += r.cpu_m
        mem += r.mem_mib
    return Resources(gpu, cpu, mem)


def fmt_dim(dim: str, value: int) -> str:
    """A user-facing amount of one dimension: '4 GPU', '3.5 vCPU', '64 GiB'."""
    if dim == "gpu":
        return f"{value} GPU"
    if dim == "cpu_m":
        return f"{value / 1000:g} vCPU"
    return f"{value / 1024:g} GiB"
