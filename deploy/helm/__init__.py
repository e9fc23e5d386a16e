"""faultline's Helm chart (``faultline/``) and its offline check (``validate.py``)."""
