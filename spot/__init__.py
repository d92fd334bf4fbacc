"""The spot market on the database: pools, price history and its tick, stock, bills.

Its pure rules live in market/ (engine: the price; pricesource: model or replayed history;
bids: SpotSpec rules and what a bid is worth; billing: per-minute daily bills), benchmarked by
bench/spot_market.py. Stock (SpotStockStatus, the pay-as-you-go reserve) is the scheduler's
rule, scheduler.spot.stock_status; spot.pool counts the pools it reads. All prices are Decimal
per node-minute.

What other apps call:
    spot.market_state.current_markets(now) -> {instance_type: Market(price, avg_last_hour, stock_status)}
    spot.market_state.spot_offers(now) -> [SpotOffer]            ListEcsSpecs, the spec picker
    spot.market_state.price_history(instance_type, start, end)   History Price, GetSpotPriceHistory
    spot.bills.bill_jobs(days, now) -> [DailyBill];  spot.bills.job_cost(job)
    spot.ticker.market_tick(now) -> [PriceHistory]
    spot.backfill.backfill_history(days, now) -> rows written
Celery: spot.tasks.market_tick, spot.tasks.bill_today, spot.tasks.close_yesterday.
"""
