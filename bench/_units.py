"""Byte units and how the benchmarks print sizes and durations.

GB (1e9) is the unit of link rates (GB/s, as vendors quote them); MiB and GiB size device budgets."""

GB = 1e9
MiB = 1 << 20
GiB = 1 << 30


def fmt_bytes(n):
    if n is None:
        return "-"
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def fmt_s(s):
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.3f} s"
