"""Serving: the endpoint's assembly and validation, and the HTTP server that runs it."""
