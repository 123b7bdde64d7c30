"""A lease's workload: starting, stopping and watching it (binding), and stopping an ended lease's
workload with notice and backoff until its host confirms it gone (stopping)."""
