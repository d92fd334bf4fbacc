"""Output for people (aligned tables, a sparkline chart) and for scripts (the API's JSON as is)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

# A column: its header and how to read its cell from one item of the API's answer.
Column = tuple[str, Callable[[dict], object]]
BLOCKS = "▁▂▃▄▅▆▇█"


def field(*path: str) -> Callable[[dict], object]:
    """The value at `path` in nested dicts, or None where a key is missing."""
    def read(item: dict) -> object:
        for key in path:
            item = item.get(key) if isinstance(item, dict) else None
        return item
    return read


def as_json(body: dict) -> str:
    return json.dumps(body, indent=2, ensure_ascii=False)


def table(items: Sequence[dict], columns: Sequence[Column]) -> str:
    rows = [[header for header, _ in columns]]
    rows += [[_cell(read(item)) for _, read in columns] for item in items]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def pairs(item: dict, columns: Sequence[Column]) -> str:
    """One item as `Header: value` lines."""
    width = max(len(header) for header, _ in columns) + 1
    return "\n".join(f"{header + ':':<{width}} {_cell(read(item))}" for header, read in columns)


def sparkline(values: Sequence[float], width: int) -> str:
    """The values as one line of block characters, averaged into at most `width` buckets; the
    lowest value draws the lowest block and the highest the full one."""
    if not values:
        return ""
    size = -(-len(values) // width)  # ceiling: every bucket but the last holds `size` values
    buckets = [values[i:i + size] for i in range(0, len(values), size)]
    means = [sum(b) / len(b) for b in buckets]
    low, high = min(means), max(means)
    span = (high - low) or 1.0
    return "".join(BLOCKS[round((m - low) / span * (len(BLOCKS) - 1))] for m in means)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ",".join(_cell(v) for v in value) or "-"
    return str(value)
