"""Shipped TOML profiles (package data)."""
