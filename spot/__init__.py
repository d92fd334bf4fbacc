"""The spot market against the database: prices now, price history, the public pools and bills.

The pure rules it applies live in the `market` package (no Django; tested alone and benchmarked by
bench/spot_market.py): engine (the price engine), pricesource (model or replayed history),
inventory (SpotStockStatus), bids (SpotSpec rules), billing (per-minute daily bills). All prices
are Decimal per node-minute.

What other apps call:
    spot.market_state.current_markets(now) -> {instance_type: Market(price, avg_last_hour, stock_status)}
    spot.market_state.spot_offers(now) -> [SpotOffer]            ListEcsSpecs, the spec picker
    spot.market_state.price_history(instance_type, start, end)   History Price, GetSpotPriceHistory
    spot.bills.bill_jobs(days, now) -> [DailyBill];  spot.bills.job_cost(job)
    spot.ticker.market_tick(now) -> [PriceHistory]
    spot.backfill.backfill_history(days, now) -> rows written
Celery: spot.tasks.market_tick, spot.tasks.bill_today, spot.tasks.close_yesterday.
"""
