"""PageNumber / PageSize paging as PAI does it: pages start at 1, TotalCount counts every match."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from apikit import params


@dataclass(frozen=True)
class Page:
    number: int
    size: int

    @property
    def offset(self) -> int:
        return (self.number - 1) * self.size


def page_of(query: Mapping, *, default_size: int = 50, max_size: int = 1000) -> Page:
    # Capped so that the page's offset fits the database's 64-bit OFFSET.
    number = params.integer(query, "PageNumber", default=1, low=1, high=params.INT64 // max_size)
    size = params.integer(query, "PageSize", default=default_size, low=1, high=max_size)
    return Page(number, size)


def paginate(queryset, page: Page) -> tuple[list, int]:
    """The rows of one page and the total count (two queries; the count skips the ordering)."""
    total = queryset.order_by().count()
    return list(queryset[page.offset : page.offset + page.size]), total
