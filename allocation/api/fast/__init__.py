"""The hot lease endpoints (`POST leases/`, `GET leases/{id}/`, `POST leases/{id}/release/`,
`POST leases/{id}/renew/`) served beside Django's middleware and DRF's request/response machinery
(app.py), for the requests that need none of it: token-authenticated JSON with the common body
shapes (inputs.py). Every other request, and every one of these it has any doubt about, goes the
generic way (pool.asgi). `GPUPOOL_LEASE_FAST_PATH=0` turns it off (the baseline of
bench/bench_lease_path.py)."""
