"""Read query and body values the way the SDK sends them, with errors that name the field.

The SDK sends every query value as `str(v)`: booleans as `True`/`False`, numbers as `10`/`0.4`,
and multi-value filters as comma-separated strings. An empty value counts as not given.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from apikit.errors import invalid

TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def text(query: Mapping, name: str) -> str | None:
    value = query.get(name)
    value = value.strip() if isinstance(value, str) else value
    return value or None


def listed(query: Mapping, name: str) -> list[str]:
    """A comma-separated filter (`JobIds=a,b`) as a list; [] when not given."""
    value = text(query, name)
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


def integer(query: Mapping, name: str, *, default: int | None = None, low: int | None = None,
            high: int | None = None) -> int | None:
    value = query.get(name)
    if value is None or value == "":
        return default
    number = whole_number(value)
    if number is None or (low is not None and number < low) or (high is not None and number > high):
        raise invalid(name, f"must be an integer{_range(low, high)}, got {value!r}")
    return number


# A column's integer: 64 bits, signed. A larger number matches no row and fits no column.
INT64 = 2**63 - 1
_WHOLE = re.compile(r"-?[0-9]{1,19}")


def whole_number(value: Any) -> int | None:
    """A JSON integer, or a text of ASCII digits (with a leading '-'), that fits a 64-bit column; else
    None. Not int(): it takes '\u0661', ' 1\n', '+1' and '1_000' too, which no SDK sends."""
    if isinstance(value, str) and _WHOLE.fullmatch(value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if -INT64 - 1 <= value <= INT64 else None


def ident(value: Any) -> int:
    """A database id given as text (WorkspaceId, UserId): its int, or 0, which names no row (not
    None: a filter on None asks for rows without one)."""
    number = whole_number(value)
    return number if number is not None and number > 0 else 0


def boolean(query: Mapping, name: str, *, default: bool | None = None) -> bool | None:
    value = query.get(name)
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    lowered = str(value).strip().lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise invalid(name, f"must be true or false, got {value!r}")


def choice(query: Mapping, name: str, allowed: Iterable[str], *, default: str | None = None,
           case_insensitive: bool = False) -> str | None:
    value = text(query, name)
    if value is None:
        return default
    allowed = list(allowed)
    for option in allowed:
        if value == option or (case_insensitive and value.lower() == option.lower()):
            return option
    raise invalid(name, f"must be one of {', '.join(allowed)}, got {value!r}")


def timestamp(query: Mapping, name: str) -> datetime | None:
    """ISO 8601 (`2026-12-01T10:00:00Z`); an offset is honoured, no offset means UTC."""
    value = text(query, name)
    if value is None:
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise invalid(name, f"must be a time in ISO 8601 UTC, yyyy-MM-ddTHH:mm:ssZ, got {value!r}") from None
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


def order(query: Mapping, *, default: str = "desc") -> str:
    return choice(query, "Order", ("desc", "asc"), default=default, case_insensitive=True)


def fmt_time(at: datetime | None) -> str | None:
    """The SDK's time format: ISO 8601 UTC to the second."""
    return at.astimezone(timezone.utc).strftime(TIME_FORMAT) if at else None


def given(value: Any) -> bool:
    """False for None and for the empty lists / maps / strings a `from_map` request carries."""
    return value is not None and value != [] and value != {} and value != ""


def _range(low, high) -> str:
    if low is not None and high is not None:
        return f" between {low} and {high}"
    if low is not None:
        return f" of at least {low}"
    if high is not None:
        return f" of at most {high}"
    return ""


def cpu_amount(millicores: int) -> str:
    """PaiStudio/DLC resource strings: '96' cores, or '3500m' when not whole."""
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def memory_amount(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


_MEMORY = re.compile(r"^(\d+)\s*(Gi|Mi)?$")


def memory_mib(name: str, value: Any) -> int:
    """memory_amount's inverse for a required field: '32Gi' or '512Mi' (a plain number is GiB)."""
    if not given(value):
        raise invalid(name, "is required, e.g. 32Gi or 512Mi (a plain number is GiB)")
    m = _MEMORY.match(str(value).strip())
    if m is None:
        raise invalid(name, f"must be an amount such as 32Gi or 512Mi (a plain number is GiB), got {value!r}")
    return int(m[1]) * (1 if m[2] == "Mi" else 1024)


# A request's shape as an action reads it: each key maps to the shape of its value, a list of one
# shape for a list of objects, LEAF for a plain value, or ANY_KEYS for a map whose keys are the
# caller's own (Envs, Tags) or that another module reads in full.
LEAF = None
ANY_KEYS = "any"


def unsupported(value: Any, shape: Any, at: str = "") -> list[str]:
    """The paths (`JobSpecs[0].ExtraPodSpec`) of the keys of `value` that ask for something the shape
    does not read. A key that asks for nothing (empty, null or false) is let through: an SDK model
    sends some of them on every request, and ignoring it changes nothing."""
    if shape is LEAF or shape == ANY_KEYS:
        return []
    if isinstance(shape, list):
        items = value if isinstance(value, list) else []
        return [p for i, item in enumerate(items) for p in unsupported(item, shape[0], f"{at}[{i}]")]
    if not isinstance(value, dict):
        return []  # the reader of the value names a wrong type
    out = []
    for key, item in value.items():
        path = f"{at}.{key}" if at else str(key)
        if key not in shape:
            if given(item) and item is not False:
                out.append(path)
        else:
            out += unsupported(item, shape[key], path)
    return out
