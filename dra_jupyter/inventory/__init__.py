"""Simulated device inventories, shaped exactly like what real DRA drivers publish."""
