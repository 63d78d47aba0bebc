"""Fakes of hardware libraries, built from captures of real machines (tests/fixtures)."""
