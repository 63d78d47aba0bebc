"""The local backend: one machine, devices from NVML or a simulated inventory, a SQLite ledger."""
