"""Out-of-band evidence from the BMC: System Event Log lines."""

from __future__ import annotations

from producers.bmc.sel import component_of, is_hardware_fault, parse_sel_line

__all__ = ["component_of", "is_hardware_fault", "parse_sel_line"]
