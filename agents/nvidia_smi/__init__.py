"""Pure parsers for `nvidia-smi` output: text in, `GpuFact`s out. No I/O, no subprocess.

One module per format (tried on the real captures in tests/fixtures/nvidia-smi):

* `csv`: `--query-gpu` CSV with or without header and units (a header maps columns by field
  name in any order, otherwise the given field list does), and `--query-compute-apps` CSV;
* `text`: `-L` with MIG devices, the driver/CUDA banner, and "lost GPU" error lines;
* `xml`: `-q -x` XML (DTD v8 to v12);
* `report`: the sectioned report of the SSH agent's remote script (`read_host_report`), which
  combines the three above;
* `values`: what they share: value cleaning, health, the error type.

Every value nvidia-smi cannot give (`[N/A]`, `N/A`, `[Not Supported]`, `[Unknown Error]`,
`[Requested functionality has been deprecated]`, empty) becomes None; parsers never raise on odd
values. Only `report.read_host_report` and `xml.parse_query_xml` raise (`NvidiaSmiError`), when
a host's output is unusable as a whole.
"""
