"""Connectors: everything that talks to the places GPUs live. No Django models in here.

* `base`: the `Connector` interface, the facts and binding status it speaks, its timeouts and the
  one retry loop; `registry`: source kind → connector class, found by walking this package.
* One module per source kind: `simulated`, `ssh`, `kubernetes`. A new kind is one more module.
* Helpers of a kind, each with one job: `ssh_session` (a pinned, bounded SSH session),
  `ssh_scripts` (the remote sh scripts); `k8s_api` (the API server client), `k8s_resources`
  (GPU resources and their synthetic UUIDs), `k8s_nodes` (Node → HostFact), `k8s_pod_manifest`
  and `k8s_pod_status` (a lease's Pod); `nvidia_smi/` (pure parsers, one module per format).
"""
