"""Human-readable byte sizes for messages (private; the planner must not depend on the spec)."""

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")

KiB = 1024
MiB = 1024**2
GiB = 1024**3


def format_size(n_bytes: int) -> str:
    """``1536 -> '1.5 KiB'``; binary units, three significant figures, exact bytes below 1 KiB."""
    size = float(n_bytes)
    if abs(size) < 1024:
        return f"{int(n_bytes)} B"
    for unit in _UNITS[1:]:
        size /= 1024
        if abs(size) < 1024 or unit == _UNITS[-1]:
            break
    return f"{size:.3g} {unit}" if abs(size) < 100 else f"{size:.0f} {unit}"
