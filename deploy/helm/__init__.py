"""Kubernetes manifests of faultline (Kustomize base and overlays) and their offline check."""
