"""The SDK API actions (DLC 2020-12-03, PaiStudio 2022-01-12): thin views over the services."""
