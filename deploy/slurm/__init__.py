"""Slurm integration: systemd units, controller prolog/epilog hooks (deploy/slurm/README.md)."""
