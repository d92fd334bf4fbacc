"""The spot market's pure rules: the price engine, bids, billing, inventory, price sources. No Django."""
