"""Preset TOML files (package data)."""
