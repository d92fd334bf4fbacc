"""The spot market's pure rules: the price engine, bids, billing, price sources. No Django.

Stock (SpotStockStatus, the pay-as-you-go reserve) is the scheduler's rule: scheduler/spot.py."""
