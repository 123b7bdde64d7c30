"""The `gpupool` command-line client: talks to the REST API (/api/v1/) with a token."""

__version__ = "0.1.0"
