"""How a price is shown to a person: per node-hour, 4 places, labelled "/h".

The platform stores and computes prices per node-minute (PAI's unit: ResourceSpec's on-demand
price, PriceHistory, SpotSpec.SpotPriceLimit) and keeps that unit in the API's fields. Everything
a person reads (pages, charts, waiting reasons, error messages) shows them per hour through this
module, so one price never appears in two units or two roundings.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

MINUTES_PER_HOUR = 60
HOUR_PLACES = Decimal("0.0001")
UNIT = "/h"
API_UNIT = "per node-minute"


def per_hour(price_per_minute: Decimal) -> Decimal:
    """A per node-minute price as per node-hour, rounded to the 4 places every page shows."""
    return (Decimal(price_per_minute) * MINUTES_PER_HOUR).quantize(HOUR_PLACES, rounding=ROUND_HALF_UP)


def hourly(price_per_minute: Decimal | None) -> str:
    """The price as a person reads it: "0.4950 /h"; "–" when there is none."""
    if price_per_minute is None:
        return "–"
    return f"{per_hour(price_per_minute)} {UNIT}"


def from_hourly(price_per_hour: Decimal, places: Decimal) -> Decimal:
    """A price typed per node-hour as the API's per node-minute, rounded to `places`."""
    return (Decimal(price_per_hour) / MINUTES_PER_HOUR).quantize(places, rounding=ROUND_HALF_UP)
