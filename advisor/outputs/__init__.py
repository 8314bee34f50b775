"""Outputs and exports: the terminal and JSON report, Prometheus metrics, the fleet view, Kubernetes manifests, size's words, snapshots."""
