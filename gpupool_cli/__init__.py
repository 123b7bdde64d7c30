"""The `gpupool` command-line client (talks to the REST API)."""
