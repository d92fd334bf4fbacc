"""The SDK API plumbing under every endpoint (DLC 2020-12-03, PaiStudio 2022-01-12).

`acs3` checks the SDK's ACS3-HMAC-SHA256 signature (pure), `auth` does it for DRF against the
stored AccessKeys (`models`), `errors` gives every failure the SDK's shape (`Code`, `Message`,
`RequestId`, HTTP status), `views` is the base view the endpoints build on, and `params` /
`pagination` parse query and body values with errors that name the field.
"""
