"""The API plumbing shared by the DLC (2020-12-03) and PaiStudio (2022-01-12) endpoints.

`auth` checks the SDK's ACS3-HMAC-SHA256 signature, `errors` gives every failure the SDK's shape
(`Code`, `Message`, `RequestId`, HTTP status), `views` is the base view the endpoints build on,
`params` parses query and body values with errors that name the field, and `urls` is the route table.
"""
